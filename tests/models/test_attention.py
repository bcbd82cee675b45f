"""Attention kernels: the masks the cuDNN path receives equal XLA's windowed attention, the blocked CPU
kernel computes XLA's attention and gradients, and the choice from ``model.attention`` falls back to
XLA where cuDNN cannot run."""

import logging
import tomllib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from packaging.requirements import Requirement

from omnidistill.config import ModelConfig
from omnidistill.models import blocked_attention as blocked_module
from omnidistill.models import layers
from omnidistill.models.layers import (
    AttentionMask,
    _warn_once,
    attention,
    attention_by_lengths,
    band_mask,
    blocked_attention,
    cudnn_inputs,
    padding_mask,
    predicting,
    resolve_attention,
    segment_mask,
)
from omnidistill.models.regressor import build_regressor, make_predict_fn


def qkv(seed=0, b=2, s=12, n=2, d=8):
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(seed), 3)
    return (jax.random.normal(k, (b, s, n, d)) for k in (k1, k2, k3))


def test_window_folded_into_the_mask_equals_the_windowed_kernel():
    q, k, v = qkv()
    lengths = jnp.array([12, 7])
    mask = padding_mask((jnp.arange(12)[None] < lengths[:, None]).astype(jnp.int32))
    windowed = jax.nn.dot_product_attention(q, k, v, mask=mask, local_window_size=(2, 2))
    folded = jax.nn.dot_product_attention(q, k, v, mask=band_mask(mask, 12, 2))
    np.testing.assert_allclose(np.asarray(folded), np.asarray(windowed), atol=1e-6)
    np.testing.assert_allclose(np.asarray(attention(q, k, v, mask, "xla", window=2)), np.asarray(windowed), atol=1e-6)


@pytest.mark.parametrize("kind", ["segments", "band"])
def test_cudnn_gets_a_full_query_by_key_mask_with_the_same_attention(kind):
    """cuDNN refuses a [B, 1, 1, S] key mask (its bias must span queries and keys); a mask that is not
    plain key padding gets broadcast instead, which must give exactly the attention of the original."""
    q, k, v = qkv()
    lengths = jnp.array([12, 7])
    key_mask = (jnp.arange(12)[None] < lengths[:, None]).astype(jnp.int32)
    mask = {
        "segments": segment_mask(jnp.array([[1] * 5 + [2] * 7, [1] * 3 + [2] * 4 + [0] * 5])),
        "band": band_mask(padding_mask(key_mask), 12, 2),
    }[kind]
    full, no_lengths = cudnn_inputs(mask, 12, 12)
    assert full.shape == (2, 1, 12, 12) and no_lengths is None
    np.testing.assert_array_equal(
        np.asarray(jax.nn.dot_product_attention(q, k, v, mask=full)), np.asarray(jax.nn.dot_product_attention(q, k, v, mask=mask))
    )


def test_cudnn_gets_key_padding_as_sequence_lengths_with_the_same_attention():
    """A right-padded key mask reaches cuDNN as lengths, with no [B, 1, S, S] array. XLA's kernel
    takes the same lengths, so the attention they mean is checked here against the mask's on every
    real query row, with a bias (DeBERTa's case) and for a row of padding only (length 1, finite)."""
    q, k, v = qkv(b=3)
    lengths = jnp.array([12, 7, 0])
    mask = padding_mask((jnp.arange(12)[None] < lengths[:, None]).astype(jnp.int32))
    no_mask, seq_lengths = cudnn_inputs(mask, 12, 12)
    assert no_mask is None
    np.testing.assert_array_equal(np.asarray(seq_lengths), [12, 7, 1])
    bias = jax.random.normal(jax.random.PRNGKey(5), (3, 2, 12, 12))
    by_lengths = jax.nn.dot_product_attention(q, k, v, bias, query_seq_lengths=seq_lengths, key_value_seq_lengths=seq_lengths)
    by_mask = jax.nn.dot_product_attention(q, k, v, bias, mask=mask)
    for row, n in enumerate([12, 7]):
        np.testing.assert_allclose(np.asarray(by_lengths[row, :n]), np.asarray(by_mask[row, :n]), atol=1e-6)
    assert np.isfinite(np.asarray(by_lengths)).all()
    with pytest.raises(ValueError, match="right-padded"):
        cudnn_inputs(padding_mask(jnp.array([[0, 0, 1, 1], [1, 1, 1, 0]])), 4, 4)  # left padding


