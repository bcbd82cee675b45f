"""Loss math: masks, weights, soft targets, ranking gradient sign."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omnidistill.losses import (
    cumulative_targets,
    level_targets,
    masked_huber,
    masked_mse,
    ordinal_bce,
    pairwise_ranking,
    soft_cross_entropy,
)

LABELS = jnp.array([[5.0, 1.0, 3.0, 2.0]])
SCORES = jnp.array([[4.0, 1.0, 5.0, 2.5]])
MASK = jnp.array([[1.0, 1.0, 0.0, 1.0]])


def test_mse_masks_missing_dimensions():
    total, count = masked_mse(None, SCORES, LABELS, MASK)
    assert float(total) == pytest.approx(1.0 + 0.0 + 0.25) and float(count) == 3


def test_dimension_weights_scale_cells():
    total, count = masked_mse(None, SCORES, LABELS, MASK * jnp.array([2.0, 1.0, 1.0, 0.5]))
    assert float(total) == pytest.approx(2.0 + 0.125) and float(count) == 3


def test_huber_is_quadratic_then_linear():
    total, _ = masked_huber(None, jnp.array([[1.5, 4.0, 1.0, 1.0]]), jnp.array([[1.0, 1.0, 1.0, 1.0]]), jnp.ones((1, 4)), huber_delta=1.0)
    assert float(total) == pytest.approx(0.5 * 0.25 + (0.5 + 2.0))


def test_cumulative_and_level_targets():
    np.testing.assert_allclose(cumulative_targets(jnp.array([3.0]))[0], [1, 1, 0, 0])
    np.testing.assert_allclose(cumulative_targets(jnp.array([3.5]))[0], [1, 1, 0.5, 0])
    np.testing.assert_allclose(level_targets(jnp.array([2.0]))[0], [0, 1, 0, 0, 0])
    np.testing.assert_allclose(level_targets(jnp.array([4.5]))[0], [0, 0, 0, 0.5, 0.5])


def test_ordinal_and_cross_entropy_are_minimised_at_the_label():
    labels = jnp.full((1, 4), 3.0)
    good = jnp.tile(jnp.array([20.0, 20.0, -20.0, -20.0]), (1, 4, 1))
    bad = -good
    assert float(ordinal_bce(good, None, labels, jnp.ones((1, 4)))[0]) < 1e-6 < float(ordinal_bce(bad, None, labels, jnp.ones((1, 4)))[0])
    onehot = jnp.tile(jnp.array([-20.0, -20.0, 20.0, -20.0, -20.0]), (1, 4, 1))
    assert float(soft_cross_entropy(onehot, None, labels, jnp.ones((1, 4)))[0]) < 1e-6
    with pytest.raises(ValueError, match=r"model\.head=ordinal"):
        ordinal_bce(SCORES, SCORES, LABELS, MASK)


def test_ranking_gradient_pushes_better_item_up():
    labels = jnp.array([[4.0] * 4, [2.0] * 4])
    scores = jnp.array([[3.0] * 4, [3.0] * 4])
    grad = jax.grad(lambda s: pairwise_ranking(s, labels, jnp.ones((2, 4)))[0])(scores)
    assert (grad[0] < 0).all() and (grad[1] > 0).all()  # descent raises item 0, lowers item 1
    _, pairs = pairwise_ranking(scores, labels, jnp.array([[1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))
    assert float(pairs) == 3
