"""Metrics per value of a field of the user's own (``eval --group-by system``): the item-level metrics
of each value, its mean prediction and label, and the group level, against numpy and scipy."""

import json

import numpy as np
import pytest
from scipy import stats

from omnidistill.cli import main
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.by_field import field_report


def test_group_level_is_scipys_correlation_of_the_values_means():
    rng = np.random.default_rng(0)
    n = 200
    gold = rng.integers(1, 6, (n, 4)).astype(float)
    pred = np.clip(gold + rng.normal(0, 0.8, (n, 4)), 1, 5)
    mask = rng.random((n, 4)) > 0.2
    mask[:, 3] = False
    mask[[10, 11, 15, 16], 3] = True  # faithfulness is labelled on s0 and s1 only: no group level
    values = [f"s{i % 5}" for i in range(n)]
    values[:7] = ["(none)"] * 7  # items without the field: a row of their own, not a value in the group level
    out = field_report(pred, gold, mask, values)
    assert list(out["groups"]) == ["(none)", "s0", "s1", "s2", "s3", "s4"]
    names = np.asarray(values)
    means = {}
    for d, dim in enumerate(DIMENSIONS):
        for value in out["groups"]:
            cells = (names == value) & mask[:, d]
            got = out["groups"][value]
            if cells.any():
                assert got["mean_pred"][dim] == pytest.approx(pred[cells, d].mean(), abs=1e-12)
                assert got["mean_label"][dim] == pytest.approx(gold[cells, d].mean(), abs=1e-12)
                if value != "(none)":
                    means.setdefault(dim, []).append((pred[cells, d].mean(), gold[cells, d].mean()))
            else:
                assert np.isnan(got["mean_pred"][dim])
        level = out["group_level"][dim]
        if dim == "faithfulness":
            assert level["groups"] == 2 and np.isnan(level["pearson"]) and np.isnan(level["kendall"])
            continue
        p, g = np.asarray(means[dim]).T
        assert level["groups"] == 5
        assert level["pearson"] == pytest.approx(stats.pearsonr(p, g).statistic, abs=1e-12)
        assert level["kendall"] == pytest.approx(stats.kendalltau(p, g).statistic, abs=1e-12)
    s1 = names == "s1"
    err = np.abs(pred[s1] - gold[s1])[mask[s1]]
    assert out["groups"]["s1"]["mae"] == pytest.approx(err.mean(), abs=1e-12)
    assert out["groups"]["s1"]["items"] == int(mask[s1].any(axis=1).sum())


def test_eval_groups_by_a_field_of_your_own_from_the_cli(trained_tiny, repo_root, tmp_path, capsys):
    rows = [json.loads(line) for line in (repo_root / "data" / "sample" / "test.jsonl").read_text().splitlines()][:60]
    for i, row in enumerate(rows):
        row["prompt_id"] = i
        if i % 10:  # every tenth item has no system
            row["system"] = f"sys{i % 3}"
    data = tmp_path / "systems.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    out = tmp_path / "ev"
    args = ["eval", str(trained_tiny), "--data", str(data), "--no-plots", "--bootstrap", "0", "--out", str(out), "--group-by", "system"]
    assert main(args) == 2  # prompt_id is neither grouped by nor kept: refused, as any field outside the schema
    assert "unknown field(s) prompt_id" in capsys.readouterr().err
    judge = tmp_path / "judge.jsonl"  # a judge that says 3 everywhere, side by side per system too
    judge.write_text("".join(json.dumps({"id": r["id"], "labels": dict.fromkeys(DIMENSIONS, 3)}) + "\n" for r in rows))
    assert main([*args, "--keep-fields", "prompt_id", "--compare", f"three={judge}"]) == 0
    assert "### By system" in capsys.readouterr().out
    report = json.loads((out / "test.json").read_text())
    predictions = [json.loads(line) for line in (out / "test_predictions.jsonl").read_text().splitlines()]
    assert [p["prompt_id"] for p in predictions] == list(range(60))  # the kept fields come back with the predictions
    assert [p.get("system") for p in predictions] == [r.get("system") for r in rows]
    pred = np.array([[p["pred"][d] for d in DIMENSIONS] for p in predictions])
    gold = np.array([[r["labels"].get(d, np.nan) for d in DIMENSIONS] for r in rows], dtype=float)
    groups = report["by_field"]["system"]["groups"]
    assert set(groups) == {"(none)", "sys0", "sys1", "sys2"}
    for name, m in groups.items():
        rows_in = np.array([r.get("system", "(none)") == name for r in rows])
        err = np.abs(pred[rows_in] - gold[rows_in])
        assert m["mae"] == pytest.approx(np.nanmean(err), abs=1e-6)
        assert m["items"] == int(rows_in.sum())
    level = report["by_field"]["system"]["group_level"]["clarity"]
    mean_pred = [groups[s]["mean_pred"]["clarity"] for s in ("sys0", "sys1", "sys2")]
    mean_label = [groups[s]["mean_label"]["clarity"] for s in ("sys0", "sys1", "sys2")]
    assert level["groups"] == 3 and level["pearson"] == pytest.approx(stats.pearsonr(mean_pred, mean_label).statistic, abs=1e-9)
    assert "### By system" in (out / "test.md").read_text()
    compared = json.loads((out / "test_compare.json").read_text())["three"]["by_field"]["system"]
    for name in groups:
        rows_in = np.array([r.get("system", "(none)") == name for r in rows])
        assert compared[name]["mae"] == pytest.approx(np.nanmean(np.abs(gold[rows_in] - 3)), abs=1e-9)
    assert "MAE by system:" in (out / "test_compare.md").read_text()
