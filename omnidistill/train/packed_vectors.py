"""Optimizer arithmetic over a model's many small arrays as one vector (a GPU lever, not the default).

A BERT has about ten bias and norm vectors a layer. Updated one array at a time, each is a kernel of
about 1.5 µs on an H200 for 768 values, and so is each one's share of the gradient norm: about 0.45
ms of mBERT's 27.4 ms step (docs/benchmarks.md, ninth lease). Here the vectors are concatenated,
updated as one array and sliced back, which gives the same values elementwise.
``tools/bench_levers.py packed-vectors`` puts both in the train step: ``adamw_vectors_packed`` as each
group's AdamW (``optimizer.group_adamw``) and ``packed_global_norm`` as the step's gradient norm.
AdamW's state for the vectors is then one array per group, so a checkpoint's optimizer state has
another layout. Measured on an H200 (tenth lease): mBERT's step 1.006× (1.011× without the barrier),
BERT-large's level; not taken, for that and for the checkpoint layout.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

SMALL_ARRAY = 1 << 16
"""Arrays of at most this many values share ``packed_global_norm``'s one reduction."""


def _is_masked(x: Any) -> bool:
    return isinstance(x, optax.MaskedNode)


class _Layout:
    """Where a group's vectors sit among the leaves of the parameter tree (others' leaves masked)."""

    def __init__(self, tree: Any, decayed: Any):
        leaves, self.treedef = jax.tree.flatten(tree, is_leaf=_is_masked)
        flags = jax.tree.leaves(decayed)
        if len(flags) != len(leaves):
            raise ValueError(f"the decay mask has {len(flags)} leaves, the parameters {len(leaves)}")
        self.vector = [not _is_masked(x) and not flag for x, flag in zip(leaves, flags, strict=True)]
        self.shapes = [None if _is_masked(x) else tuple(x.shape) for x in leaves]

    def pack(self, tree: Any) -> dict[str, Any]:
        """{"arrays": the leaves that stay arrays (vectors masked out), "vectors": the vectors concatenated}."""
        leaves = jax.tree.leaves(tree, is_leaf=_is_masked)
        arrays = [optax.MaskedNode() if vec else x for x, vec in zip(leaves, self.vector, strict=True)]
        flat = [x.reshape(-1) for x, vec in zip(leaves, self.vector, strict=True) if vec]
        return {"arrays": arrays, "vectors": jnp.concatenate(flat) if flat else jnp.zeros((0,), jnp.float32)}

    def unpack(self, packed: dict[str, Any]) -> Any:
        leaves, start = [], 0
        for x, vec, shape in zip(packed["arrays"], self.vector, self.shapes, strict=True):
            if vec:
                size = math.prod(shape)
                leaves.append(packed["vectors"][start : start + size].reshape(shape))
                start += size
            else:
                leaves.append(x)
        return jax.tree.unflatten(self.treedef, leaves)

    def decay_mask(self) -> dict[str, Any]:
        return {"arrays": [not vec for vec in self.vector], "vectors": False}


def adamw_vectors_packed(
    learning_rate: Any, *, b1: float, b2: float, eps: float, weight_decay: float, mask: Any, barrier: bool = True
) -> optax.GradientTransformation:
    """``optax.adamw`` with the arrays that ``mask`` leaves undecayed (biases, norm scales) packed into
    one vector: the same update of every value, and a state whose moments hold that vector whole.

    With ``barrier`` the packed update is computed once, as one array, before it is sliced: otherwise
    XLA may fuse the update's arithmetic into each slice's reader, one small kernel per array again.
    """

    def inner(layout: _Layout) -> optax.GradientTransformation:
        return optax.adamw(learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=layout.decay_mask())

    def init(params):
        layout = _Layout(params, mask)
        return inner(layout).init(layout.pack(params))

    def update(updates, state, params=None):
        layout = _Layout(updates, mask)
        packed_params = None if params is None else layout.pack(params)
        new, state = inner(layout).update(layout.pack(updates), state, packed_params)
        if barrier:
            new = {**new, "vectors": jax.lax.optimization_barrier(new["vectors"])}
        return layout.unpack(new), state

    return optax.GradientTransformation(init, update)


def packed_global_norm(tree: Any, small: int = SMALL_ARRAY) -> jax.Array:
    """``optax.tree.norm`` with the arrays of at most ``small`` values squared and summed as one
    concatenated vector (the same norm up to the order of the float32 sums)."""
    leaves = jax.tree.leaves(tree)
    few = [x.reshape(-1).astype(jnp.float32) for x in leaves if x.size <= small]
    parts = [jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves if x.size > small]
    if few:
        parts.append(jnp.sum(jnp.square(jnp.concatenate(few))))
    return jnp.sqrt(sum(parts, jnp.float32(0)))
