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


def _numpy_distribution_loss(outputs, dist, dist_mask, scores, labels, mask, mse_weight):
    z = outputs - outputs.max(-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
    ce = -(dist * log_p).sum(-1)
    total = (ce * dist_mask).sum() + mse_weight * (((scores - labels) ** 2) * mask).sum()
    cells = (dist_mask > 0) | ((mask > 0) & (mse_weight > 0))
    return total, cells.sum()


@pytest.mark.parametrize("mse_weight", [0.0, 0.5])
def test_distribution_loss_equals_a_numpy_reference(mse_weight):
    from omnidistill.losses import distribution_cross_entropy

    rng = np.random.default_rng(0)
    outputs = rng.normal(size=(6, 4, 5)).astype(np.float32) * 2
    dist = rng.dirichlet(np.ones(5), size=(6, 4)).astype(np.float32)
    dist[0, 2] = 0.0  # no distribution for this cell
    dist_mask = (dist.sum(-1) > 0) * np.array([1.0, 2.0, 1.0, 0.5], np.float32)
    labels = rng.uniform(1, 5, size=(6, 4)).astype(np.float32)
    mask = np.ones((6, 4), np.float32)
    mask[1, 3] = 0.0
    scores = (np.exp(outputs) / np.exp(outputs).sum(-1, keepdims=True) * np.arange(1, 6)).sum(-1)
    total, count = distribution_cross_entropy(
        jnp.asarray(outputs), jnp.asarray(scores), jnp.asarray(labels), jnp.asarray(mask),
        label_dist=jnp.asarray(dist), dist_mask=jnp.asarray(dist_mask), distribution_mse_weight=mse_weight,
    )  # fmt: skip
    want_total, want_count = _numpy_distribution_loss(outputs.astype(np.float64), dist, dist_mask, scores, labels, mask, mse_weight)
    assert float(total) == pytest.approx(want_total, rel=1e-5) and int(count) == want_count


def test_a_dimension_without_a_distribution_is_masked():
    from omnidistill.losses import distribution_cross_entropy

    dist = jnp.zeros((1, 4, 5)).at[0, :3, 2].set(1.0)  # faithfulness has none
    dist_mask = (jnp.sum(dist, -1) > 0).astype(jnp.float32)

    def loss(outputs):
        return distribution_cross_entropy(outputs, None, None, None, label_dist=dist, dist_mask=dist_mask)[0]

    outputs = jnp.asarray(np.random.default_rng(1).normal(size=(1, 4, 5)), jnp.float32)
    grad = jax.grad(loss)(outputs)
    assert np.all(np.asarray(grad[0, 3]) == 0) and np.all(np.abs(np.asarray(grad[0, :3])) > 0)
    assert int(distribution_cross_entropy(outputs, None, None, None, label_dist=dist, dist_mask=dist_mask)[1]) == 3
    with pytest.raises(ValueError, match=r"model\.head=classification"):
        distribution_cross_entropy(outputs[..., :4], None, None, None, label_dist=dist, dist_mask=dist_mask)


@pytest.mark.parametrize("name,levels", [("mse", 0), ("huber", 0), ("ordinal", 4), ("cross_entropy", 5), ("distribution", 5)])
@pytest.mark.parametrize("mse_weight", [0.0, 0.5])
def test_loss_cells_counts_from_the_masks_what_each_loss_returns(name, levels, mse_weight):
    """The count the train step scales the pairs' term by before any forward pass (train.step.batch_cells)."""
    from omnidistill.losses import get_loss, loss_cells

    rng = np.random.default_rng(2)
    outputs = jnp.asarray(rng.normal(size=(5, 4, levels) if levels else (5, 4)), jnp.float32)
    mask = jnp.asarray(rng.random((5, 4)) < 0.7, jnp.float32) * jnp.array([1.0, 0.0, 2.0, 1.0])
    dist = rng.dirichlet(np.ones(5), size=(5, 4)).astype(np.float32)
    dist[rng.random((5, 4)) < 0.4] = 0.0  # cells with a label and no distribution, and the other way round
    dist_mask = jnp.asarray(dist.sum(-1) > 0, jnp.float32)
    labels = jnp.asarray(rng.integers(1, 6, size=(5, 4)), jnp.float32)
    _, count = get_loss(name)(
        outputs, labels, labels, mask, label_dist=jnp.asarray(dist), dist_mask=dist_mask, distribution_mse_weight=mse_weight
    )
    assert int(loss_cells(name, mask, dist_mask, mse_weight)) == int(count)


def test_bradley_terry_is_the_negative_log_likelihood_of_the_choices():
    from scipy.special import log_expit

    from omnidistill.losses import bradley_terry

    margins = np.array([2.5, -0.3, 0.0, 4.0, -3.9])
    assert float(bradley_terry(jnp.asarray(margins, jnp.float32))) == pytest.approx(-np.sum(log_expit(margins)), rel=1e-6)
