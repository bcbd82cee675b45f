"""Pooling and head registries: how encoder states become four 1-5 scores.

Pooling (``model.pooling``):
- ``cls``: final [CLS] state through the family's standard classification pooler (exportable);
- ``cls_raw``: the final [CLS] state itself (the paper's literal description);
- ``mean``: mean of the final states over non-padding tokens;
- ``last_token``: the final state of the last non-padding token (left or right padding), as decoder
  embedding models and the ``omniscore`` package's ``last_token`` strategy pool;
- ``layer_mix_cls`` / ``layer_mix_mean``: a learned softmax-weighted mix of every layer (COMET), then
  cls / mean.

Every pooling also takes packed rows (``segment_ids``, several examples per row): it then pools each
segment on its own ([CLS] = the segment's first token, mean over the segment's tokens) and returns
[B * K, H] for K segment slots per row, in row-major order.

Heads (``model.head``) return raw outputs and define ``scores(outputs) -> [B, 4]`` on the 1-5 scale
and the loss they train with by default (``loss.name: auto``):
- ``linear_sigmoid``: four linear heads, ``1 + 4 sigmoid`` (paper default; loss ``mse``);
- ``shared_mlp``: dense -> GELU -> dropout trunk shared by the dimensions, then four outputs (``mse``);
- ``ordinal``: cumulative-link head: one projection per dimension and 4 ordered thresholds,
  ``P(y > k) = sigmoid(g - t_k)``; expected score ``1 + sum_k P(y > k)`` (``ordinal``);
- ``classification``: 5-way softmax per dimension, expected score ``sum_c c p_c`` (``cross_entropy``).

``ordinal`` and ``classification`` also define ``level_probs(outputs) -> [B, 4, 5]``, a distribution
over levels 1..5 per dimension: its standard deviation is the model's uncertainty.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from omnidistill.dimensions import NUM_DIMENSIONS, NUM_LEVELS, SCORE_MAX, SCORE_MIN
from omnidistill.models.layers import dropout

_INIT = nnx.initializers.normal(0.02)


def masked_mean(hidden: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Mean over non-padding positions, in float32."""
    m = attention_mask.astype(jnp.float32)[..., None]
    return jnp.sum(hidden.astype(jnp.float32) * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)


def segment_one_hot(segment_ids: jax.Array, num_segments: int) -> jax.Array:
    """[B, S] segment ids -> boolean [B, K, S]: token s belongs to segment k + 1."""
    return segment_ids[:, None, :] == jnp.arange(1, num_segments + 1, dtype=segment_ids.dtype)[None, :, None]


def first_token(hidden: jax.Array, segment_ids: jax.Array | None, num_segments: int) -> jax.Array:
    """The first token's state of each row ([B, H]), or of each segment of packed rows ([B * K, H])."""
    if segment_ids is None:
        return hidden[:, 0]
    starts = jnp.argmax(segment_one_hot(segment_ids, num_segments), axis=-1)  # [B, K]; 0 for empty slots
    firsts = jnp.take_along_axis(hidden, starts[..., None], axis=1)
    return firsts.reshape(-1, hidden.shape[-1])


def mean_tokens(hidden: jax.Array, attention_mask: jax.Array, segment_ids: jax.Array | None, num_segments: int) -> jax.Array:
    """Mean over each row's real tokens ([B, H]), or over each segment of packed rows ([B * K, H])."""
    if segment_ids is None:
        return masked_mean(hidden, attention_mask)
    member = segment_one_hot(segment_ids, num_segments).astype(jnp.float32)
    sums = jnp.einsum("bks,bsh->bkh", member, hidden.astype(jnp.float32))
    means = sums / jnp.maximum(jnp.sum(member, axis=-1), 1.0)[..., None]
    return means.reshape(-1, hidden.shape[-1])


def last_token(hidden: jax.Array, attention_mask: jax.Array, segment_ids: jax.Array | None, num_segments: int) -> jax.Array:
    """The last real token's state of each row ([B, H]; right or left padding), or of each segment of
    packed rows ([B * K, H])."""
    index = jnp.arange(hidden.shape[1], dtype=jnp.int32)
    if segment_ids is None:
        last = jnp.argmax(jnp.where(attention_mask > 0, index[None, :], -1), axis=-1)
        return jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
    member = segment_one_hot(segment_ids, num_segments)  # [B, K, S]
    last = jnp.argmax(jnp.where(member, index[None, None, :], -1), axis=-1)  # [B, K]; 0 for empty slots
    return jnp.take_along_axis(hidden, last[..., None], axis=1).reshape(-1, hidden.shape[-1])