LENGTHS_S = 24
PADDED_KEYS = jnp.array([[1] * LENGTHS_S, [1] * 9 + [0] * 15, [0] * LENGTHS_S, [1] + [0] * 23])  # full, padded, padding only, one token


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, 1, 3, 30])
def test_padded_rows_as_lengths_causality_and_window_equal_the_mask(causal, window):
    """What cuDNN receives for padded rows (no mask array; a two-sided window as a causal one over
    shifted queries) means the masked attention: XLA's kernel takes the same arguments, and its
    outputs and gradients equal the dense-mask kernel's on every real token, for a window of one
    token, a few, and one wider than the rows."""
    mask = AttentionMask(PADDED_KEYS, causal=causal)
    q, k, v = qkv(seed=3, b=4, s=LENGTHS_S)
    real = np.asarray(PADDED_KEYS != 0)

    def run(call):  # jitted: one compile rather than one per eager op
        loss = lambda q, k, v: jnp.sum(jnp.where(real[:, :, None, None], jnp.sin(call(q, k, v)), 0.0))
        return jax.jit(lambda q, k, v: (call(q, k, v), jax.grad(loss, argnums=(0, 1, 2))(q, k, v)))(q, k, v)

    ref, ref_grads = run(lambda q, k, v: attention(q, k, v, mask, "xla", window=window))
    got, got_grads = run(lambda q, k, v: attention_by_lengths(q, k, v, mask, None, window=window))
    assert got.shape == ref.shape
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(ref)[real], atol=1e-6)
    for g, r in zip(got_grads, ref_grads, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), atol=1e-6)
    assert np.isfinite(np.asarray(got)).all()
    if window is not None and window < 9:  # the window matters in these rows
        unwindowed = np.asarray(attention(q, k, v, mask, "xla"))
        assert np.abs(unwindowed[real] - np.asarray(ref)[real]).max() > 1e-2


def record_cudnn_calls(monkeypatch) -> list[dict]:
    """Make ``attention`` take its cuDNN route here, with XLA's kernel run on the very arguments cuDNN
    would get (recorded)."""
    calls = []
    real_kernel = jax.nn.dot_product_attention

    def kernel(*args, implementation=None, **kwargs):
        assert implementation == "cudnn"
        bias = args[3] if len(args) > 3 else kwargs.get("bias")
        mask = args[4] if len(args) > 4 else kwargs.get("mask")
        calls.append(dict(kwargs, bias=bias, mask=mask, queries=args[0].shape[1]))
        return real_kernel(*args, **kwargs)

    monkeypatch.setattr(layers, "resolve_attention", lambda *a, **k: "cudnn")
    monkeypatch.setattr(jax.nn, "dot_product_attention", kernel)
    return calls


