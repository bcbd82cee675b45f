"""Rank metrics against scipy and a brute-force O(n^2) reference, ties included."""

import itertools

import numpy as np
import pytest

from omnidistill.eval.correlation import rankdata, spearman
from omnidistill.eval.ranking import calibrate_epsilon, kendall_tau_b, pair_counts

stats = pytest.importorskip("scipy.stats")


def brute_counts(h, m, eps):
    c = d = th = tm = thm = 0
    for i, j in itertools.combinations(range(len(h)), 2):
        ht, mt = h[i] == h[j], abs(m[i] - m[j]) <= eps
        if ht and mt:
            thm += 1
        elif ht:
            th += 1
        elif mt:
            tm += 1
        elif np.sign(h[i] - h[j]) == np.sign(m[i] - m[j]):
            c += 1
        else:
            d += 1
    return c, d, th, tm, thm


def brute_best_acc(h, m):
    candidates = {0.0} | {abs(m[i] - m[j]) for i, j in itertools.combinations(range(len(h)), 2)}
    best = max(candidates, key=lambda e: ((lambda c: (c[0] + c[4]) / sum(c))(brute_counts(h, m, e)), -e))
    c = brute_counts(h, m, best)
    return best, (c[0] + c[4]) / sum(c)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("human", ["likert", "continuous"])  # <= 64 levels (suffix counts) and > 64 (Fenwick)
def test_pair_counts_match_brute_force(seed, human):
    rng = np.random.default_rng(seed)
    n = 60 if human == "likert" else 90
    h = rng.integers(1, 6, n).astype(float) if human == "likert" else np.round(rng.uniform(1, 5, n), 3)
    m = np.round(h + rng.normal(0, 1.2, n), 1)  # rounding creates exact metric ties too
    for eps in (0.0, 0.1, 0.5, 2.0):
        pc = pair_counts(h, m, eps)
        assert (pc.concordant, pc.discordant, pc.ties_human, pc.ties_metric, pc.ties_both) == brute_counts(h, m, eps)


@pytest.mark.parametrize("seed", range(4))
def test_calibration_sweep_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    h = rng.integers(1, 6, 35).astype(float)
    m = np.round(h + rng.normal(0, 1.0, 35), 2)
    eps, acc = brute_best_acc(h, m)
    cal = calibrate_epsilon(h, m)
    assert cal.acc_eq == pytest.approx(acc, abs=1e-12)
    assert cal.epsilon == pytest.approx(eps, abs=1e-6) and not cal.sampled


def test_calibration_rewards_ties_on_tied_gold():
    h = np.array([1, 1, 1, 5, 5, 5], float)
    m = np.array([1.0, 1.1, 1.2, 4.0, 4.1, 4.2])
    cal = calibrate_epsilon(h, m)
    assert cal.acc_eq == pytest.approx(1.0) and 0.2 <= cal.epsilon < 2.8


def test_sampled_calibration_is_flagged():
    rng = np.random.default_rng(0)
    h = rng.integers(1, 6, 400).astype(float)
    cal = calibrate_epsilon(h, h + rng.normal(0, 1, 400), max_pairs=5000)
    assert cal.sampled and 0 < cal.acc_eq < 1


def test_kendall_spearman_rank_match_scipy():
    rng = np.random.default_rng(1)
    h = rng.integers(1, 6, 200).astype(float)
    m = np.round(h + rng.normal(0, 1, 200), 1)
    assert kendall_tau_b(h, m) == pytest.approx(stats.kendalltau(h, m).statistic, abs=1e-12)
    assert spearman(h, m) == pytest.approx(stats.spearmanr(h, m).statistic, abs=1e-12)
    np.testing.assert_allclose(rankdata(m), stats.rankdata(m))
    for x in (h, h.astype(int), h[:1], h[:0], np.array([2.0, np.nan, 1.0])):  # 5 values among 200, one, none, a NaN
        np.testing.assert_array_equal(rankdata(x), stats.rankdata(x))


def test_hand_computed_small_case():
    h = np.array([1.0, 2.0, 2.0, 3.0])
    m = np.array([1.0, 3.0, 2.0, 2.5])
    pc = pair_counts(h, m, 0.0)
    # pairs: (1,2)C (1,3)C (1,4)C (2,3)Th (2,4)D (3,4)C
    assert (pc.concordant, pc.discordant, pc.ties_human, pc.ties_metric, pc.ties_both) == (4, 1, 1, 0, 0)
    assert pc.acc_eq == pytest.approx(4 / 6)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_scores_are_refused_not_ranked(bad):
    h, m = np.array([1.0, 2.0, 3.0, bad]), np.array([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="human scores must be finite: position 3"):
        pair_counts(h, m)
    with pytest.raises(ValueError, match="metric scores must be finite"):
        calibrate_epsilon(m, h)
