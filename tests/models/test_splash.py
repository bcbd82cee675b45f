"""The TPU splash kernel (``model.attention: splash``), run on CPU in Pallas interpret mode: forward
and gradients equal XLA's kernel on every real token, for padded and packed rows, bidirectional and
causal, local windows and grouped key/value heads; ``auto`` picks it on a TPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omnidistill.config import ModelConfig
from omnidistill.models.layers import AttentionMask, attention, encoder_mask, resolve_attention
from omnidistill.models.regressor import build_regressor

S = 96  # not a multiple of the kernel's 128-token block: rows are widened with padding
PADDED = jnp.array([[1] * S, [1] * 40 + [0] * (S - 40), [0] * S])  # full, right-padded, padding only
LEFT = jnp.array([[0] * 10 + [1] * (S - 10)])
# single-token segments, a long one, trailing padding; a row of padding only
PACKED = jnp.array([[1, 2, 3, 3, 4] + [5] * 80 + [6] + [0] * 10, [1] * 50 + [2] * 46, [0] * S])


def qkv(b: int, n: int = 4, kv_heads: int = 4, d: int = 16, seed: int = 0):
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    return (
        jax.random.normal(keys[0], (b, S, n, d)),
        jax.random.normal(keys[1], (b, S, kv_heads, d)),
        jax.random.normal(keys[2], (b, S, kv_heads, d)),
    )


def compare(mask: AttentionMask, window=None, kv_heads=4):
    q, k, v = qkv(mask.keys.shape[0], kv_heads=kv_heads)
    real = (mask.keys != 0)[:, :, None, None]

    def loss(impl, q, k, v):
        out = attention(q, k, v, mask, impl, window=window)
        return jnp.sum(jnp.where(real, out, 0.0) * jnp.cos(out)), out

    grad = lambda impl: jax.value_and_grad(lambda *a: loss(impl, *a), argnums=(0, 1, 2), has_aux=True)(q, k, v)
    (_, ref), ref_grads = grad("xla")
    (_, got), got_grads = grad("splash")
    keep = np.asarray(mask.keys != 0)
    assert keep.any()
    np.testing.assert_allclose(np.asarray(got)[keep], np.asarray(ref)[keep], atol=2e-5)
    for g, r in zip(got_grads, ref_grads, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), atol=2e-5)
    # the cases are not trivial: the real tokens' outputs differ from one another
    assert np.ptp(np.asarray(ref)[keep], axis=0).max() > 0.5


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rows", ["padded", "left", "packed"])
def test_splash_equals_xla(rows, causal):
    keys, packed = {"padded": (PADDED, False), "left": (LEFT, False), "packed": (PACKED, True)}[rows]
    compare(AttentionMask(keys, packed=packed, causal=causal))


@pytest.mark.parametrize("causal", [False, True])
def test_splash_local_window_equals_xla(causal):
    compare(AttentionMask(PADDED, causal=causal), window=5)  # two-sided (ModernBERT), or 5 back (Gemma 3 causal)
    compare(AttentionMask(PACKED, packed=True, causal=causal), window=5)


def test_splash_grouped_key_value_heads():
    compare(AttentionMask(PACKED, packed=True, causal=True), kv_heads=2)


def test_splash_refuses_a_bias_and_auto_leaves_it_to_xla(monkeypatch):
    q, k, v = qkv(3)
    bias = jnp.zeros((3, 4, S, S))
    with pytest.raises(ValueError, match="splash takes no additive bias"):
        attention(q, k, v, encoder_mask(PADDED, None), "splash", bias=bias)
    with pytest.raises(ValueError, match="splash takes an AttentionMask"):
        attention(q, k, v, encoder_mask(PADDED, None).dense(), "splash")
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert resolve_attention("auto", jnp.bfloat16, 512) == "splash"
    # auto with DeBERTa's bias on a "TPU": XLA's kernel, which runs here
    out = attention(q, k, v, encoder_mask(PADDED, None), "auto", bias=bias)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(attention(q, k, v, encoder_mask(PADDED, None), "xla", bias=bias)))


@pytest.mark.parametrize("family", ["modernbert", "qwen3"])
def test_a_splash_model_scores_like_xla(family):
    """Through a whole model: ModernBERT's local and global layers, Qwen3's causal grouped attention
    pooled at the last token, on padded and on packed rows."""
    arch = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
    if family == "modernbert":
        arch.update(local_attention=8, global_attn_every_n_layers=2)
    else:
        arch.update(num_key_value_heads=2, head_dim=8, max_position_embeddings=128)
    ids = jnp.where(PADDED > 0, 5 + (jnp.arange(S)[None] * jnp.array([[1], [7], [3]])) % 50, 0).astype(jnp.int32)
    pooling = "last_token" if family == "qwen3" else "cls"
    models = {
        impl: build_regressor(ModelConfig(family=family, attention=impl, pooling=pooling), arch, seed=3) for impl in ("xla", "splash")
    }
    padded = {impl: np.asarray(m(ids[:2], PADDED[:2])) for impl, m in models.items()}
    np.testing.assert_allclose(padded["splash"], padded["xla"], atol=1e-5)
    seg = PACKED[:2]
    packed = {impl: np.asarray(m(ids[:2] + 1, (seg > 0).astype(jnp.int32), segment_ids=seg, num_segments=6)) for impl, m in models.items()}
    np.testing.assert_allclose(packed["splash"], packed["xla"], atol=1e-5)
    assert np.ptp(padded["xla"], axis=0).max() > 1e-4 and np.ptp(packed["xla"], axis=0).max() > 1e-4  # 10x the tolerance


def test_splash_on_a_mesh_runs_per_device_and_equals_xla():
    """Under a context mesh (as the train step and predict functions run) the kernel is shard_map-ped:
    rows over data x fsdp, heads over tensor; the result is XLA's on the same sharded inputs."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from omnidistill.config import MeshConfig
    from omnidistill.parallel.mesh import build_mesh

    mesh = build_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
    keys = jnp.concatenate([PACKED, PACKED[:1]])  # 4 rows: one per data x fsdp shard
    mask = AttentionMask(keys, packed=True, causal=True)
    q, k, v = (jax.device_put(x, NamedSharding(mesh, P(("data", "fsdp")))) for x in qkv(4))
    run = jax.jit(lambda q, k, v, impl: attention(q, k, v, mask, impl), static_argnums=3)
    with jax.set_mesh(mesh):
        assert "shard_map" in str(jax.make_jaxpr(lambda q, k, v: attention(q, k, v, mask, "splash"))(q, k, v))
        got = run(q, k, v, "splash")
    keep = np.asarray(keys != 0)
    np.testing.assert_allclose(np.asarray(got)[keep], np.asarray(run(q, k, v, "xla"))[keep], atol=2e-5)
    assert "shard_map" not in str(jax.make_jaxpr(lambda q, k, v: attention(q, k, v, mask, "splash"))(q, k, v))  # no mesh: as is