@pytest.mark.parametrize(
    "family, causal, window, with_bias",
    [
        ("bert", False, None, False),
        ("deberta", False, None, True),
        ("modernbert-local", False, 3, False),
        ("qwen", True, None, False),
        ("gemma-local", True, 3, False),
    ],
)
def test_cudnn_gets_padded_rows_without_a_mask_array(monkeypatch, family, causal, window, with_bias):
    """No [B, 1, S, S] mask (a bias to cuDNN, read by every head, with a gradient written back) for
    padded rows: key padding as lengths, causality and windows as the kernel's own masks."""
    calls = record_cudnn_calls(monkeypatch)
    mask = AttentionMask(PADDED_KEYS, causal=causal)
    q, k, v = qkv(seed=4, b=4, s=LENGTHS_S)
    bias = jax.random.normal(jax.random.PRNGKey(9), (4, 2, LENGTHS_S, LENGTHS_S)) if with_bias else None
    got = attention(q, k, v, mask, "cudnn", bias=bias, window=window)
    (call,) = calls
    assert call["mask"] is None and (call["bias"] is None) == (not with_bias)
    assert call["is_causal"] == (causal or window is not None)
    shift = window if (window is not None and not causal) else 0
    assert call["queries"] == LENGTHS_S + shift
    assert call["local_window_size"] == (None if window is None else ((window, 0) if causal else (2 * window, 0)))
    if window is not None:  # a window over every key of the rows is no window: no shifted rows
        attention(q, k, v, mask, "cudnn", bias=bias, window=LENGTHS_S - 1)
        assert calls[-1]["queries"] == LENGTHS_S and calls[-1]["local_window_size"] is None
    monkeypatch.undo()
    real = np.asarray(PADDED_KEYS != 0)
    ref = attention(q, k, v, mask, "xla", bias=bias, window=window)
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(ref)[real], atol=1e-6)


def test_cudnn_folds_a_two_sided_window_into_the_mask_in_short_rows(monkeypatch):
    """Rows under SHIFTED_WINDOW_FROM windows (24 tokens, a window of 8 either side) would cost the
    shift more than it saves: the window is folded into the mask there, with the same attention; a
    causal window is cuDNN's own at any length."""
    calls = record_cudnn_calls(monkeypatch)
    q, k, v = qkv(seed=7, b=4, s=LENGTHS_S)
    assert LENGTHS_S < layers.SHIFTED_WINDOW_FROM * 8
    two_sided = attention(q, k, v, AttentionMask(PADDED_KEYS), "cudnn", window=8)
    attention(q, k, v, AttentionMask(PADDED_KEYS, causal=True), "cudnn", window=8)
    folded, causal = calls
    assert folded["mask"].shape == (4, 1, LENGTHS_S, LENGTHS_S) and folded["queries"] == LENGTHS_S
    assert causal["mask"] is None and causal["local_window_size"] == (8, 0)
    monkeypatch.undo()
    real = np.asarray(PADDED_KEYS != 0)
    ref = attention(q, k, v, AttentionMask(PADDED_KEYS), "xla", window=8)
    np.testing.assert_allclose(np.asarray(two_sided)[real], np.asarray(ref)[real], atol=1e-6)


def test_cudnn_keeps_the_broadcast_mask_for_packed_rows(monkeypatch):
    calls = record_cudnn_calls(monkeypatch)
    segments = jnp.array([[1] * 5 + [2] * 19, [1] * 3 + [2] * 4 + [0] * 17])
    q, k, v = qkv(seed=5, b=2, s=LENGTHS_S)
    attention(q, k, v, AttentionMask(segments, packed=True), "cudnn", window=3)
    (call,) = calls
    assert call["mask"].shape == (2, 1, LENGTHS_S, LENGTHS_S) and call["local_window_size"] is None


