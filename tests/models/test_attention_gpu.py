"""cuDNN's fused attention against XLA's on an NVIDIA GPU (skipped elsewhere; run on a lent device with
``python -m pytest tests/models/test_attention_gpu.py``): the sequence-length path for key padding,
with and without DeBERTa's bias, and the broadcast-mask path for packed rows and folded windows;
causal rows and windows on padded rows as the kernel's own masks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omnidistill.models.layers import AttentionMask, attention, band_mask, padding_mask, segment_mask

pytestmark = pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN attention needs an NVIDIA GPU")

B, S, N, D = 3, 128, 4, 64
LENGTHS = jnp.array([128, 77, 0])  # full, right-padded, padding only


def inputs(seed: int = 0):
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    q, k, v = (jax.random.normal(key, (B, S, N, D), jnp.bfloat16) for key in keys[:3])
    bias = jax.random.normal(keys[3], (B, N, S, S), jnp.bfloat16)
    return q, k, v, bias


def masks() -> dict:
    keep = (jnp.arange(S)[None] < LENGTHS[:, None]).astype(jnp.int32)
    packed = jnp.where(jnp.arange(S) < 100, 1 + jnp.arange(S) // 9, 0)  # 12 segments, then padding
    segments = jnp.stack([jnp.repeat(jnp.arange(1, 5), 32), packed, jnp.zeros(S, jnp.int32)])
    return {"padding": padding_mask(keep), "segments": segment_mask(segments), "band": band_mask(padding_mask(keep), S, 8)}


def real_rows(kind: str) -> np.ndarray:
    """[B, S] True where a query row is a real token (padding rows' outputs are never read)."""
    if kind == "segments":
        return np.arange(S)[None] < np.array([S, 100, 0])[:, None]
    return np.arange(S)[None] < np.asarray(LENGTHS)[:, None]


def cudnn_and_xla(mask, keep: np.ndarray, *args, window=None) -> tuple[list, list]:
    """Outputs and gradients (q, k, v, and the bias when one is given) of XLA's kernel and cuDNN's on
    ``mask``, compared on the real query rows ``keep`` [B, S]: outputs within 3e-2, each gradient
    within a tenth of the reference's largest, finite. Returns (cuDNN's, XLA's) gradients."""
    rows = jnp.asarray(keep)[:, :, None, None]

    def loss(impl, q, k, v, bias=None):
        out = attention(q, k, v, mask, impl, bias=bias, window=window).astype(jnp.float32)
        return jnp.sum(jnp.where(rows, out, 0.0) ** 2), out

    argnums = tuple(range(len(args)))
    (_, ref), ref_grads = jax.value_and_grad(lambda *a: loss("xla", *a), argnums=argnums, has_aux=True)(*args)
    (_, got), got_grads = jax.value_and_grad(lambda *a: loss("cudnn", *a), argnums=argnums, has_aux=True)(*args)
    np.testing.assert_allclose(np.asarray(got)[keep], np.asarray(ref)[keep], atol=3e-2, rtol=3e-2)
    got_grads = [np.asarray(g.astype(jnp.float32)) for g in got_grads]
    ref_grads = [np.asarray(r.astype(jnp.float32)) for r in ref_grads]
    for g, r in zip(got_grads, ref_grads, strict=True):
        np.testing.assert_allclose(g, r, atol=0.1 * np.abs(r).max() + 1e-3)
        assert np.isfinite(g).all()
    return got_grads, ref_grads


@pytest.mark.parametrize("kind", ["padding", "segments", "band"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_cudnn_equals_xla_forward_and_gradients(kind, with_bias):
    q, k, v, bias = inputs()
    # with a bias, its gradient too (DeBERTa's position scores train through it; batch 3, not 1)
    got, ref = cudnn_and_xla(masks()[kind], real_rows(kind), q, k, v, *([bias] if with_bias else []))
    if with_bias:  # a real gradient for a bias of batch 3 (JAX's private batching rule once gave zeros)
        assert np.abs(got[3]).max() > 0.1 * np.abs(ref[3]).max()


@pytest.mark.parametrize("causal, window", [(False, 8), (True, None), (True, 8)])
def test_cudnn_padded_rows_with_causality_or_a_window_equal_xla(causal, window):
    """Padded rows reach cuDNN with no mask array (``attention_by_lengths``): ModernBERT's two-sided
    window as a causal window over shifted queries, a decoder's causal mask, Gemma 3's causal window."""
    q, k, v, _ = inputs(1)
    keep = (jnp.arange(S)[None] < LENGTHS[:, None]).astype(jnp.int32)
    cudnn_and_xla(AttentionMask(keep, causal=causal), real_rows("padding"), q, k, v, window=window)
