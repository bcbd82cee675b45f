"""Qwen3 decoder in Flax NNX, used as an embedding backbone: pre-RMSNorm blocks, RoPE, grouped-query
attention with per-head q/k RMSNorm, SiLU-gated MLP, causal attention.

Matches Hugging Face ``Qwen3Model`` (tests/models/test_qwen3_parity.py). Positions are 0..S-1 (restarting
per packed segment), as ``Qwen3Model`` numbers them without a cache; right padding keeps every real
token's state unchanged. RMSNorm and softmax run in float32 under bf16 compute.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from omnidistill.models import cpu_matmul
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
from omnidistill.models.qwen3.config import Qwen3Config
from omnidistill.models.scan import layer_stack, run_layers

INIT = nnx.initializers.normal(0.02)


def dense(n_in: int, n_out: int, bias: bool, dtype, rngs: nnx.Rngs) -> nnx.Linear:
    """A linear layer with float32 parameters computing in ``dtype`` (the decoders' projections)."""
    return nnx.Linear(
        n_in, n_out, use_bias=bias, dtype=dtype, param_dtype=jnp.float32, kernel_init=INIT, rngs=rngs, dot_general=cpu_matmul.dot_general
    )


class RMSNorm(nnx.Module):
    """``weight * x / sqrt(mean(x^2) + eps)``, normalised in float32 (Qwen3RMSNorm)."""

    def __init__(self, size: int, eps: float):
        self.scale = nnx.Param(jnp.ones((size,), jnp.float32))
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        normed = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return (self.scale[...] * normed.astype(x.dtype).astype(jnp.float32)).astype(x.dtype)


class Qwen3Attention(nnx.Module):
    def __init__(self, cfg: Qwen3Config, dtype, attention_impl: AttentionKernel, rngs: nnx.Rngs):
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = dense(h, cfg.num_attention_heads * d, cfg.qkv_bias, dtype, rngs)
        self.k_proj = dense(h, cfg.num_key_value_heads * d, cfg.qkv_bias, dtype, rngs)
        self.v_proj = dense(h, cfg.num_key_value_heads * d, cfg.qkv_bias, dtype, rngs)
        self.o_proj = dense(cfg.num_attention_heads * d, h, cfg.output_bias, dtype, rngs)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.attention_impl = attention_impl

    def __call__(self, x: jax.Array, mask: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
        b, s, _ = x.shape
        d = self.cfg.head_dim
        q = self.q_proj(x).reshape(b, s, self.cfg.num_attention_heads, d)
        k = self.k_proj(x).reshape(b, s, self.cfg.num_key_value_heads, d)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        v = self.v_proj(x).reshape(b, s, self.cfg.num_key_value_heads, d)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        ctx = attention(q, k, v, mask, self.attention_impl)  # grouped-query: K/V heads are shared
        return self.o_proj(ctx.reshape(b, s, -1))


class Qwen3Layer(nnx.Module):
    def __init__(self, cfg: Qwen3Config, dtype, attention_impl: AttentionKernel, rngs: nnx.Rngs):
        self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attention = Qwen3Attention(cfg, dtype, attention_impl, rngs)
        self.post_attention_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.gate_proj = dense(cfg.hidden_size, cfg.intermediate_size, False, dtype, rngs)
        self.up_proj = dense(cfg.hidden_size, cfg.intermediate_size, False, dtype, rngs)
        self.down_proj = dense(cfg.intermediate_size, cfg.hidden_size, False, dtype, rngs)
        self.act = activation(cfg.hidden_act)

    def __call__(self, x: jax.Array, mask: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
        x = x + self.attention(self.input_norm(x), mask, cos, sin)
        h = self.post_attention_norm(x)
        return x + self.down_proj(self.act(self.gate_proj(h)) * self.up_proj(h))


class Qwen3Encoder(nnx.Module):
    """Qwen3 as an encoder of the regressor: token ids -> final (normed) hidden states, causal attention."""

    def __init__(
        self, cfg: Qwen3Config, *, dtype=jnp.float32, attention_impl: str = "xla", remat: str = "none", scan: bool = False, rngs: nnx.Rngs
    ):
        self.cfg = cfg
        self.remat = remat
        self.dtype = dtype
        kernel = attention_kernel(attention_impl, remat)
        self.embed_tokens = nnx.Embed(cfg.vocab_size, cfg.hidden_size, param_dtype=jnp.float32, embedding_init=INIT, rngs=rngs)
        self.layers = layer_stack([Qwen3Layer(cfg, dtype, kernel, rngs) for _ in range(cfg.num_hidden_layers)], scan=scan)
        self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

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
        (the last one normed). ``segment_ids`` marks packed rows: attention stays causal within a segment."""
        del token_type_ids, rng  # no token types; Qwen3 trains without dropout
        seq = input_ids.shape[1]
        if seq > self.cfg.max_sequence_length:
            raise ValueError(f"sequence length {seq} exceeds max_position_embeddings={self.cfg.max_position_embeddings}")
        mask = encoder_mask(attention_mask, segment_ids).made_causal()
        cos, sin = rope_tables(
            jnp.broadcast_to(token_positions(input_ids, segment_ids), input_ids.shape), self.cfg.head_dim, self.cfg.rope_theta
        )
        x = embedding_lookup(self.embed_tokens, input_ids, self.cfg.pad_token_id).astype(self.dtype)
        embedded = x
        x, states = run_layers(
            self.layers, x, lambda layer, h, _: call_layer(layer, self.remat, h, mask, cos, sin), collect=return_all_layers
        )
        final = self.final_norm(x)
        return [embedded, *states[:-1], final] if return_all_layers else final


class Qwen3Pooler(nnx.Module):
    """Qwen3 has no classification pooler: ``model.pooling: cls`` is refused (use ``last_token``)."""

    def __init__(self, cfg: Qwen3Config, *, dtype=jnp.float32, rngs: nnx.Rngs):
        raise ValueError("a decoder family (qwen2, qwen3, gemma3) has no [CLS] pooler: use model.pooling=last_token or mean")
