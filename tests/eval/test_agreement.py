"""Agreement statistics against hand-computed values and sklearn."""

import numpy as np
import pytest

from omnidistill.eval.agreement import cohen_kappa, fleiss_kappa, mean_rwg, round_scores, rwg_j
from omnidistill.eval.bootstrap import bootstrap_ci


def test_rwg_hand_computed_both_nulls():
    ratings = np.array([[4.0, 5.0], [5.0, 5.0], [3.0, 5.0]])  # dim 1 variance (ddof 1) = 1.0, dim 2 = 0
    s2 = 0.5
    uni = rwg_j(ratings, "uniform")
    assert uni["rwg_star"] == pytest.approx(1 - s2 / 2)
    assert uni["rwg_j"] == pytest.approx(2 * (1 - 0.25) / (2 * (1 - 0.25) + 0.25))
    assert rwg_j(ratings, "max_disagreement")["rwg_star"] == pytest.approx(1 - s2 / 4)
    assert rwg_j(np.array([[3.0, 3.0], [3.0, 3.0]]))["rwg_star"] == 1.0
    assert mean_rwg([ratings, ratings])["items"] == 2


def test_fleiss_kappa_textbook_example():
    # Fleiss (1971) style example from the literature: 10 subjects, 14 raters, 5 categories -> 0.210
    counts = np.array(
        [
            [0, 0, 0, 0, 14],
            [0, 2, 6, 4, 2],
            [0, 0, 3, 5, 6],
            [0, 3, 9, 2, 0],
            [2, 2, 8, 1, 1],
            [7, 7, 0, 0, 0],
            [3, 2, 6, 3, 0],
            [2, 5, 3, 2, 2],
            [6, 5, 2, 1, 0],
            [0, 2, 2, 3, 7],
        ]
    )
    assert fleiss_kappa(counts) == pytest.approx(0.2099, abs=1e-4)
    assert np.isnan(fleiss_kappa(np.array([[2, 0], [1, 0]])))  # unequal rater counts


def test_cohen_kappa_matches_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    a = rng.integers(1, 6, 300).astype(float)
    b = np.clip(a + rng.integers(-1, 2, 300), 1, 5) + rng.uniform(-0.4, 0.4, 300)
    ra, rb = round_scores(a), round_scores(b)
    assert cohen_kappa(a, b) == pytest.approx(metrics.cohen_kappa_score(ra, rb), abs=1e-12)
    assert cohen_kappa(a, b, "quadratic") == pytest.approx(metrics.cohen_kappa_score(ra, rb, weights="quadratic"), abs=1e-12)


def test_rounding_of_half_points():
    np.testing.assert_array_equal(round_scores([1.49, 1.5, 4.5, 5.7, 0.2]), [1, 2, 5, 5, 1])


def test_bootstrap_interval_contains_the_mean():
    rng = np.random.default_rng(0)
    x = rng.normal(3, 1, 500)
    lo, hi = bootstrap_ci(lambda idx: x[idx].mean(), len(x), samples=300)
    assert lo < x.mean() < hi and hi - lo < 0.3
