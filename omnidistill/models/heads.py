"""Pooling and head registries: how encoder states become four 1-5 scores.

A head returns logits [B, 4] in float32 and knows how to turn them into scores.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from omnidistill.dimensions import NUM_DIMENSIONS, SCORE_MAX, SCORE_MIN


def cls_pooling(hidden: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """The first ([CLS]) token's final hidden state."""
    del attention_mask
    return hidden[:, 0]


POOLINGS: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {"cls": cls_pooling}


class LinearSigmoidHead(nnx.Module):
    """Four independent linear heads (one [4, H] matrix); score = 1 + 4 * sigmoid(logit)."""

    def __init__(self, features: int, *, rngs: nnx.Rngs):
        self.linear = nnx.Linear(features, NUM_DIMENSIONS, param_dtype=jnp.float32, kernel_init=nnx.initializers.normal(0.02), rngs=rngs)

    def __call__(self, pooled: jax.Array) -> jax.Array:
        return self.linear(pooled.astype(jnp.float32))

    @staticmethod
    def scores(logits: jax.Array) -> jax.Array:
        return SCORE_MIN + (SCORE_MAX - SCORE_MIN) * jax.nn.sigmoid(logits)


HEADS: dict[str, type[nnx.Module]] = {"linear_sigmoid": LinearSigmoidHead}


def lookup(registry: dict, name: str, what: str):
    """Registry lookup with an error that lists the valid names."""
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r} (available: {', '.join(sorted(registry))})") from None
