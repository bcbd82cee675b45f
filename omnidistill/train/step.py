"""The jitted train step (one optimizer update, optionally over several micro-batches)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from omnidistill.config import LossConfig
from omnidistill.losses import bradley_terry, get_loss, loss_cells, pairwise_ranking
from omnidistill.train.state import TrainState

Batch = dict[str, jax.Array]


def resolve_loss_name(loss_cfg: LossConfig, head_default: str) -> str:
    return head_default if loss_cfg.name == "auto" else loss_cfg.name


PAIR_KEYS = ("pair_input_ids", "pair_attention_mask")
"""A batch's teacher preference pairs (``data.pairs``): [P, 2, S], the judge's winner first."""
PAIR_STREAM = 1
"""Folded into a step's dropout key for the preference pairs' forward pass (the batch's uses the key)."""


def example_arrays(batch: Batch) -> Batch:
    """The batch's per-example arrays, one row per example slot: ``labels``/``label_mask`` [N, 4],
    ``example_mask`` [N] and, when the batch has them, ``label_dist`` [N, 4, 5]. A packed batch (with
    ``segment_ids``; labels [B, K, 4]) gives B * K slots; a plain batch gives B."""
    keys = [k for k in ("labels", "label_mask", "example_mask", "label_dist") if k in batch]
    if "segment_ids" not in batch:
        return {k: batch[k] for k in keys}
    return {k: batch[k].reshape(-1, *batch[k].shape[2:]) for k in keys}


def forward_examples(model: Any, batch: Batch, rng: jax.Array | None) -> tuple[jax.Array, Batch]:
    """Head outputs per example slot [N, ...], and :func:`example_arrays` to match."""
    if "segment_ids" not in batch:
        return model(batch["input_ids"], batch["attention_mask"], rng=rng), example_arrays(batch)
    slots = batch["labels"].shape[1]
    outputs = model(batch["input_ids"], batch["attention_mask"], segment_ids=batch["segment_ids"], num_segments=slots, rng=rng)
    return outputs, example_arrays(batch)


def cell_masks(ex: Batch, loss_cfg: LossConfig) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """(label mask of the real examples, the same times ``loss.dimension_weights``, the level
    distributions' mask weighted alike or None) of :func:`example_arrays`."""
    weights = jnp.asarray(loss_cfg.dimension_weights, jnp.float32)
    mask = ex["label_mask"] * ex["example_mask"][:, None]
    dist = ex.get("label_dist")
    dist_mask = None if dist is None else (jnp.sum(dist, axis=-1) > 0) * ex["example_mask"][:, None] * weights
    return mask, mask * weights, dist_mask


def preference_margins(model: Any, batch: Batch, rng: jax.Array | None) -> jax.Array:
    """[P] overall score of each pair's winner minus its loser's (the mean of the four scores)."""
    ids, attention = batch["pair_input_ids"], batch["pair_attention_mask"]
    pairs, length = ids.shape[0], ids.shape[-1]
    outputs = model(ids.reshape(2 * pairs, length), attention.reshape(2 * pairs, length), rng=rng)
    overall = jnp.mean(model.scores(outputs), axis=-1).reshape(pairs, 2)
    return overall[:, 0] - overall[:, 1]


def pair_scale_of(loss_cfg: LossConfig, cells: jax.Array, pairs: int) -> jax.Array:
    """What the pairs' Bradley-Terry sum is multiplied by in the loss sum: ``loss.pair_weight * cells /
    pairs``, so that after the step's one division by the cells the pairs' term is ``pair_weight``
    times their mean (at least one cell, as the division takes)."""
    return loss_cfg.pair_weight * jnp.maximum(cells, 1) / pairs


def make_loss_fn(graphdef: nnx.GraphDef, loss_cfg: LossConfig) -> Callable:
    """(params, batch, rng, pair_scale=None) -> (loss sum, aux); plain or packed batches.

    aux: ``cells`` (the count the step divides by), ``abs_err`` (summed over the labelled cells) and,
    with preference pairs in the batch, ``pair_loss`` (the Bradley-Terry sum) and ``pair_agree`` (pairs
    the student orders as the judge chose). The pair sum enters the loss times ``pair_scale``, which the
    train step sets to :func:`pair_scale_of` the whole batch, so that the pairs' term is ``pair_weight``
    times their mean also over micro-batches; None takes this call's own cells and pairs."""

    def loss_fn(params: Any, batch: Batch, rng: jax.Array | None, pair_scale: jax.Array | None = None):
        model = nnx.merge(graphdef, params)
        loss_impl = get_loss(resolve_loss_name(loss_cfg, model.head.default_loss))
        outputs, ex = forward_examples(model, batch, rng)
        scores = model.scores(outputs)
        labels = ex["labels"]
        mask, weighted, dist_mask = cell_masks(ex, loss_cfg)
        total, count = loss_impl(
            outputs,
            scores,
            labels,
            weighted,
            huber_delta=loss_cfg.huber_delta,
            label_dist=ex.get("label_dist"),
            dist_mask=dist_mask,
            distribution_mse_weight=loss_cfg.distribution_mse_weight,
        )
        if loss_cfg.ranking_weight > 0:
            rank_sum, pairs = pairwise_ranking(scores, labels, mask)
            total = total + loss_cfg.ranking_weight * count * rank_sum / jnp.maximum(pairs, 1.0)
        aux = {"cells": count, "abs_err": jnp.sum(jnp.abs(scores - labels) * mask)}
        if "pair_input_ids" in batch:
            margins = preference_margins(model, batch, None if rng is None else jax.random.fold_in(rng, PAIR_STREAM))
            pair_sum = bradley_terry(margins)
            if pair_scale is None:
                pair_scale = pair_scale_of(loss_cfg, count, margins.shape[0])
            total = total + pair_scale * pair_sum
            aux.update(pair_loss=pair_sum, pair_agree=jnp.sum(margins > 0))
        return total, aux

    return loss_fn


def batch_cells(graphdef: nnx.GraphDef, params: Any, batch: Batch, loss_cfg: LossConfig) -> jax.Array:
    """The cells the loss averages over in the whole ``batch`` (what the micro-batches' ``cells`` add
    up to), from its masks alone, without a forward pass."""
    name = resolve_loss_name(loss_cfg, nnx.merge(graphdef, params).head.default_loss)
    _, weighted, dist_mask = cell_masks(example_arrays(batch), loss_cfg)
    return loss_cells(name, weighted, dist_mask, loss_cfg.distribution_mse_weight)


TRAIN_STEP_COMPILER_OPTIONS: dict[str, bool | int | float | str] = {"xla_cpu_copy_insertion_use_region_analysis": True}
"""XLA options every train step is compiled with, under ``train.compiler_options``. On CPU, XLA's copy
insertion by default copies every donated optimizer-state array (AdamW's two moments) before the
update writes it in place, since the old value has two readers (the moment's own update and the
parameter's); its region-based live-range analysis sees that both readers run first and keeps no copy.
A BERT-base-shaped step (4 layers, B4xS256, 2-core Zen 3) then copied no state array instead of 147,
ran 1.035-1.042x as fast and compiled in 4.1-4.2 s instead of 4.3-6.5; DeBERTa's CPU proxy's step
1.020-1.026x (docs/benchmarks.md, "Optimizer state copied at every step"). The values are the same to
the bit under XLA's CPU compile settings (tests/train/test_step_copies.py). The option is the CPU
compiler's; the GPU and TPU compilers do not read it."""


def train_step_compiler_options(options: Mapping[str, Any] | None = None) -> dict[str, bool | int | float | str]:
    """The train step's XLA options: :data:`TRAIN_STEP_COMPILER_OPTIONS` with ``options``
    (``train.compiler_options``) over them."""
    return {**TRAIN_STEP_COMPILER_OPTIONS, **(options or {})}


gradient_norm: Callable[[Any], jax.Array] = optax.tree.norm
"""The step's gradient norm; ``tools/bench_levers.py packed-vectors`` sets ``packed_vectors.packed_global_norm``."""


def update_is_finite(total: jax.Array, grads: Any, grad_norm: jax.Array) -> jax.Array:
    """Whether a step may update the state: its loss and its gradients' global norm are finite.

    The norm is finite exactly when every gradient is, unless the sum of squares overflows float32 (a
    norm above about 1.8e19, which also counts as non-finite). The step needs the norm for its metrics
    anyway, so this reads the gradients once; a finiteness test per array read them all a second time,
    in a reduction per array (``tools/bench_levers.py finite-per-array`` measures it, docs/benchmarks.md).
    ``grads`` is unused here; the lever's variant reads it.
    """
    del grads
    return jnp.isfinite(total) & jnp.isfinite(grad_norm)


def _micro_batches(batch: Batch, n: int) -> Batch:
    """[B, ...] -> [n, B/n, ...] taking every n-th row, so that each device keeps its own rows."""

    def split(x):
        rows = x.shape[0]
        return jnp.moveaxis(x.reshape(rows // n, n, *x.shape[1:]), 1, 0)

    return jax.tree.map(split, batch)


def make_train_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    *,
    loss_cfg: LossConfig | None = None,
    grad_accum: int = 1,
    dropout: bool = True,
) -> Callable[[TrainState, Batch], tuple[TrainState, dict[str, jax.Array]]]:
    """Build ``train_step(state, batch) -> (state, metrics)``; jit it with shardings and donation."""
    loss_cfg = loss_cfg or LossConfig()
    loss_fn = make_loss_fn(graphdef, loss_cfg)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def train_step(state: TrainState, batch: Batch):
        rng = jax.random.fold_in(state.rng, state.step) if dropout else None
        pair_scale = None
        if "pair_input_ids" in batch:
            pairs = batch["pair_input_ids"].shape[0]
            pair_scale = pair_scale_of(loss_cfg, batch_cells(graphdef, state.params, batch, loss_cfg), pairs)
        if grad_accum == 1:
            (total, aux), grads = grad_fn(state.params, batch, rng, pair_scale)
        else:
            micro = _micro_batches(batch, grad_accum)
            zeros = jax.tree.map(jnp.zeros_like, state.params)

            def body(carry, xs):
                g_acc, t_acc, aux_acc = carry
                mb, i = xs
                mrng = None if rng is None else jax.random.fold_in(rng, i)
                (t, a), g = grad_fn(state.params, mb, mrng, pair_scale)
                return (jax.tree.map(jnp.add, g_acc, g), t_acc + t, jax.tree.map(jnp.add, aux_acc, a)), None

            sums = ("cells", "abs_err", *(("pair_loss", "pair_agree") if pair_scale is not None else ()))
            init = (zeros, jnp.float32(0), {k: jnp.float32(0) for k in sums})
            (grads, total, aux), _ = jax.lax.scan(body, init, (micro, jnp.arange(grad_accum)))
        count = aux["cells"]
        denom = jnp.maximum(count, 1.0)
        grads = jax.tree.map(lambda g: g / denom, grads)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        # A non-finite loss or gradient leaves parameters and optimizer state untouched.
        grad_norm = gradient_norm(grads)
        finite = update_is_finite(total, grads, grad_norm)
        params = jax.tree.map(lambda new, old: jnp.where(finite, new, old), params, state.params)
        opt_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), opt_state, state.opt_state)
        metrics = {
            "finite": finite,
            "loss": total / denom,
            "mae": aux["abs_err"] / denom,
            "grad_norm": grad_norm,
            "cells": count,
            "tokens": jnp.sum(batch["attention_mask"]),
        }
        if "pair_input_ids" in batch:
            metrics.update(pair_loss=aux["pair_loss"] / pairs, pair_accuracy=aux["pair_agree"] / pairs)
        return TrainState(state.step + 1, params, opt_state, state.rng), metrics

    return train_step