class Pooling(nnx.Module):
    """Base class: ``__call__(states, attention_mask, segment_ids=None, num_segments=1)`` where
    ``states`` is the list of layer outputs."""

    uses_family_pooler = False
    needs_all_layers = False
    reads_first_token_only = False
    """Whether it reads the last hidden state of each row's first position and nothing else."""

    def __init__(self, num_states: int, *, rngs: nnx.Rngs):
        del num_states, rngs


class ClsPooling(Pooling):
    uses_family_pooler = True
    reads_first_token_only = True

    def __call__(self, states: list[jax.Array], attention_mask: jax.Array, segment_ids=None, num_segments: int = 1) -> jax.Array:
        return first_token(states[-1], segment_ids, num_segments)


class ClsRawPooling(Pooling):
    reads_first_token_only = True

    def __call__(self, states: list[jax.Array], attention_mask: jax.Array, segment_ids=None, num_segments: int = 1) -> jax.Array:
        return first_token(states[-1], segment_ids, num_segments)


class MeanPooling(Pooling):
    def __call__(self, states: list[jax.Array], attention_mask: jax.Array, segment_ids=None, num_segments: int = 1) -> jax.Array:
        return mean_tokens(states[-1], attention_mask, segment_ids, num_segments)


class LastTokenPooling(Pooling):
    def __call__(self, states: list[jax.Array], attention_mask: jax.Array, segment_ids=None, num_segments: int = 1) -> jax.Array:
        return last_token(states[-1], attention_mask, segment_ids, num_segments)


class LayerMix(Pooling):
    """COMET-style scalar mix: ``gamma * sum_l softmax(w)_l * h_l`` over embeddings + every layer."""

    needs_all_layers = True
    reduce = "cls"

    def __init__(self, num_states: int, *, rngs: nnx.Rngs):
        self.weights = nnx.Param(jnp.zeros((num_states,), jnp.float32))
        self.gamma = nnx.Param(jnp.ones((), jnp.float32))

    def mix(self, states: list[jax.Array]) -> jax.Array:
        w = jax.nn.softmax(self.weights[...])
        return self.gamma[...] * sum(w[i] * s.astype(jnp.float32) for i, s in enumerate(states))

    def __call__(self, states: list[jax.Array], attention_mask: jax.Array, segment_ids=None, num_segments: int = 1) -> jax.Array:
        mixed = self.mix(states)
        if self.reduce == "cls":
            return first_token(mixed, segment_ids, num_segments)
        return mean_tokens(mixed, attention_mask, segment_ids, num_segments)


class LayerMixMean(LayerMix):
    reduce = "mean"


POOLINGS: dict[str, type[Pooling]] = {
    "cls": ClsPooling,
    "cls_raw": ClsRawPooling,
    "mean": MeanPooling,
    "last_token": LastTokenPooling,
    "layer_mix_cls": LayerMix,
    "layer_mix_mean": LayerMixMean,
}


def sigmoid_scores(logits: jax.Array) -> jax.Array:
    return SCORE_MIN + (SCORE_MAX - SCORE_MIN) * jax.nn.sigmoid(logits)


def _require_bias(bias: bool, head: str) -> None:
    if not bias:
        raise ValueError(f"model.head_bias=false applies to the linear_sigmoid head only, not model.head={head!r}")


