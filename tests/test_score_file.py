"""score_file's running means: per chunk, as the items one by one, against numpy's own means."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS
from omnidistill.score_file import GroupMeans


def items(n: int, seed: int = 0) -> tuple[list[Record], np.ndarray]:
    rng = np.random.default_rng(seed)
    tasks, langs = rng.choice(["qa", "mt", "chat"], n), rng.choice(["en", "hi", "zh", "ar"], n)
    records = [Record(id=str(i), task=str(t), lang=str(lang), candidate="x") for i, (t, lang) in enumerate(zip(tasks, langs, strict=True))]
    return records, rng.uniform(1, 5, (n, len(DIMENSIONS))).astype(np.float32)


def test_chunk_means_are_each_groups_mean_and_count():
    """Chunks of uneven sizes (one empty, one of a single item) after items added one by one, as a
    resumed ``score`` adds the kept lines: every group's count and mean is numpy's over its rows."""
    records, scores = items(1000)
    means = GroupMeans()
    for r, s in zip(records[:7], scores[:7], strict=True):
        means.add(r, s)
    for a, b in [(7, 400), (400, 400), (400, 401), (401, 1000)]:
        means.add_chunk(records[a:b], scores[a:b])
    groups = {"all": np.ones(len(records), bool)}
    for kind in ("task", "lang"):
        for name in {getattr(r, kind) for r in records}:
            groups[f"{kind}={name}"] = np.array([getattr(r, kind) == name for r in records])
    assert set(means.sums) == set(groups)
    for group, rows in groups.items():
        assert means.counts[group] == rows.sum()
        np.testing.assert_allclose(means.sums[group] / means.counts[group], scores[rows].astype(np.float64).mean(axis=0), rtol=1e-12)
    assert means.table().splitlines()[2].startswith("| all | 1000 |")


def test_means_per_value_of_a_field_of_your_own_or_the_schemas():
    """``score --group-by system,dataset``: a kept field and a schema field; a record without the field
    (or with null in it) is in ``(none)``, a number is its JSON text."""
    records, scores = items(300, seed=1)
    systems = [["a", "b", 7, None][i % 4] for i in range(len(records))]
    records = [
        dataclasses.replace(r, extra=None if i % 8 == 3 else {"system": systems[i]}, dataset="wmt" if i % 2 else None)
        for i, r in enumerate(records)
    ]
    means = GroupMeans(("task", "lang", "system", "dataset"))
    means.add(records[0], scores[0])
    means.add_chunk(records[1:], scores[1:])
    expect = {
        "system=a": [i % 4 == 0 for i in range(300)],
        "system=b": [i % 4 == 1 for i in range(300)],
        "system=7": [i % 4 == 2 for i in range(300)],
        "system=(none)": [i % 4 == 3 for i in range(300)],
        "dataset=wmt": [i % 2 == 1 for i in range(300)],
        "dataset=(none)": [i % 2 == 0 for i in range(300)],
    }
    for group, rows in expect.items():
        rows = np.array(rows)
        assert means.counts[group] == rows.sum()
        np.testing.assert_allclose(means.sums[group] / means.counts[group], scores[rows].astype(np.float64).mean(axis=0), rtol=1e-12)
    lines = means.table().splitlines()
    order = ["system=(none)", "system=7", "system=a", "system=b", "dataset=(none)", "dataset=wmt"]
    assert [line.split(" | ")[0].removeprefix("| ") for line in lines[-6:]] == order
    saved = means.as_dict()  # OUTPUT.means.json
    assert saved["items"] == 300 and list(saved["by"]) == ["task", "lang", "system", "dataset"]
    assert list(saved["by"]["system"]) == ["(none)", "7", "a", "b"]
    got = saved["by"]["system"]["a"]
    rows = np.array(expect["system=a"])
    assert got["items"] == rows.sum()
    np.testing.assert_allclose([got["means"][d] for d in DIMENSIONS], scores[rows].astype(np.float64).mean(axis=0), rtol=1e-12)


def test_a_chunk_with_fewer_scores_than_records_is_an_error():
    records, scores = items(5)
    with pytest.raises(ValueError, match="5 records but 4 rows"):
        GroupMeans().add_chunk(records, scores[:4])


def test_lines_from_heads_are_the_items_json_with_the_numbers_added_last():
    """An output line is its head (made where the chunk is read) and the numbers appended: the same text
    as ``json.dumps`` of the whole item, for unicode, a field of the user's own holding an object and
    a list, uncertainty, and ``--as-labels`` with and without level distributions."""
    import json

    from omnidistill.score_file import _item, label_lines, output_heads, score_lines

    records, scores = items(6, seed=2)
    records[1] = dataclasses.replace(
        records[1], candidate='Ünïcode "quoted" \\ tab\t', source="源文本", extra={"meta": {"a": [1, None]}, "n": 2.5}
    )
    records[2] = dataclasses.replace(records[2], question="Q?", reference="ref", group_id="g1", dataset="wmt")
    stds = np.random.default_rng(3).uniform(0, 1, scores.shape).astype(np.float32)
    probs = np.random.default_rng(4).dirichlet(np.ones(5), (len(records), len(DIMENSIONS)))

    def oracle(record, **fields):
        return json.dumps({**_item(record), **fields}, ensure_ascii=False) + "\n"

    def dims(values):
        return dict(zip(DIMENSIONS, values, strict=True))

    heads = output_heads(records)
    rows, clipped = scores.tolist(), np.clip(scores.astype(np.float64), 1, 5).tolist()
    dists = (probs / probs.sum(-1, keepdims=True)).tolist()
    assert score_lines(heads, scores) == "".join(oracle(r, scores=dims(s)) for r, s in zip(records, rows, strict=True))
    assert score_lines(heads, scores, stds) == "".join(
        oracle(r, scores=dims(s), uncertainty=dims(u)) for r, s, u in zip(records, rows, stds.tolist(), strict=True)
    )
    assert label_lines(heads, scores) == "".join(oracle(r, labels=dims(s)) for r, s in zip(records, clipped, strict=True))
    assert label_lines(heads, scores, probs) == "".join(
        oracle(r, labels=dims(s), label_dist=dims(d)) for r, s, d in zip(records, clipped, dists, strict=True)
    )
