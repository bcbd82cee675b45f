"""Paired tests between judges (``eval --compare``): Williams' test against a published value, the
paired bootstrap against recomputing each resample by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from omnidistill.eval.bootstrap import bootstrap_ci
from omnidistill.eval.significance import bootstrap_p, differences_markdown, judge_differences, paired_difference, williams_test


def test_williams_test_matches_the_published_example():
    """The example of the Python port of Graham & Baldwin's R script (nlp-williams, whose R original calls
    ``psych::r.test``): r12 0.65, r13 0.55, r23 0.3, n 50 give the one-sided p 0.20928617286753592."""
    t, p = williams_test(0.65, 0.55, 0.3, 50, alternative="greater")
    assert p == pytest.approx(0.20928617286753592, abs=1e-12)
    assert williams_test(0.65, 0.55, 0.3, 50)[1] == pytest.approx(2 * 0.20928617286753592, abs=1e-12)
    assert williams_test(0.55, 0.65, 0.3, 50)[0] == pytest.approx(-t)  # symmetric in the two judges
    assert all(math.isnan(v) for v in williams_test(0.65, 0.55, 0.3, 3))  # n - 3 degrees of freedom
    with pytest.raises(ValueError, match="alternative"):
        williams_test(0.6, 0.5, 0.3, 50, alternative="less")


def test_williams_test_holds_its_size_under_the_null():
    """Drawn from a trivariate normal where both judges correlate 0.5 with the gold (and 0.4 with each
    other), the two-sided test at 0.05 rejects about 5% of 4,000 draws of 40 items; its t follows t(n − 3)."""
    rng = np.random.default_rng(0)
    cov = np.array([[1.0, 0.5, 0.5], [0.5, 1.0, 0.4], [0.5, 0.4, 1.0]])
    draws = rng.multivariate_normal(np.zeros(3), cov, size=(4000, 40))
    ts, ps = [], []
    for x in draws:
        r = np.corrcoef(x.T)
        t, p = williams_test(r[0, 1], r[0, 2], r[1, 2], 40)
        ts.append(t)
        ps.append(p)
    assert 0.04 <= np.mean(np.array(ps) < 0.05) <= 0.06
    assert stats.kstest(ts, stats.t(37).cdf).pvalue > 0.01


def test_paired_bootstrap_equals_recomputing_every_resample():
    """The vectorised paired differences equal the per-resample recomputation of ``bootstrap_ci``'s
    draws (the same seed draws the same resamples), cells a judge left unscored excluded for both."""
    rng = np.random.default_rng(1)
    n = 60
    gold = rng.integers(1, 6, (n, 4)).astype(float)
    mask = rng.random((n, 4)) > 0.1
    a = np.clip(gold + rng.normal(0, 0.6, (n, 4)), 1, 5)
    b = np.clip(gold + rng.normal(0, 0.9, (n, 4)), 1, 5)
    b[rng.random((n, 4)) < 0.1] = np.nan  # the other judge left some cells unscored
    diff = paired_difference(gold, mask, "a", a, "b", b, samples=200, seed=3)
    both = mask & np.isfinite(b)
    rows = both.any(axis=1)
    g, pa, pb, m = gold[rows], a[rows], b[rows], both[rows]

    def mae(pred, idx):
        sel = m[idx]
        return np.abs(pred[idx] - g[idx])[sel].mean()

    def pearson(pred, idx):
        sel = m[idx]
        return stats.pearsonr(pred[idx][sel], g[idx][sel])[0]

    def clarity_mae(pred, idx):
        sel = m[idx, 1]
        return np.abs(pred[idx, 1] - g[idx, 1])[sel].mean()

    for stat, got in (
        (mae, diff["pooled"]["mae"]),
        (pearson, diff["pooled"]["pearson"]),
        (clarity_mae, diff["dimensions"]["clarity"]["mae"]),
    ):
        full = np.arange(len(g))
        assert got["a"] == pytest.approx(stat(pa, full)) and got["b"] == pytest.approx(stat(pb, full))
        assert got["ci"] == pytest.approx(bootstrap_ci(lambda idx, s=stat: s(pa, idx) - s(pb, idx), len(g), samples=200, seed=3))
        by_hand = np.array([stat(pa, idx) - stat(pb, idx) for idx in np.random.default_rng(3).integers(0, len(g), (200, len(g)))])
        assert got["p"] == pytest.approx(bootstrap_p(by_hand))
    assert diff["items"] == int(rows.sum()) and diff["cells"] == int(m.sum())
    w = diff["dimensions"]["faithfulness"]["pearson"]
    on = m[:, 3]
    assert w["r_a"] == pytest.approx(stats.pearsonr(g[on, 3], pa[on, 3])[0])
    assert w["r_ab"] == pytest.approx(stats.pearsonr(pa[on, 3], pb[on, 3])[0]) and w["items"] == int(on.sum())


def test_bootstrap_p_never_reaches_zero_and_is_one_at_no_difference():
    assert bootstrap_p(np.full(999, 0.2)) == pytest.approx(2 / 1000)
    assert bootstrap_p(np.zeros(50)) == 1.0
    assert bootstrap_p(np.array([-1.0, 1.0, 2.0, 3.0])) == pytest.approx(2 * 2 / 5)


def test_a_better_judge_is_told_apart_and_an_equal_one_is_not():
    rng = np.random.default_rng(2)
    gold = rng.integers(1, 6, (300, 4)).astype(float)
    mask = np.ones_like(gold, bool)
    close, far = gold + rng.normal(0, 0.4, gold.shape), gold + rng.normal(0, 1.2, gold.shape)
    judges = {"close": close, "far": far, "same": close.copy()}
    out = judge_differences(gold, mask, judges, samples=500)
    assert [(d["a"], d["b"]) for d in out] == [("close", "far"), ("close", "same"), ("far", "same")]
    better = out[0]
    assert better["pooled"]["mae"]["ci"][1] < 0 and better["pooled"]["mae"]["p"] < 0.01
    assert better["pooled"]["pearson"]["ci"][0] > 0 and better["dimensions"]["clarity"]["pearson"]["p"] < 0.001
    equal = out[1]
    assert equal["pooled"]["mae"]["diff"] == 0 and equal["pooled"]["mae"]["p"] == 1.0
    assert (equal["dimensions"]["clarity"]["pearson"]["t"], equal["dimensions"]["clarity"]["pearson"]["p"]) == (0.0, 1.0)
    text = differences_markdown(out)
    assert "| close − far | 300 |" in text and "| far − same | clarity |" in text


def test_without_resamples_only_the_values_and_williams():
    gold = np.tile(np.arange(1.0, 6.0), 4).reshape(4, 5).T
    diff = paired_difference(gold, np.ones_like(gold, bool), "a", gold + 0.5, "b", gold, samples=0)
    assert diff["pooled"]["mae"]["diff"] == pytest.approx(0.5)
    assert all(math.isnan(v) for v in (*diff["pooled"]["mae"]["ci"], diff["pooled"]["mae"]["p"]))
    assert "no bootstrap; Williams' p" in differences_markdown([diff])