@pytest.mark.parametrize("family", ["modernbert", "qwen3", "gemma3"])
def test_a_model_on_the_cudnn_route_scores_like_xla(monkeypatch, family):
    """A whole model on the cuDNN route (ModernBERT's two-sided local layers, Qwen3's causal grouped
    attention, Gemma 3's causal local layers) gives XLA's scores on a padded batch."""
    arch = dict(vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48)
    if family == "modernbert":
        arch.update(local_attention=6, global_attn_every_n_layers=3)
    elif family == "qwen3":
        arch.update(num_key_value_heads=2, head_dim=8, max_position_embeddings=128)
    else:
        arch.update(model_type="gemma3_text", num_key_value_heads=2, head_dim=8, max_position_embeddings=128, sliding_window=6)
        arch.update(layer_types=["sliding_attention", "full_attention", "sliding_attention"], use_bidirectional_attention=False)
    ids = jnp.where(PADDED_KEYS[:2] > 0, 5 + (jnp.arange(LENGTHS_S)[None] * jnp.array([[1], [7]])) % 50, 0).astype(jnp.int32)
    pooling = "cls" if family == "modernbert" else "last_token"
    models = {impl: build_regressor(ModelConfig(family=family, attention=impl, pooling=pooling), arch, seed=3) for impl in ("xla", "cudnn")}
    score = nnx.jit(lambda model, ids, mask: model(ids, mask))  # one compile per model, not one per eager op
    ref = np.asarray(score(models["xla"], ids, PADDED_KEYS[:2]))
    calls = record_cudnn_calls(monkeypatch)
    got = np.asarray(score(models["cudnn"], ids, PADDED_KEYS[:2]))
    assert len(calls) == 3 and all(call["mask"] is None for call in calls)
    np.testing.assert_allclose(got, ref, atol=1e-5)
    assert np.ptp(ref, axis=0).max() > 1e-4


def test_the_declared_jax_gives_cudnn_a_batched_bias_gradient(repo_root):
    """Before JAX 0.8, cuDNN's fused attention had a bias gradient only for a bias of batch 1
    (``jax.nn.dot_product_attention`` raised in the backward pass otherwise): DeBERTa's [B, N, S, S]
    relative-position scores could not train on a GPU. pyproject.toml admits no such JAX (and admits
    this one)."""
    deps = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]["dependencies"]
    (jax_req,) = [r for r in map(Requirement, deps) if r.name == "jax"]
    assert not jax_req.specifier.contains("0.7.2") and jax_req.specifier.contains(jax.__version__)


def test_segment_mask_is_block_diagonal_and_pads_see_only_pads():
    seg = jnp.array([[1, 1, 2, 2, 2, 0]])
    m = np.asarray(segment_mask(seg))[0, 0]
    assert m[0, :2].all() and not m[0, 2:].any()
    assert m[3, 2:5].all() and not m[3, [0, 1, 5]].any()
    assert m[5, 5] and not m[5, :5].any()


def test_attention_choice_on_this_backend(caplog):
    assert jax.default_backend() == "cpu"
    _warn_once.cache_clear()
    assert resolve_attention("xla", jnp.bfloat16) is None
    assert resolve_attention("auto", jnp.bfloat16, 512) == "blocked"  # the CPU's default for long rows
    assert resolve_attention("auto", jnp.float32, 64) == "blocked"  # from layers.BLOCKED_FROM tokens on
    assert resolve_attention("auto", jnp.float32, 63) is None  # and XLA below
    assert resolve_attention("blocked", jnp.float32) == "blocked"
    with caplog.at_level(logging.WARNING):
        assert resolve_attention("cudnn", jnp.bfloat16) is None
    assert "model.attention=cudnn needs an NVIDIA GPU" in caplog.text
    with pytest.raises(ValueError, match=r"model\.attention='flash'"):
        resolve_attention("flash", jnp.float32)
    with predicting():  # a forward pass only: blocked at every length, unless xla is asked for
        assert resolve_attention("auto", jnp.float32, 8) == "blocked"
        assert resolve_attention("xla", jnp.float32, 8) is None
    assert resolve_attention("auto", jnp.float32, 8) is None


def tiny_bert_and_short_rows(copies: int = 1):
    """A 2-layer BERT regressor without dropout, and a batch of a six-token row and a padded one
    (``copies`` times: a batch that splits over a mesh)."""
    arch = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, model_type="bert")
    model = build_regressor(ModelConfig(family="bert", dropout=0.0), arch, seed=1)
    ids = jnp.array([[2, 5, 6, 7, 8, 3], [2, 9, 3, 0, 0, 0]] * copies)
    return model, {"input_ids": ids, "attention_mask": (ids > 0).astype(jnp.int32)}


