"""BERT encoder in Flax NNX (post-LayerNorm blocks, absolute positions, GELU MLP).

Parameters are float32; ``dtype`` is the compute dtype (bfloat16 for training). LayerNorms and
softmax run in float32. Matches Hugging Face ``BertModel`` (see tests/models/test_bert_parity.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from omnidistill.models import cpu_matmul
from omnidistill.models.bert.config import BertConfig
from omnidistill.models.layers import (
    AttentionKernel,
    activation,
    attention,
    attention_kernel,
    call_layer,
    dropout,
    embedding_lookup,
    encoder_mask,
    last_rows_call,
    sub_rng,
    token_positions,
)
from omnidistill.models.scan import layer_stack, run_layers
from omnidistill.models.unpadding import TokenLayout

_INIT = nnx.initializers.normal(0.02)


def _dense(n_in: int, n_out: int, dtype, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(n_in, n_out, dtype=dtype, param_dtype=jnp.float32, kernel_init=_INIT, rngs=rngs, dot_general=cpu_matmul.dot_general)


def _norm(n: int, eps: float, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(n, epsilon=eps, dtype=jnp.float32, param_dtype=jnp.float32, rngs=rngs)


class BertEmbeddings(nnx.Module):
    def __init__(self, cfg: BertConfig, dtype, rngs: nnx.Rngs):
        self.cfg = cfg
        self.word_embeddings = nnx.Embed(cfg.vocab_size, cfg.hidden_size, param_dtype=jnp.float32, embedding_init=_INIT, rngs=rngs)
        self.position_embeddings = nnx.Embed(
            cfg.max_position_embeddings, cfg.hidden_size, param_dtype=jnp.float32, embedding_init=_INIT, rngs=rngs
        )
        self.token_type_embeddings = nnx.Embed(
            cfg.type_vocab_size, cfg.hidden_size, param_dtype=jnp.float32, embedding_init=_INIT, rngs=rngs
        )
        self.layer_norm = _norm(cfg.hidden_size, cfg.layer_norm_eps, rngs)
        self.dtype = dtype

    def __call__(self, input_ids: jax.Array, token_type_ids: jax.Array, positions: jax.Array, rng: jax.Array | None) -> jax.Array:
        seq = input_ids.shape[1]
        if seq > self.cfg.max_sequence_length:
            raise ValueError(f"sequence length {seq} exceeds the {self.cfg.max_sequence_length} positions of max_position_embeddings")
        x = embedding_lookup(self.word_embeddings, input_ids, self.cfg.pad_token_id)
        x = x + embedding_lookup(self.position_embeddings, positions, self.cfg.position_padding_idx)
        x = x + self.token_type_embeddings(token_type_ids)
        x = self.layer_norm(x)
        return dropout(x, self.cfg.hidden_dropout_prob, rng).astype(self.dtype)


class BertSelfAttention(nnx.Module):
    def __init__(self, cfg: BertConfig, dtype, attention_impl: AttentionKernel, rngs: nnx.Rngs):
        h = cfg.hidden_size
        self.cfg = cfg
        self.query = _dense(h, h, dtype, rngs)
        self.key = _dense(h, h, dtype, rngs)
        self.value = _dense(h, h, dtype, rngs)
        self.output = _dense(h, h, dtype, rngs)
        self.output_norm = _norm(h, cfg.layer_norm_eps, rngs)
        self.attention_impl = attention_impl

    def __call__(self, x: jax.Array, mask: jax.Array, rng: jax.Array | None, rows: int | None = None) -> jax.Array:
        """[B, S, H] -> [B, S, H], or [B, rows, H]: the first ``rows`` positions only (all keys)."""
        heads = lambda y: y.reshape(*y.shape[:2], self.cfg.num_attention_heads, self.cfg.head_dim)
        queries = x if rows is None else x[:, :rows]
        q, k, v = heads(self.query(queries)), heads(self.key(x)), heads(self.value(x))
        ctx = attention(q, k, v, mask, self.attention_impl).reshape(queries.shape)
        out = dropout(self.output(ctx), self.cfg.hidden_dropout_prob, rng)
        return self.output_norm(out.astype(jnp.float32) + queries.astype(jnp.float32)).astype(x.dtype)


class BertLayer(nnx.Module):
    def __init__(self, cfg: BertConfig, dtype, attention_impl: AttentionKernel, rngs: nnx.Rngs):
        self.cfg = cfg
        self.attention = BertSelfAttention(cfg, dtype, attention_impl, rngs)
        self.intermediate = _dense(cfg.hidden_size, cfg.intermediate_size, dtype, rngs)
        self.output = _dense(cfg.intermediate_size, cfg.hidden_size, dtype, rngs)
        self.output_norm = _norm(cfg.hidden_size, cfg.layer_norm_eps, rngs)
        self.act = activation(cfg.hidden_act)

    def __call__(self, x: jax.Array, mask: jax.Array, rng: jax.Array | None, rows: int | None = None) -> jax.Array:
        x = self.attention(x, mask, sub_rng(rng, 0), rows)
        y = self.output(self.act(self.intermediate(x)))
        y = dropout(y, self.cfg.hidden_dropout_prob, sub_rng(rng, 1))
        return self.output_norm(y.astype(jnp.float32) + x.astype(jnp.float32)).astype(x.dtype)


class BertEncoder(nnx.Module):
    """BERT without the pooler: token ids -> hidden states of every layer."""

    takes_first_rows = True
    """``first_rows`` is honoured (:func:`~omnidistill.models.layers.last_rows_call`)."""
    takes_token_index = True
    """``token_index`` is honoured: the layers run unpadded (:mod:`~omnidistill.models.unpadding`)."""

    def __init__(
        self, cfg: BertConfig, *, dtype=jnp.float32, attention_impl: str = "xla", remat: str = "none", scan: bool = False, rngs: nnx.Rngs
    ):
        self.cfg = cfg
        self.remat = remat
        kernel = attention_kernel(attention_impl, remat)
        self.embeddings = BertEmbeddings(cfg, dtype, rngs)
        self.layers = layer_stack([BertLayer(cfg, dtype, kernel, rngs) for _ in range(cfg.num_hidden_layers)], scan=scan)

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
        """Last hidden state [B, S, H], or the embeddings plus every layer's output.

        ``segment_ids`` marks packed rows (several examples per row, 1, 2, ... and 0 for padding):
        attention stays within a segment and positions restart at each segment. ``first_rows``: the
        last hidden state of the first positions only, [B, first_rows, H] (see :func:`last_rows_call`).
        ``token_index`` [G, t]: the layers run on the real tokens only (:class:`TokenLayout`); the
        outputs are the same, padded.
        """
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        mask = encoder_mask(attention_mask, segment_ids)
        layout = None if token_index is None else TokenLayout.of(attention_mask, token_index)
        inner = mask.unpadded(layout)
        positions = self.positions(input_ids, segment_ids)
        x = self.embeddings(input_ids, token_type_ids, positions, sub_rng(rng, 10_000))
        embedded = x
        x, states = run_layers(
            self.layers,
            x,
            lambda layer, h, i: call_layer(layer, self.remat, h, inner, sub_rng(rng, i)),
            collect=return_all_layers,
            last_call=last_rows_call(first_rows, lambda layer, h, i, rows: layer(h, mask, sub_rng(rng, i), rows)),
            layout=layout,
        )
        return [embedded, *states] if return_all_layers else x[:, :first_rows]

    def positions(self, input_ids: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
        """Position ids: 0, 1, ... (restarting at each segment of a packed row)."""
        return token_positions(input_ids, segment_ids)


class BertPooler(nnx.Module):
    """The pooler of ``BertForSequenceClassification``: tanh(dense(h[CLS]))."""

    def __init__(self, cfg: BertConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        self.dense = _dense(cfg.hidden_size, cfg.hidden_size, dtype, rngs)
        self.dropout_rate = cfg.hidden_dropout_prob

    @property
    def features(self) -> int:
        return self.dense.out_features

    def __call__(self, cls_state: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        pooled = jnp.tanh(self.dense(cls_state))
        return dropout(pooled, self.dropout_rate, rng)
