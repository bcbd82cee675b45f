"""Loss registry, selected by ``loss.name`` (``auto`` = the head's own loss).

A loss maps (head outputs, scores, labels, mask) to (weighted sum over valid cells, number of cells);
the train step divides once by the global count, so accumulation and sharding stay exact. ``mask`` is
[B, 4] and already carries the per-dimension weights (``loss.dimension_weights``) and label masks.

- ``mse``: squared error of the 1-5 scores (OmniScore); any head.
- ``huber``: Huber / smooth-L1 of the scores with ``loss.huber_delta``; any head.
- ``ordinal``: binary cross-entropy of the 4 cumulative logits of the ``ordinal`` head against
  ``clip(y - k, 0, 1)``, which is the 0/1 cumulative target for integer labels and a soft target for
  fractional ones (e.g. the mean of several judges).
- ``cross_entropy``: cross-entropy of the ``classification`` head against a target that splits a
  fractional label between its two neighbouring levels (one-hot for integer labels).
- ``distribution``: cross-entropy of the ``classification`` head's softmax against the record's level
  distribution (``label_dist``, else its annotations' empirical distribution; see
  :mod:`omnidistill.data.level_dist`); a dimension without one is masked out. ``loss.distribution_mse_weight``
  adds that weight times the squared error of the expected score on the labelled cells. The count is the
  cells with a distribution or (when the MSE term is on) a label.
- ``loss.ranking_weight > 0`` adds a pairwise logistic ranking term over the items of a batch
  (per dimension, every pair with different labels; BLEURT-style), to any of the above.
- ``data.pairs`` adds a Bradley-Terry term over the teacher's pairwise choices (:func:`bradley_terry`),
  weighted by ``loss.pair_weight``, to any of the above.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from omnidistill.dimensions import NUM_LEVELS

LossFn = Callable[..., tuple[jax.Array, jax.Array]]


def masked_mse(outputs: jax.Array, scores: jax.Array, labels: jax.Array, mask: jax.Array, **_) -> tuple[jax.Array, jax.Array]:
    """Squared error on the 1-5 scale over the valid (item, dimension) cells."""
    err = (scores - labels) ** 2
    return jnp.sum(err * mask), jnp.sum(mask > 0)


def masked_huber(outputs, scores, labels, mask, *, huber_delta: float = 1.0, **_):
    err = jnp.abs(scores - labels)
    quad = jnp.minimum(err, huber_delta)
    loss = 0.5 * quad**2 + huber_delta * (err - quad)
    return jnp.sum(loss * mask), jnp.sum(mask > 0)


def cumulative_targets(labels: jax.Array) -> jax.Array:
    """[B, 4] labels -> [B, 4, 4] targets of P(y > k) for k = 1..4 (soft for fractional labels)."""
    k = jnp.arange(1, NUM_LEVELS, dtype=jnp.float32)
    return jnp.clip(labels[..., None] - k, 0.0, 1.0)


def ordinal_bce(outputs, scores, labels, mask, **_):
    if outputs.ndim != 3 or outputs.shape[-1] != NUM_LEVELS - 1:
        raise ValueError("loss 'ordinal' needs model.head=ordinal")
    t = cumulative_targets(labels)
    bce = jnp.maximum(outputs, 0) - outputs * t + jnp.log1p(jnp.exp(-jnp.abs(outputs)))
    return jnp.sum(jnp.sum(bce, axis=-1) * mask), jnp.sum(mask > 0)


def level_targets(labels: jax.Array) -> jax.Array:
    """[B, 4] labels in [1, 5] -> [B, 4, 5] distributions over levels (linear split between neighbours)."""
    levels = jnp.arange(1, NUM_LEVELS + 1, dtype=jnp.float32)
    return jnp.clip(1.0 - jnp.abs(labels[..., None] - levels), 0.0, 1.0)


def soft_cross_entropy(outputs, scores, labels, mask, **_):
    if outputs.ndim != 3 or outputs.shape[-1] != NUM_LEVELS:
        raise ValueError("loss 'cross_entropy' needs model.head=classification")
    ce = -jnp.sum(level_targets(labels) * jax.nn.log_softmax(outputs, axis=-1), axis=-1)
    return jnp.sum(ce * mask), jnp.sum(mask > 0)


def distribution_cross_entropy(outputs, scores, labels, mask, *, label_dist=None, dist_mask=None, distribution_mse_weight=0.0, **_):
    """``-sum_c q_c log p_c`` per cell with a distribution ``q`` (``dist_mask`` > 0, weighted by it), plus
    ``distribution_mse_weight * (score - label)^2`` on the labelled cells (``mask``)."""
    if outputs.ndim != 3 or outputs.shape[-1] != NUM_LEVELS:
        raise ValueError("loss 'distribution' needs model.head=classification (a softmax over levels 1..5 per dimension)")
    if label_dist is None or dist_mask is None:
        raise ValueError("loss 'distribution' needs batches with label_dist")
    ce = -jnp.sum(label_dist * jax.nn.log_softmax(outputs, axis=-1), axis=-1)
    total = jnp.sum(ce * dist_mask)
    if distribution_mse_weight > 0:
        total = total + distribution_mse_weight * jnp.sum((scores - labels) ** 2 * mask)
    return total, loss_cells("distribution", mask, dist_mask, distribution_mse_weight)


def pairwise_ranking(scores: jax.Array, labels: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Logistic loss ``log(1 + exp(-(s_i - s_j)))`` over pairs with ``y_i > y_j`` (per dimension)."""
    valid = (mask[:, None, :] > 0) & (mask[None, :, :] > 0)
    better = (labels[:, None, :] > labels[None, :, :]) & valid
    diff = scores[:, None, :] - scores[None, :, :]
    loss = jnp.where(better, jax.nn.softplus(-diff), 0.0)
    return jnp.sum(loss), jnp.sum(better)


def bradley_terry(margins: jax.Array) -> jax.Array:
    """Summed negative log-likelihood of the judge's choices under the Bradley-Terry model (Bradley &
    Terry 1952), ``P(w beats l) = sigmoid(s_w - s_l)``: ``sum log(1 + exp(-(s_w - s_l)))``. ``margins``:
    [P] the winner's score minus the loser's, each the mean of the four 1-5 scores (the judge chose the
    better response overall, CE-Judge section 3.3)."""
    return jnp.sum(jax.nn.softplus(-margins))


def loss_cells(name: str, mask: jax.Array, dist_mask: jax.Array | None, distribution_mse_weight: float = 0.0) -> jax.Array:
    """The number of cells loss ``name`` averages over (the count it returns), from the masks alone: the
    weighted label mask's nonzero cells; for ``distribution``, the cells with a distribution, and with
    ``distribution_mse_weight > 0`` also the labelled ones."""
    if name != "distribution":
        return jnp.sum(mask > 0)
    cells = dist_mask > 0
    if distribution_mse_weight > 0:
        cells = cells | (mask > 0)
    return jnp.sum(cells)


LOSSES: dict[str, LossFn] = {
    "mse": masked_mse,
    "huber": masked_huber,
    "ordinal": ordinal_bce,
    "cross_entropy": soft_cross_entropy,
    "distribution": distribution_cross_entropy,
}


def get_loss(name: str) -> LossFn:
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r} (available: auto, {', '.join(sorted(LOSSES))})") from None
