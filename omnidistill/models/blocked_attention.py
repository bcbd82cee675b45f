"""The CPU's attention kernel: a few heads at a time, so that each head's [S, S] scores stay in cache.

Forward: ``lax.map`` over rows, then over heads (:data:`BLOCK_SCORES` score entries at once), instead
of a [B, N, S, S] array passing through memory five times (scores, mask, max, exp, normalise), which
made XLA's kernel 4-6x slower than PyTorch's fused CPU attention at 512 tokens.

Backward (:func:`_heads_backward`): blocks again, as flash attention's backward pass does. Each
block recomputes its softmax weights from the scores and the row's log-sum-exp, which the forward
pass keeps ([B, N, S] values), and makes its gradients from them. Differentiating the forward loop
instead saved two [B, N, S, S] arrays per layer (each block's scores and weights, stacked) for the
backward pass; now a layer saves none beyond a bias it was given (``tests/models/test_attention.py``).
Time, on a 2-core Zen 3 (2026-11-28, in-process A/B, medians): the DeBERTa-v3-base training step at
B4 x S512 ran 1.07x as fast, a BERT-shaped one 1.05x; at S256 level (docs/benchmarks.md).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

BLOCK_SCORES = 2**19
"""Score entries the blocked kernel holds at once in a forward pass alone (scoring, evaluation: 2 MB
in fp32, within a core's L2): 2 (row, head) pairs at 512 tokens, 32 at 128."""

DIFFERENTIATED_BLOCK_SCORES = 2**21
"""Score entries per step of a differentiated call (training), forward and backward: 8 (row, head)
pairs at 512 tokens, 32 at 256. Larger than :data:`BLOCK_SCORES`: on a 2-core Zen 3 (2026-11-28) the
DeBERTa-v3-base training step at B4 x S512 ran 0.97x, 1.07x and 1.05x as fast as differentiating the
forward loop, with 2^20, 2^21 and 2^22 entries a step. One step of everything was slower in the model
than in isolation: with no loop, XLA fuses DeBERTa's position-score transposes into each reader of
the bias instead of making it once."""

_LOWEST = float(jnp.finfo(jnp.float32).min)


def blocked_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, bias: jax.Array | None, scale: float | None, window: int | None
) -> jax.Array:
    """Attention a few heads at a time (``lax.map`` over rows, then over heads; :data:`BLOCK_SCORES`),
    with its own backward pass, in larger steps (see the module's docstring). Each (row, head)
    block is a mapped input, not an index into a closed-over array, so the backward pass stacks
    gradients instead of scattering them. Same inputs and result as ``dot_product_attention``:
    [B, S, N, D] q, [B, S, K, D] k and v (N a multiple of K), a boolean [B, 1, 1 or S, S] mask, an
    optional [B, N, S, S] bias. Fewer queries than keys (the first rows of an encoder's
    ``first_rows``) take a [B, 1, 1 or rows, S] mask and no window (fold it into the mask)."""
    b, sq, n, d = q.shape
    s = k.shape[1]
    if mask.ndim != 4 or mask.shape[1] != 1:
        raise ValueError(f"the blocked attention kernel takes a [B, 1, 1 or S, S] mask, not {mask.shape}")
    if sq != s and (mask.shape[2] not in (1, sq) or window is not None):
        raise ValueError(f"the blocked attention kernel takes {sq} queries for {s} keys with a [B, 1, 1 or {sq}, {s}] mask, no window")
    scale = d**-0.5 if scale is None else scale
    group = n // k.shape[2]
    heads = lambda x: jnp.moveaxis(x, 2, 1)  # [B, S, N, D] -> [B, N, S, D]
    fold = q.dtype == jnp.float32  # scale the [S, D] queries rather than the [S, S] scores (same in fp32 to rounding)
    q = q * jnp.asarray(scale, q.dtype) if fold else q
    q, k, v = heads(q), jnp.repeat(heads(k), group, axis=1), jnp.repeat(heads(v), group, axis=1)
    steps = (_map_steps(b, n, sq * s, BLOCK_SCORES), _map_steps(b, n, sq * s, DIFFERENTIATED_BLOCK_SCORES))
    out = _attend_heads(q, k, v, jnp.asarray(mask), bias, None if fold else float(scale), window, steps)  # [B, N, S, D]
    return jnp.moveaxis(out, 1, 2)


