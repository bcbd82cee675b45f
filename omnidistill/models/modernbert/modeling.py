"""ModernBERT encoder in Flax NNX: pre-norm blocks without biases, RoPE (separate global/local theta),
alternating global and sliding-window attention, GeGLU MLP, final norm.

Matches Hugging Face ``ModernBertModel`` (see tests/models/test_modernbert_parity.py); attention goes
through ``jax.nn.dot_product_attention`` with the padding mask and, on local layers, a local window.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from omnidistill.models import cpu_matmul
from omnidistill.models.layers import (
    AttentionKernel,
    AttentionMask,
    activation,
    attention,
    attention_kernel,
    band_mask,
    call_layer,
    dropout,
    embedding_lookup,
    encoder_mask,
    last_rows_call,
    sub_rng,
    token_positions,
)
from omnidistill.models.modernbert.config import LOCAL, ModernBertConfig
from omnidistill.models.scan import layer_stack, run_layers
from omnidistill.models.unpadding import TokenLayout, unpad

_INIT = nnx.initializers.normal(0.02)


def _dense(n_in: int, n_out: int, bias: bool, dtype, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(
        n_in, n_out, use_bias=bias, dtype=dtype, param_dtype=jnp.float32, kernel_init=_INIT, rngs=rngs, dot_general=cpu_matmul.dot_general
    )


def _norm(cfg: ModernBertConfig, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(
        cfg.hidden_size, epsilon=cfg.norm_eps, use_bias=cfg.norm_bias, dtype=jnp.float32, param_dtype=jnp.float32, rngs=rngs
    )


def rope_tables(positions: jax.Array, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    """cos, sin of shape [B, S, D] for [B, S] positions (frequencies repeated over both halves)."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate-half RoPE on [B, S, N, D] in float32."""
    xf = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    return (xf * cos[:, :, None, :] + rotated * sin[:, :, None, :]).astype(x.dtype)


class ModernBertAttention(nnx.Module):
    def __init__(self, cfg: ModernBertConfig, layer: int, dtype, attention_impl: AttentionKernel, rngs: nnx.Rngs):
        self.cfg = cfg
        self.local = cfg.layer_types[layer] == LOCAL
        self.theta = cfg.local_rope_theta if self.local else cfg.global_rope_theta
        self.Wqkv = _dense(cfg.hidden_size, 3 * cfg.hidden_size, cfg.attention_bias, dtype, rngs)
        self.Wo = _dense(cfg.hidden_size, cfg.hidden_size, cfg.attention_bias, dtype, rngs)
        self.attention_impl = attention_impl

    def __call__(
        self, x: jax.Array, mask: AttentionMask, positions: jax.Array, rng: jax.Array | None, rows: int | None = None
    ) -> jax.Array:
        """[B, S, H] -> [B, S, H], or [B, rows, H]: the first ``rows`` positions only (all keys; a local
        window then becomes part of the mask)."""
        b, s, _ = x.shape
        qkv = self.Wqkv(x).reshape(b, s, 3, self.cfg.num_attention_heads, self.cfg.head_dim)
        cos, sin = rope_tables(positions, self.cfg.head_dim, self.theta)
        q, k, v = apply_rope(qkv[:, :, 0], cos, sin), apply_rope(qkv[:, :, 1], cos, sin), qkv[:, :, 2]
        window = self.cfg.local_attention // 2 if self.local else None
        if rows is not None:
            q = q[:, :rows]
            if window is not None:
                mask, window = band_mask(mask.dense(), s, window)[:, :, :rows], None
        ctx = attention(q, k, v, mask, self.attention_impl, window=window).reshape(b, q.shape[1], -1)
        return dropout(self.Wo(ctx), self.cfg.attention_dropout, rng)


class ModernBertMLP(nnx.Module):
    def __init__(self, cfg: ModernBertConfig, dtype, rngs: nnx.Rngs):
        self.cfg = cfg
        self.Wi = _dense(cfg.hidden_size, 2 * cfg.intermediate_size, cfg.mlp_bias, dtype, rngs)
        self.Wo = _dense(cfg.intermediate_size, cfg.hidden_size, cfg.mlp_bias, dtype, rngs)
        self.act = activation(cfg.hidden_activation)

    def __call__(self, x: jax.Array, rng: jax.Array | None) -> jax.Array:
        h = self.Wi(x)
        inp, gate = jnp.split(h, 2, axis=-1)
        return self.Wo(dropout(self.act(inp) * gate, self.cfg.mlp_dropout, rng))