class LinearSigmoidHead(nnx.Module):
    """Four independent linear heads (one [H, 4] matrix); score = 1 + 4 * sigmoid(logit)."""

    default_loss = "mse"

    def __init__(self, features: int, *, hidden: int = 0, dropout_rate: float = 0.0, bias: bool = True, rngs: nnx.Rngs):
        del hidden, dropout_rate
        self.linear = nnx.Linear(features, NUM_DIMENSIONS, use_bias=bias, param_dtype=jnp.float32, kernel_init=_INIT, rngs=rngs)

    def __call__(self, pooled: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        return self.linear(pooled.astype(jnp.float32))

    def scores(self, outputs: jax.Array) -> jax.Array:
        return sigmoid_scores(outputs)


class SharedMLPHead(nnx.Module):
    """A shared dense -> GELU -> dropout trunk, then four linear outputs with ``1 + 4 sigmoid``."""

    default_loss = "mse"

    def __init__(self, features: int, *, hidden: int = 256, dropout_rate: float = 0.1, bias: bool = True, rngs: nnx.Rngs):
        _require_bias(bias, "shared_mlp")
        self.trunk = nnx.Linear(features, hidden, param_dtype=jnp.float32, kernel_init=_INIT, rngs=rngs)
        self.out = nnx.Linear(hidden, NUM_DIMENSIONS, param_dtype=jnp.float32, kernel_init=_INIT, rngs=rngs)
        self.dropout_rate = dropout_rate

    def __call__(self, pooled: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        h = jax.nn.gelu(self.trunk(pooled.astype(jnp.float32)), approximate=False)
        return self.out(dropout(h, self.dropout_rate, rng))

    def scores(self, outputs: jax.Array) -> jax.Array:
        return sigmoid_scores(outputs)


class OrdinalHead(nnx.Module):
    """Cumulative-link ordinal head. Outputs [B, 4 dims, 4 thresholds] logits of ``P(y > k)``, k = 1..4.

    Thresholds are kept ordered (t_1 + cumulative softplus), so the probabilities are monotone.
    """

    default_loss = "ordinal"

    def __init__(self, features: int, *, hidden: int = 0, dropout_rate: float = 0.0, bias: bool = True, rngs: nnx.Rngs):
        del hidden, dropout_rate
        _require_bias(bias, "ordinal")
        self.projection = nnx.Linear(features, NUM_DIMENSIONS, use_bias=False, param_dtype=jnp.float32, kernel_init=_INIT, rngs=rngs)
        self.first_threshold = nnx.Param(jnp.full((NUM_DIMENSIONS,), -1.5, jnp.float32))
        self.threshold_gaps = nnx.Param(jnp.full((NUM_DIMENSIONS, NUM_LEVELS - 2), 0.5413, jnp.float32))  # softplus -> 1.0

    def thresholds(self) -> jax.Array:
        gaps = jax.nn.softplus(self.threshold_gaps[...])
        first = self.first_threshold[...][:, None]
        return jnp.concatenate([first, first + jnp.cumsum(gaps, axis=1)], axis=1)  # [4 dims, 4]

    def __call__(self, pooled: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        g = self.projection(pooled.astype(jnp.float32))  # [B, 4]
        return g[:, :, None] - self.thresholds()[None]

    def scores(self, outputs: jax.Array) -> jax.Array:
        return SCORE_MIN + jnp.sum(jax.nn.sigmoid(outputs), axis=-1)

    def level_probs(self, outputs: jax.Array) -> jax.Array:
        """[B, 4, 5] probabilities of levels 1..5: ``P(y > k - 1) - P(y > k)`` (ordered thresholds keep
        them non-negative); their expected value is :meth:`scores`."""
        above = jax.nn.sigmoid(outputs)  # P(y > 1..4)
        ones, zeros = jnp.ones_like(above[..., :1]), jnp.zeros_like(above[..., :1])
        return jnp.concatenate([ones, above], axis=-1) - jnp.concatenate([above, zeros], axis=-1)


class ClassificationHead(nnx.Module):
    """Five-way classification per dimension; the score is the expectation over levels 1..5."""

    default_loss = "cross_entropy"

    def __init__(self, features: int, *, hidden: int = 0, dropout_rate: float = 0.0, bias: bool = True, rngs: nnx.Rngs):
        del hidden, dropout_rate
        _require_bias(bias, "classification")
        self.linear = nnx.Linear(features, NUM_DIMENSIONS * NUM_LEVELS, param_dtype=jnp.float32, kernel_init=_INIT, rngs=rngs)

    def __call__(self, pooled: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        return self.linear(pooled.astype(jnp.float32)).reshape(pooled.shape[0], NUM_DIMENSIONS, NUM_LEVELS)

    def scores(self, outputs: jax.Array) -> jax.Array:
        levels = jnp.arange(1, NUM_LEVELS + 1, dtype=jnp.float32)
        return jnp.sum(jax.nn.softmax(outputs, axis=-1) * levels, axis=-1)

    def level_probs(self, outputs: jax.Array) -> jax.Array:
        """[B, 4, 5] softmax over levels 1..5 per dimension."""
        return jax.nn.softmax(outputs, axis=-1)


HEADS: dict[str, type[nnx.Module]] = {
    "linear_sigmoid": LinearSigmoidHead,
    "shared_mlp": SharedMLPHead,
    "ordinal": OrdinalHead,
    "classification": ClassificationHead,
}


def lookup(registry: dict, name: str, what: str):
    """Registry lookup with an error that lists the valid names."""
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r} (available: {', '.join(sorted(registry))})") from None
