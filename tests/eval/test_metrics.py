"""Metrics against hand-computed values and scipy."""

import math

import numpy as np
import pytest

from omnidistill.data.schema import Record
from omnidistill.eval.correlation import pearson
from omnidistill.eval.metrics import cell_metrics, regression_metrics, weighted_group_mae
from omnidistill.eval.report import build_report, report_markdown


def test_cell_metrics_hand_computed():
    pred = np.array([1.0, 2.0, 4.0, 5.0])
    gold = np.array([1.0, 3.5, 3.0, 2.0])
    m = cell_metrics(pred, gold)
    # errors 0, -1.5, 1, 3 -> |e| mean 5.5/4, squares 0+2.25+1+9
    assert m["mae"] == pytest.approx(1.375)
    assert m["rmse"] == pytest.approx(math.sqrt(12.25 / 4))
    assert m["acc1"] == pytest.approx(0.5)  # |e| <= 1 for 0 and 1
    assert m["n"] == 4


def test_pearson_matches_scipy_and_degenerate_cases():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=50), rng.normal(size=50)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    assert math.isnan(pearson(np.ones(5), y[:5])) and math.isnan(pearson(x[:1], y[:1]))


def test_masks_and_per_dimension():
    pred = np.array([[2.0, 3.0, 4.0, 5.0], [1.0, 1.0, 1.0, 1.0]])
    gold = np.array([[2.0, 4.0, 0.0, 5.0], [3.0, 1.0, 0.0, 0.0]])
    mask = np.array([[1, 1, 0, 1], [1, 1, 0, 0]], bool)
    m = regression_metrics(pred, gold, mask)
    # valid cells: errs 0,1,0 | 2,0 -> mae 3/5
    assert m["mae"] == pytest.approx(0.6) and m["n"] == 5 and m["items"] == 2
    assert m["dimensions"]["informativeness"]["mae"] == pytest.approx(1.0)
    assert m["dimensions"]["plausibility"]["n"] == 0
    assert m["mae_dims"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)


def test_weighted_language_mae():
    per = {"en": {"items": 3, "mae": 1.0}, "hi": {"items": 1, "mae": 0.2}}
    assert weighted_group_mae(per) == pytest.approx((3 * 1.0 + 0.2) / 4)


def test_report_groups_by_task_and_language():
    recs = [
        Record(id="1", task="qa", lang="en", candidate="x", labels=(5.0, 5.0, 5.0, 5.0)),
        Record(id="2", task="mt", lang="hi", candidate="y", labels=(1.0, 1.0, None, 1.0)),
    ]
    pred = np.array([[4.0, 5.0, 5.0, 5.0], [1.0, 2.0, 3.0, 1.0]])
    rep = build_report(recs, pred)
    assert rep["by_task"]["qa"]["mae"] == pytest.approx(0.25)
    assert rep["by_lang"]["hi"]["mae"] == pytest.approx(1 / 3)
    assert rep["lang_mae_weighted"] == pytest.approx((0.25 + 1 / 3) / 2)
    text = report_markdown(rep)
    assert "| qa |" in text and "| hi |" in text and "Acc@±1" in text
