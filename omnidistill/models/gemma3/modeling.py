"""Gemma 3 text model in Flax NNX, used as a scoring backbone (EmbeddingGemma and the Gemma 3 decoders).

Matches Hugging Face ``Gemma3TextModel`` (tests/models/test_gemma3_parity.py): embeddings scaled by
``sqrt(hidden_size)``; per layer, RMSNorm before and after attention and before and after the MLP
(norm weights are offsets from 1, applied in float32); grouped-query attention with q/k RMSNorm,
RoPE with one base for the local (``sliding_attention``) and another for the global layers, and
scores scaled by ``query_pre_attn_scalar ** -0.5``. Attention is bidirectional when the checkpoint
sets ``use_bidirectional_attention`` (EmbeddingGemma), causal otherwise. Positions are 0..S-1,
restarting per packed segment.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from omnidistill.models.gemma3.config import Gemma3Config
from omnidistill.models.layers import (
    AttentionKernel,
    activation,
    attention,
    attention_kernel,
    call_layer,
    embedding_lookup,
    encoder_mask,
    token_positions,
)
from omnidistill.models.modernbert.modeling import apply_rope, rope_tables
from omnidistill.models.qwen3.modeling import INIT, Qwen3Pooler, dense
from omnidistill.models.scan import layer_stack, run_layers


class GemmaRMSNorm(nnx.Module):
    """``x / sqrt(mean(x^2) + eps) * (1 + weight)``, all in float32 (Gemma3RMSNorm: the weight is an offset from 1)."""

    def __init__(self, size: int, eps: float):
        self.scale = nnx.Param(jnp.zeros((size,), jnp.float32))
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        normed = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return (normed * (1.0 + self.scale[...])).astype(x.dtype)


class Gemma3Attention(nnx.Module):
    def __init__(self, cfg: Gemma3Config, layer: int, dtype, attention_impl: AttentionKernel, rngs: nnx.Rngs):
        self.cfg = cfg
        self.layer_type = cfg.layer_types[layer]
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = dense(h, cfg.num_attention_heads * d, cfg.attention_bias, dtype, rngs)
        self.k_proj = dense(h, cfg.num_key_value_heads * d, cfg.attention_bias, dtype, rngs)
        self.v_proj = dense(h, cfg.num_key_value_heads * d, cfg.attention_bias, dtype, rngs)
        self.o_proj = dense(cfg.num_attention_heads * d, h, cfg.attention_bias, dtype, rngs)
        self.q_norm = GemmaRMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(d, cfg.rms_norm_eps)
        self.attention_impl = attention_impl

    def __call__(self, x: jax.Array, mask: jax.Array, rope: dict[str, tuple[jax.Array, jax.Array]]) -> jax.Array:
        b, s, _ = x.shape
        d = self.cfg.head_dim
        q = self.q_norm(self.q_proj(x).reshape(b, s, self.cfg.num_attention_heads, d))
        k = self.k_norm(self.k_proj(x).reshape(b, s, self.cfg.num_key_value_heads, d))
        v = self.v_proj(x).reshape(b, s, self.cfg.num_key_value_heads, d)
        cos, sin = rope[self.layer_type]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        window = self.cfg.window if self.layer_type == "sliding_attention" else None
        scale = self.cfg.query_pre_attn_scalar**-0.5
        ctx = attention(q, k, v, mask, self.attention_impl, scale=scale, window=window)
        return self.o_proj(ctx.reshape(b, s, -1))


class Gemma3Layer(nnx.Module):
    def __init__(self, cfg: Gemma3Config, layer: int, dtype, attention_impl: AttentionKernel, rngs: nnx.Rngs):
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_norm = GemmaRMSNorm(h, eps)
        self.attention = Gemma3Attention(cfg, layer, dtype, attention_impl, rngs)
        self.post_attention_norm = GemmaRMSNorm(h, eps)
        self.pre_feedforward_norm = GemmaRMSNorm(h, eps)
        self.post_feedforward_norm = GemmaRMSNorm(h, eps)
        self.gate_proj = dense(h, cfg.intermediate_size, False, dtype, rngs)
        self.up_proj = dense(h, cfg.intermediate_size, False, dtype, rngs)
        self.down_proj = dense(cfg.intermediate_size, h, False, dtype, rngs)
        self.act = activation(cfg.hidden_activation)

    def __call__(self, x: jax.Array, mask: jax.Array, rope: dict[str, tuple[jax.Array, jax.Array]]) -> jax.Array:
        x = x + self.post_attention_norm(self.attention(self.input_norm(x), mask, rope))
        h = self.pre_feedforward_norm(x)
        return x + self.post_feedforward_norm(self.down_proj(self.act(self.gate_proj(h)) * self.up_proj(h)))


class Gemma3Encoder(nnx.Module):
    """Gemma 3 as an encoder of the regressor: token ids -> final (normed) hidden states."""

    def __init__(
        self, cfg: Gemma3Config, *, dtype=jnp.float32, attention_impl: str = "xla", remat: str = "none", scan: bool = False, rngs: nnx.Rngs
    ):
        self.cfg = cfg
        self.remat = remat
        self.dtype = dtype
        kernel = attention_kernel(attention_impl, remat)
        self.embed_tokens = nnx.Embed(cfg.vocab_size, cfg.hidden_size, param_dtype=jnp.float32, embedding_init=INIT, rngs=rngs)
        self.layers = layer_stack([Gemma3Layer(cfg, i, dtype, kernel, rngs) for i in range(cfg.num_hidden_layers)], scan=scan)
        self.final_norm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def __call__(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array,
        token_type_ids: jax.Array | None = None,
        *,
        segment_ids: jax.Array | None = None,
        rng: jax.Array | None = None,
        return_all_layers: bool = False,
    ) -> jax.Array | list[jax.Array]:
        """Last hidden state [B, S, H] (after the final norm), or the embeddings plus every layer's output
        (the last one normed). ``segment_ids`` marks packed rows: attention stays within a segment."""
        del token_type_ids, rng  # no token types, no dropout
        seq = input_ids.shape[1]
        if seq > self.cfg.max_sequence_length:
            raise ValueError(f"sequence length {seq} exceeds max_position_embeddings={self.cfg.max_position_embeddings}")
        mask = encoder_mask(attention_mask, segment_ids)
        if self.cfg.causal:
            mask = mask.made_causal()
        positions = jnp.broadcast_to(token_positions(input_ids, segment_ids), input_ids.shape).astype(jnp.float32)
        rope = {}
        for layer_type in sorted(set(self.cfg.layer_types)):
            setting = self.cfg.rope(layer_type)
            rope[layer_type] = rope_tables(positions / setting.factor, self.cfg.head_dim, setting.theta)
        x = embedding_lookup(self.embed_tokens, input_ids, self.cfg.pad_token_id)
        x = (x * jnp.float32(math.sqrt(self.cfg.hidden_size))).astype(self.dtype)
        embedded = x
        x, states = run_layers(self.layers, x, lambda layer, h, _: call_layer(layer, self.remat, h, mask, rope), collect=return_all_layers)
        final = self.final_norm(x)
        return [embedded, *states[:-1], final] if return_all_layers else final


class Gemma3Pooler(Qwen3Pooler):
    """Gemma 3 has no classification pooler: ``model.pooling: cls`` is refused (use ``mean`` or ``last_token``)."""