def scan_loops(jaxpr) -> int:
    """The outermost loops of a traced function (the blocked kernel is one ``lax.map`` per layer, inside
    its custom VJP's call)."""
    inner = lambda eqn: scan_loops(eqn.params["call_jaxpr"]) if eqn.primitive.name == "custom_vjp_call" else 0
    return sum(eqn.primitive.name == "scan" or inner(eqn) for eqn in jaxpr.jaxpr.eqns)


def test_scoring_runs_the_blocked_kernel_on_short_rows_and_training_does_not():
    """The predict function (Scorer, eval, export checks) traces the model under ``predicting``: on CPU
    its attention is the blocked kernel's loop even on six tokens, with the same scores; the model as
    training calls it keeps XLA's kernel there."""
    model, batch = tiny_bert_and_short_rows()
    ids = batch["input_ids"]
    graphdef, params = nnx.split(model)
    predict = make_predict_fn(graphdef)
    assert scan_loops(jax.make_jaxpr(predict)(params, batch)) == 2  # one lax.map per layer
    assert scan_loops(jax.make_jaxpr(lambda i, m: model(i, m))(ids, batch["attention_mask"])) == 0
    np.testing.assert_allclose(np.asarray(predict(params, batch)), np.asarray(model.scores(model(ids, batch["attention_mask"]))), atol=1e-6)


def test_a_mesh_of_several_cpu_devices_keeps_xla_attention():
    """The suite's 8 simulated CPU devices share the host's cores, where the blocked kernel's loop is
    slow (``layers.one_cpu_device``): traced under a mesh of them, the predict function and a long
    training row take XLA's kernel, with the same scores; under a one-device mesh, the blocked one."""
    from omnidistill.config import MeshConfig
    from omnidistill.parallel.mesh import build_mesh

    assert len(jax.devices()) == 8  # tests/conftest.py
    several, one = build_mesh(MeshConfig()), build_mesh(MeshConfig(), devices=jax.devices()[:1])
    with jax.set_mesh(several):
        assert resolve_attention("auto", jnp.float32, 512) is None
        with predicting():
            assert resolve_attention("auto", jnp.float32, 8) is None
            assert resolve_attention("blocked", jnp.float32, 8) == "blocked"  # asked for by name
    with jax.set_mesh(one):
        assert resolve_attention("auto", jnp.float32, 512) == "blocked"
        with predicting():
            assert resolve_attention("auto", jnp.float32, 8) == "blocked"
    model, batch = tiny_bert_and_short_rows(copies=4)
    graphdef, params = nnx.split(model)
    predict = make_predict_fn(graphdef)
    scores = {}
    for name, mesh, loops in (("several", several, 0), ("one", one, 2)):
        with jax.set_mesh(mesh):
            assert scan_loops(jax.make_jaxpr(predict)(params, batch)) == loops
            scores[name] = np.asarray(jax.jit(predict)(params, batch))
    np.testing.assert_allclose(scores["several"], scores["one"], atol=1e-6)


def test_a_cudnn_configured_model_scores_on_cpu_like_xla():
    arch = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, model_type="modernbert")
    ids = jnp.array([[2, 5, 6, 7, 8, 3], [2, 9, 3, 0, 0, 0]])
    mask = (ids > 0).astype(jnp.int32)
    out = {
        impl: np.asarray(build_regressor(ModelConfig(family="modernbert", attention=impl), arch, seed=1)(ids, mask))
        for impl in ("xla", "cudnn", "auto")
    }
    np.testing.assert_array_equal(out["cudnn"], out["xla"])
    np.testing.assert_array_equal(out["auto"], out["xla"])  # six tokens: XLA's kernel under auto on CPU


MASKS = {
    "padding": lambda: padding_mask(jnp.array([[1] * 12, [1] * 7 + [0] * 5])),
    # single-token segments, and a row of padding only
    "segments": lambda: segment_mask(jnp.array([[1, 2, 2, 3, 4, 4, 4, 4, 5, 0, 0, 0], [0] * 12])),
    "causal": lambda: segment_mask(jnp.array([[1] * 5 + [2] * 7, [1] * 3 + [2] * 4 + [0] * 5])) & jnp.tril(jnp.ones((12, 12), bool)),
}


