"""Unpadded encoder passes: the layers' per-token work (projections, MLP, norms) on a batch's real
tokens only, attention on the padded rows.

A padded batch of B rows of S tokens holds B x S slots, and on real data a quarter of them can be
padding (items sorted by length and padded to multiples of 32: 71,680 slots for 54,022 tokens in
docs/benchmarks.md). Every matmul of a layer pays for those slots. Here the batch's rows are split
into G groups of B/G rows (one group per batch shard, so each device keeps its own rows); each group's
real tokens are gathered into ``t`` consecutive slots ([G, t, H]) for the dense work, and scattered
back to the padded [B, S] layout around attention, where each item still attends only to itself
(the key padding mask, a local window, causality: all as on padded rows). This is what Hugging Face's
ModernBERT does with ``_unpad_modernbert_input`` and FlashAttention's variable-length kernels, in
static shapes: the host chooses ``t`` (``eval.batch_tokens``) and fills batches up to it.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp


def _rows(x: jax.Array, index: jax.Array) -> jax.Array:
    """``x[g, index[g]]`` for every group g: [G, n, ...] gathered at [G, m] -> [G, m, ...]."""
    return jax.vmap(lambda xs, ix: xs[ix])(x, index)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["token_index", "slot_index"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class TokenLayout:
    """Where a padded batch's real tokens go in the unpadded [G, t] layout, and back."""

    token_index: jax.Array
    """[G, t] int32: the padded slot (row-major within the group's B/G rows) of each unpadded token.
    A group's real slots come first, in order; the rest of its t entries repeat any slot (their
    outputs are never read)."""
    slot_index: jax.Array
    """[B, S] int32: the unpadded position of each padded slot's token within its group, t for padding."""

    @classmethod
    def of(cls, attention_mask: jax.Array, token_index: jax.Array) -> TokenLayout:
        """The layout of a [B, S] right- or left-padded batch whose real slots ``token_index`` [G, t]
        lists per group (:func:`omnidistill.data.token_batches.token_index`, on the host)."""
        groups, tokens = token_index.shape
        rows, seq = attention_mask.shape
        if rows % groups:
            raise ValueError(f"token_index has {groups} groups, which do not divide the batch's {rows} rows")
        keep = attention_mask.astype(bool).reshape(groups, (rows // groups) * seq)
        order = jnp.cumsum(keep, axis=1, dtype=jnp.int32) - 1
        slots = jnp.where(keep, order, tokens).reshape(rows, seq)
        return cls(token_index.astype(jnp.int32), slots)

    def unpad(self, x: jax.Array) -> jax.Array:
        """[B, S, ...] -> [G, t, ...]: each group's real tokens, then filler."""
        groups = self.token_index.shape[0]
        return _rows(x.reshape(groups, -1, *x.shape[2:]), self.token_index)

    def pad(self, y: jax.Array) -> jax.Array:
        """[G, t, ...] -> [B, S, ...]: tokens back in their padded slots, zeros in the padding."""
        groups = y.shape[0]
        with_zero = jnp.concatenate([y, jnp.zeros((groups, 1, *y.shape[2:]), y.dtype)], axis=1)
        out = _rows(with_zero, self.slot_index.reshape(groups, -1))
        return out.reshape(*self.slot_index.shape, *y.shape[2:])


def unpad(layout: TokenLayout | None, x: jax.Array) -> jax.Array:
    """``layout.unpad(x)``; ``x`` itself without a layout."""
    return x if layout is None else layout.unpad(x)


def repad(layout: TokenLayout | None, y: jax.Array) -> jax.Array:
    """``layout.pad(y)``; ``y`` itself without a layout."""
    return y if layout is None else layout.pad(y)
