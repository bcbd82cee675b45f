"""score_file's running means: per chunk, as the items one by one, against numpy's own means."""

from __future__ import annotations

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


def test_a_chunk_with_fewer_scores_than_records_is_an_error():
    records, scores = items(5)
    with pytest.raises(ValueError, match="5 records but 4 rows"):
        GroupMeans().add_chunk(records, scores[:4])