@pytest.mark.parametrize(
    "kind,variant",
    [("padding", "plain"), ("padding", "bias"), ("segments", "window"), ("segments", "bias"), ("causal", "grouped_heads")],
)
def test_blocked_kernel_gives_xla_attention_and_gradients(kind, variant):
    q, k, v = qkv(n=4)
    if variant == "grouped_heads":  # 4 query heads over 2 key/value heads
        k, v = k[:, :, :2], v[:, :, :2]
    bias = jax.random.normal(jax.random.PRNGKey(7), (2, 4, 12, 12)) if variant == "bias" else None
    window = 2 if variant == "window" else None
    mask = MASKS[kind]()

    def loss(kernel, q, k, v, bias):
        out = kernel(q, k, v, bias)
        return jnp.sum(out * jnp.cos(out)), out

    xla = lambda q, k, v, bias: attention(q, k, v, mask, "xla", bias=bias, scale=0.3, window=window)
    blocked = lambda q, k, v, bias: blocked_attention(q, k, v, mask, bias, 0.3, window)
    argnums = (1, 2, 3, 4) if bias is not None else (1, 2, 3)
    (_, want), want_grads = jax.value_and_grad(loss, argnums, has_aux=True)(xla, q, k, v, bias)
    (_, got), got_grads = jax.jit(jax.value_and_grad(loss, argnums, has_aux=True), static_argnums=0)(blocked, q, k, v, bias)
    real = np.asarray(mask).any(axis=(1, 3))[:, :, None, None] if kind != "causal" else True  # rows of padding: any finite value
    np.testing.assert_allclose(np.where(real, got, 0), np.where(real, want, 0), atol=2e-6)
    for g, w in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-5)


def test_blocked_gradients_in_steps_with_a_remainder_equal_xla(monkeypatch):
    """The backward pass in map steps of 3 (row, head) pairs over 4 heads (a remainder step per row),
    with a bias and padding: XLA's attention gradients."""
    monkeypatch.setattr(blocked_module, "DIFFERENTIATED_BLOCK_SCORES", 3 * 12 * 12)
    q, k, v = qkv(n=4)
    bias = jax.random.normal(jax.random.PRNGKey(3), (2, 4, 12, 12))
    mask = MASKS["padding"]()

    def loss(kernel, q, k, v, bias):
        out = kernel(q, k, v, bias)
        return jnp.sum(out * jnp.cos(out))

    xla = lambda q, k, v, bias: attention(q, k, v, mask, "xla", bias=bias, scale=0.3)
    blocked = lambda q, k, v, bias: blocked_attention(q, k, v, mask, bias, 0.3, None)
    want = jax.grad(loss, (1, 2, 3, 4))(xla, q, k, v, bias)
    got = jax.jit(jax.grad(loss, (1, 2, 3, 4)), static_argnums=0)(blocked, q, k, v, bias)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-5)


@pytest.mark.parametrize("with_bias", [False, True])
def test_blocked_backward_keeps_no_score_arrays(with_bias):
    """Differentiated, the blocked kernel keeps the [B, N, S] log-sum-exp for its backward pass and
    recomputes the scores there: no saved residual is [S, S]-sized, other than a bias it was given
    (differentiating the forward loop kept each block's scores and weights, two [B, N, S, S] arrays)."""
    from jax._src.ad_checkpoint import saved_residuals

    q, k, v = qkv(n=4, s=16)
    bias = jnp.ones((2, 4, 16, 16)) if with_bias else None
    mask = jnp.ones((2, 1, 1, 16), bool)
    saved = saved_residuals(lambda q, k, v, b: jnp.sum(blocked_attention(q, k, v, mask, b, None, None)), q, k, v, bias)
    square = [aval.shape for aval, _ in saved if aval.shape[-2:] == (16, 16)]
    assert square == ([(2, 4, 16, 16)] if with_bias else []), square
