"""Loss registry. A loss maps (logits, scores, labels, mask) to (sum over valid cells, number of cells).

Returning a sum and a count (not a mean) keeps gradient accumulation and multi-device reduction exact:
the train step divides once by the global count. Missing dimensions have mask 0 and contribute nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

LossFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]


def masked_mse(logits: jax.Array, scores: jax.Array, labels: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Squared error on the 1-5 scale over the valid (item, dimension) cells (the OmniScore objective)."""
    del logits
    err = (scores - labels) ** 2
    return jnp.sum(err * mask), jnp.sum(mask)


LOSSES: dict[str, LossFn] = {"mse": masked_mse}


def get_loss(name: str) -> LossFn:
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r} (available: {', '.join(sorted(LOSSES))})") from None