class ModernBertLayer(nnx.Module):
    def __init__(self, cfg: ModernBertConfig, layer: int, dtype, attention_impl: AttentionKernel, rngs: nnx.Rngs):
        self.attn_norm = _norm(cfg, rngs) if layer > 0 else None  # the first block has no attention norm
        self.attn = ModernBertAttention(cfg, layer, dtype, attention_impl, rngs)
        self.mlp_norm = _norm(cfg, rngs)
        self.mlp = ModernBertMLP(cfg, dtype, rngs)
        self.dtype = dtype

    def __call__(
        self, x: jax.Array, mask: AttentionMask, positions: jax.Array, rng: jax.Array | None, rows: int | None = None
    ) -> jax.Array:
        h = self.attn_norm(x).astype(self.dtype) if self.attn_norm is not None else x
        attended = self.attn(h, mask, positions, sub_rng(rng, 0), rows)
        x = x if rows is None else x[:, :rows]
        x = (x.astype(jnp.float32) + attended.astype(jnp.float32)).astype(self.dtype)
        y = self.mlp(self.mlp_norm(x).astype(self.dtype), sub_rng(rng, 1))
        return (x.astype(jnp.float32) + y.astype(jnp.float32)).astype(self.dtype)


class ModernBertEncoder(nnx.Module):
    """ModernBERT backbone: token ids -> final-norm hidden states (or every layer's output)."""

    takes_first_rows = True
    """``first_rows`` is honoured (:func:`~omnidistill.models.layers.last_rows_call`)."""
    takes_token_index = True
    """``token_index`` is honoured: the layers run unpadded (:mod:`~omnidistill.models.unpadding`)."""

    def __init__(
        self,
        cfg: ModernBertConfig,
        *,
        dtype=jnp.float32,
        attention_impl: str = "xla",
        remat: str = "none",
        scan: bool = False,
        rngs: nnx.Rngs,
    ):
        self.cfg = cfg
        self.remat = remat
        kernel = attention_kernel(attention_impl, remat)
        self.tok_embeddings = nnx.Embed(cfg.vocab_size, cfg.hidden_size, param_dtype=jnp.float32, embedding_init=_INIT, rngs=rngs)
        self.embedding_norm = _norm(cfg, rngs)
        self.layers = layer_stack([ModernBertLayer(cfg, i, dtype, kernel, rngs) for i in range(cfg.num_hidden_layers)], scan=scan)
        self.final_norm = _norm(cfg, rngs)
        self.dtype = dtype

    def __call__(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array,
        token_type_ids: jax.Array | None = None,
        *,
        segment_ids: jax.Array | None = None,
        rng: jax.Array | None = None,
        return_all_layers: bool = False,
        first_rows: int | None = None,
        token_index: jax.Array | None = None,
    ) -> jax.Array | list[jax.Array]:
        """Final-norm hidden states [B, S, H] (or every layer's; ``first_rows``: [B, first_rows, H], see
        :func:`~omnidistill.models.layers.last_rows_call`). With ``segment_ids`` (packed rows),
        attention stays within a segment and RoPE positions restart at each segment. ``token_index``
        [G, t]: the layers run on the real tokens only (:class:`TokenLayout`), outputs padded."""
        del token_type_ids  # ModernBERT has no token types
        if input_ids.shape[1] > self.cfg.max_sequence_length:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_position_embeddings={self.cfg.max_position_embeddings}")
        mask = encoder_mask(attention_mask, segment_ids)
        positions = token_positions(input_ids, segment_ids)
        layout = None if token_index is None else TokenLayout.of(attention_mask, token_index)
        inner, inner_positions = mask.unpadded(layout), unpad(layout, jnp.broadcast_to(positions, input_ids.shape))
        x = self.embedding_norm(embedding_lookup(self.tok_embeddings, input_ids, self.cfg.pad_token_id))
        x = dropout(x, self.cfg.embedding_dropout, sub_rng(rng, 10_000)).astype(self.dtype)
        embedded = x
        x, states = run_layers(
            self.layers,
            x,
            lambda layer, h, i: call_layer(layer, self.remat, h, inner, inner_positions, sub_rng(rng, i)),
            collect=return_all_layers,
            last_call=last_rows_call(first_rows, lambda layer, h, i, rows: layer(h, mask, positions, sub_rng(rng, i), rows)),
            layout=layout,
        )
        final = self.final_norm(x[:, :first_rows]).astype(self.dtype)
        return [embedded, *states[:-1], final] if return_all_layers else final


class ModernBertPooler(nnx.Module):
    """The head of ``ModernBertForSequenceClassification``: norm(act(dense(h[CLS])))."""

    def __init__(self, cfg: ModernBertConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        self.dense = _dense(cfg.hidden_size, cfg.hidden_size, cfg.classifier_bias, dtype, rngs)
        self.norm = _norm(cfg, rngs)
        self.act = activation(cfg.classifier_activation)
        self.dropout_rate = cfg.classifier_dropout

    @property
    def features(self) -> int:
        return self.dense.out_features

    def __call__(self, cls_state: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        return dropout(self.norm(self.act(self.dense(cls_state))), self.dropout_rate, rng)