def _map_steps(rows: int, heads: int, scores_per_head: int, budget: int) -> tuple[int, int]:
    """(rows, heads) per map step: as many (row, head) pairs as keep ``budget`` score entries."""
    pairs = max(1, budget // scores_per_head)
    return max(1, min(rows, pairs // heads)), min(heads, pairs)


def _added_mask(mask_row: jax.Array, window: int | None) -> jax.Array:
    """[1 or Sq, S] float32: 0 where a key is kept, the lowest float where masked (one add per head,
    no select)."""
    keep = mask_row
    if window is not None:
        rows = jnp.arange(keep.shape[-1])
        keep = keep & (jnp.abs(rows[:, None] - rows[None, :]) <= window)
    return jnp.where(keep, 0.0, _LOWEST).astype(jnp.float32)


def _logits(qh: jax.Array, kh: jax.Array, bh: jax.Array | None, masked: jax.Array, scale: float | None) -> jax.Array:
    """One head's float32 [Sq, S] scores: q k^T (times ``scale`` unless the queries carry it), plus the
    bias and the added mask."""
    logits = jnp.dot(qh, kh.T, preferred_element_type=jnp.float32)
    logits = logits if scale is None else logits * scale
    if bh is not None:
        logits = logits + bh.astype(jnp.float32)
    return logits + masked


def _map_blocks(one_head, mask: jax.Array, window: int | None, per_head: tuple, blocks: tuple[int, int]):
    """``one_head(masked, head_inputs)`` over every (row, head): ``lax.map`` over the rows (``blocks[0]``
    at a time), within each over the heads (``blocks[1]`` at a time). ``masked`` is the row's
    :func:`_added_mask` of ``mask`` [B, 1, 1 or Sq, S] and ``window``; ``per_head`` holds arrays per row
    and head ([B, N, ...]) or None."""

    def one_row(xs: tuple):
        mask_row, *head_inputs = xs
        masked = _added_mask(mask_row[0], window)
        return jax.lax.map(functools.partial(one_head, masked), tuple(head_inputs), batch_size=blocks[1])

    return jax.lax.map(one_row, (mask, *per_head), batch_size=blocks[0])


def _forward_heads(q, k, v, mask, bias, scale, window, blocks) -> tuple[jax.Array, jax.Array]:
    """[B, N, Sq, D] output and [B, N, Sq] float32 log-sum-exp of each row's scores."""

    def one_head(masked: jax.Array, xs: tuple) -> tuple[jax.Array, jax.Array]:
        qh, kh, vh, bh = xs
        logits = _logits(qh, kh, bh, masked, scale)
        top = logits.max(axis=-1, keepdims=True)
        weights = jnp.exp(logits - top)
        total = weights.sum(axis=-1, keepdims=True)
        out = jnp.dot(weights.astype(vh.dtype), vh, preferred_element_type=jnp.float32) / total
        return out.astype(qh.dtype), (top + jnp.log(total))[:, 0]

    return _map_blocks(one_head, mask, window, (q, k, v, bias), blocks)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _attend_heads(q, k, v, mask, bias, scale, window, steps) -> jax.Array:
    """Attention over heads-first [B, N, S, D] arrays (keys and values repeated per query head), in
    map steps of ``steps[0]`` (rows, heads); differentiated, of ``steps[1]``."""
    return _forward_heads(q, k, v, mask, bias, scale, window, steps[0])[0]


def _heads_forward(q, k, v, mask, bias, scale, window, steps):
    out, lse = _forward_heads(q, k, v, mask, bias, scale, window, steps[1])
    return out, (q, k, v, mask, bias, out, lse)


def _heads_backward(scale, window, steps, residuals, g):
    """Flash attention's backward pass, block by block: weights = exp(scores - lse); dV = W^T dO;
    dS = W (dO V^T - rowsum(dO O)); dQ = dS K, dK = dS^T Q (times ``scale`` where the scores took
    it); the bias's gradient is dS."""
    q, k, v, mask, bias, out, lse = residuals
    delta = jnp.sum(g.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # [B, N, Sq]

    def one_head(masked: jax.Array, xs: tuple) -> tuple:
        qh, kh, vh, bh, gh, lh, dh = xs
        weights = jnp.exp(_logits(qh, kh, bh, masked, scale) - lh[:, None])
        dv = jnp.dot(weights.T.astype(gh.dtype), gh, preferred_element_type=jnp.float32)
        dw = jnp.dot(gh, vh.T, preferred_element_type=jnp.float32)
        ds = weights * (dw - dh[:, None])
        dlogits = ds if scale is None else ds * scale
        dq = jnp.dot(dlogits.astype(kh.dtype), kh, preferred_element_type=jnp.float32)
        dk = jnp.dot(dlogits.T.astype(qh.dtype), qh, preferred_element_type=jnp.float32)
        db = None if bh is None else ds.astype(bh.dtype)
        return dq.astype(qh.dtype), dk.astype(kh.dtype), dv.astype(vh.dtype), db

    dq, dk, dv, dbias = _map_blocks(one_head, mask, window, (q, k, v, bias, g, lse, delta), steps[1])
    return dq, dk, dv, None, dbias


_attend_heads.defvjp(_heads_forward, _heads_backward)
