"""TPU splash attention (``model.attention: splash``): JAX's Pallas kernel
(``jax.experimental.pallas.ops.tpu.splash_attention``), fed with an :class:`AttentionMask` in its
compact form, so no ``[B, 1, S, S]`` array is ever built.

- Padding and packed rows go in as segment ids, one int per token: the attention mask itself (1 real,
  0 padding) for padded rows, the packing's segment ids (0 padding) for packed ones. A token attends
  to the keys of its own segment; padding attends to padding, never to a real token, so a real
  token's attention is exactly the boolean mask's and no row is empty (a row of padding only too).
- Causal attention, a two-sided local window (ModernBERT, EmbeddingGemma) and a causal one (Gemma 3's
  decoders) are the kernel's own lazy masks (``CausalMask``, ``LocalMask``): blocks that no query
  may see are skipped, not computed and masked.
- Rows are padded to a multiple of 128 tokens (the kernel's block) with padding tokens; their outputs
  are dropped. Grouped key/value heads are repeated to the query heads.
- There is no additive bias: DeBERTa's relative-position attention runs on XLA under ``auto`` and is
  refused by name under an explicit ``splash``.

Off a TPU the kernel runs in Pallas interpret mode (exact, slow): that is how the tests check it on
CPU against XLA's kernel, forward and gradients.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

BLOCK = 128
"""The kernel's block along both sequence axes (its minimum: a multiple of the TPU's 128 lanes)."""


@functools.cache
def _kernel(seq: int, heads: int, causal: bool, window: int | None, interpret: bool):
    """The splash kernel for one static layout, built once (its mask tables are computed in numpy)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    shape = (seq, seq)
    if window is not None:
        one = sm.LocalMask(shape, window_size=(window, 0 if causal else window), offset=0)
    elif causal:
        one = sm.CausalMask(shape)
    else:
        one = sm.FullMask(shape)
    with jax.ensure_compile_time_eval():  # its mask tables are concrete arrays, cached across traces
        return sk.make_splash_mha(sm.MultiHeadMask([one] * heads), head_shards=1, q_seq_shards=1, interpret=interpret)


def splash_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, segments: jax.Array, *, causal: bool, scale: float | None, window: int | None
) -> jax.Array:
    """Attention over [B, S, N, D] ``q`` and [B, S, K, D] ``k``/``v`` (N a multiple of K) with [B, S]
    int ``segments`` (0 padding), ``causal`` and an optional two-sided ``window``; [B, S, N, D] out."""
    from jax.experimental.pallas.ops.tpu.splash_attention.splash_attention_kernel import SegmentIds

    _, s, n, d = q.shape
    group = n // k.shape[2]
    extra = -s % BLOCK
    widen = lambda x: jnp.pad(x, [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2)) if extra else x
    heads_first = lambda x: jnp.moveaxis(widen(x), 2, 1)  # [B, S', N, D] -> [B, N, S', D]
    scale = d**-0.5 if scale is None else scale
    q = heads_first(q * jnp.asarray(scale, q.dtype))
    k, v = (jnp.repeat(heads_first(x), group, axis=1) for x in (k, v))
    segments = widen(segments.astype(jnp.int32))
    kernel = _kernel(s + extra, n, causal, window, jax.default_backend() != "tpu")
    per_row = jax.vmap(lambda q, k, v, ids: kernel(q, k, v, segment_ids=SegmentIds(q=ids, kv=ids)))
    out = _per_device(per_row, q.shape[0], n)(q, k, v, segments)
    return jnp.moveaxis(out, 1, 2)[:, :s]


def _per_device(fn, batch: int, heads: int):
    """``fn`` over [B, N, S, D] arrays and [B, S] segments, run on each device's rows and heads.

    XLA cannot split a Pallas call: on a mesh it would gather every operand and compute the whole
    batch on every device. Under a context mesh (``jax.set_mesh``, as the train step and the predict
    functions run) the call is ``shard_map``-ped instead: rows over the mesh's batch axes, heads over
    ``tensor`` (each where it divides evenly). Without one (a single device) ``fn`` runs as it is."""
    from jax.sharding import PartitionSpec as P

    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return fn
    rows = tuple(a for a in mesh.axis_names if a != "tensor")  # data and fsdp (parallel/mesh.py's BATCH_AXES)
    if batch % math.prod(mesh.shape[a] for a in rows):
        rows = ()
    tensor = "tensor" if "tensor" in mesh.axis_names and heads % mesh.shape["tensor"] == 0 else None
    spec = P(rows or None, tensor)
    return jax.shard_map(fn, mesh=mesh, in_specs=(spec, spec, spec, P(rows or None)), out_specs=spec, check_vma=False)
