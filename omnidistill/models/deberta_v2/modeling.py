"""DeBERTa-v2/v3 encoder in Flax NNX: disentangled attention (content-to-position and
position-to-content) over log-bucketed relative positions, shared or separate position projections,
LayerNorm on the relative embeddings, post-LN blocks.

The two disentangled terms enter ``jax.nn.dot_product_attention`` as an additive bias with the
DeBERTa scale ``1/sqrt(head_dim * (1 + #position terms))``. Matches Hugging Face ``DebertaV2Model``
(see tests/models/test_deberta_v2_parity.py).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from omnidistill.models import cpu_matmul
from omnidistill.models.deberta_v2.config import DebertaV2Config
from omnidistill.models.layers import (
    AttentionKernel,
    activation,
    attention,
    attention_kernel,
    call_layer,
    dropout,
    embedding_lookup,
    encoder_mask,
    is_predicting,
    last_rows_call,
    sub_rng,
    token_positions,
)
from omnidistill.models.scan import layer_stack, run_layers
from omnidistill.models.unpadding import TokenLayout, unpad

_INIT = nnx.initializers.normal(0.02)


def _dense(n_in: int, n_out: int, dtype, rngs: nnx.Rngs, bias: bool = True) -> nnx.Linear:
    return nnx.Linear(
        n_in, n_out, use_bias=bias, dtype=dtype, param_dtype=jnp.float32, kernel_init=_INIT, rngs=rngs, dot_general=cpu_matmul.dot_general
    )


def _norm(cfg: DebertaV2Config, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(cfg.hidden_size, epsilon=cfg.layer_norm_eps, dtype=jnp.float32, param_dtype=jnp.float32, rngs=rngs)


def log_bucket_position(relative: np.ndarray, bucket_size: int, max_position: int) -> np.ndarray:
    """DeBERTa's log-bucketed relative positions: exact within +-bucket_size/2, logarithmic beyond."""
    sign = np.sign(relative)
    mid = bucket_size // 2
    abs_pos = np.where((relative < mid) & (relative > -mid), mid - 1, np.abs(relative)).astype(np.float64)
    log_pos = np.ceil(np.log(abs_pos / mid) / np.log((max_position - 1) / mid) * (mid - 1)) + mid
    return np.where(abs_pos <= mid, relative, log_pos * sign).astype(np.int32)


def relative_columns(seq: int, cfg: DebertaV2Config) -> np.ndarray:
    """[2 S - 1]: the relative-embedding row of each distance i - j = c - (S - 1), c = 0 .. 2 S - 2:
    clamp(bucket(i - j) + span, 0, 2 span - 1)."""
    rel = np.arange(-(seq - 1), seq)
    if cfg.position_buckets > 0:
        rel = log_bucket_position(rel, cfg.position_buckets, cfg.max_relative)
    span = cfg.relative_span
    return np.clip(rel + span, 0, 2 * span - 1).astype(np.int32)


def reached_rows(table: jax.Array, columns: np.ndarray) -> tuple[jax.Array, np.ndarray]:
    """The rows of the [2 span, H] relative-embedding table that ``columns`` (:func:`relative_columns`)
    reaches, and the columns into them. Every layer projects these rows to position keys and queries:
    at S positions the distances reach 2 S - 1 rows, not 2 span (a third of DeBERTa-v3's 512 at 88
    tokens, the realistic median), and each row's projection is the same either way. The rows form
    one slice: a bucket grows by at most one per unit of distance."""
    low, high = int(columns.min()), int(columns.max())
    return table[low : high + 1], columns - low


QUERY_BLOCK = 32
"""Rows per block of the banded position scores (:func:`band_rows`); 0: one block of all rows."""


def query_block(seq: int) -> int:
    """The rows per block of the banded position scores for ``seq`` positions: the largest power of
    two up to :data:`QUERY_BLOCK` that divides ``seq`` and is smaller, else ``seq`` (one block)."""
    block = QUERY_BLOCK
    while block >= 2 and (seq % block or block >= seq):
        block //= 2
    return block if block >= 2 else seq


def band_rows(columns: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """The relative-embedding rows each block of ``block`` positions needs, [S / block, S + block - 1]
    each, from ``columns`` = :func:`relative_columns` (row of distance ``c - (S - 1)`` at ``c``):

    - c2p, query block g (queries i = g T + a): column c holds distance g T + T - 1 - c, so that
      :func:`skew` puts distance i - j at key j;
    - p2c, key block g (keys j = g T + a): column c holds distance c - (T - 1) - g T, so that
      :func:`skew` puts distance i - j at query i.

    A block sees only the S + T - 1 distances its rows reach, not all 2 S - 1: with T = 32 and
    S = 512 the scores before the skew are 0.53x as large, and so is the matmul that makes them."""
    seq = (len(columns) + 1) // 2
    start = np.arange(seq // block)[:, None] * block
    c = np.arange(seq + block - 1)[None, :]
    return columns[start + block + seq - 2 - c], columns[seq - block - start + c]


def accelerator_layout() -> bool:
    """Whether the position scores take the layout measured faster on a GPU (one H200, 2026-11-26:
    1.156x the DeBERTa-v3-base training step, docs/benchmarks.md): :func:`block_rows_sliced` and
    :func:`block_product_queries_first`. A TPU takes it too (not measured there), and so does the CPU
    for a forward pass only (:func:`~omnidistill.models.layers.predicting`: scoring, evaluation),
    where it made DeBERTa-v3-base's encoder 1.05-1.13x faster over the Scorer's batches of realistic
    lengths (2-core Xeon VM, 2026-11-27). A CPU training step keeps :func:`block_rows_gathered` and
    :func:`block_product_einsum`: there the GPU's layout was up to 1.15x slower at 512 tokens. Both
    layouts give the same scores and gradients."""
    return jax.default_backend() != "cpu" or is_predicting()


def block_rows_gathered(table: jax.Array, columns: np.ndarray, block: int, c2p: bool) -> jax.Array:
    """[2 span, N, D] -> [S / T, S + T - 1, N, D]: the relative-embedding rows of each block's distances,
    c2p's or p2c's (:func:`band_rows`), gathered per block; the backward pass scatters S / T ·
    (S + T - 1) rows into the table."""
    c2p_rows, p2c_rows = band_rows(columns, block)
    return table[c2p_rows if c2p else p2c_rows]


def block_rows_sliced(table: jax.Array, columns: np.ndarray, block: int, c2p: bool) -> jax.Array:
    """:func:`block_rows_gathered` as static slices of one gather of the 2 S - 1 distances' rows
    (reversed for c2p): block g's rows are ``rows[S - T - g T : 2 S - 1 - g T]``, so the backward pass
    scatters 2 S - 1 rows and sums the slices' padded gradients."""
    rows = table[columns][::-1] if c2p else table[columns]
    seq = (rows.shape[0] + 1) // 2
    return jnp.stack([rows[start : start + seq + block - 1] for start in range(seq - block, -1, -block)])


def block_rows(table: jax.Array, columns: np.ndarray, block: int, c2p: bool) -> jax.Array:
    """Each block's relative-embedding rows, [S / T, S + T - 1, N, D], in this backend's layout
    (:func:`accelerator_layout`)."""
    return (block_rows_sliced if accelerator_layout() else block_rows_gathered)(table, columns, block, c2p)


def block_product_einsum(x: jax.Array, rows: jax.Array, block: int) -> jax.Array:
    """[B, S, N, D] x [S / T, S + T - 1, N, D] -> [B, N, S / T, T, S + T - 1]: each block of ``block``
    positions against its rows, as one ``jnp.einsum`` (whose product comes out with the distances
    first and is transposed)."""
    b, s = x.shape[:2]
    return jnp.einsum("bgqnd,grnd->bngqr", x.reshape(b, s // block, block, *x.shape[2:]), rows)


def block_product_queries_first(x: jax.Array, rows: jax.Array, block: int) -> jax.Array:
    """:func:`block_product_einsum` from a product laid out [N, S / T, B, T, S + T - 1], the block's
    positions before the distances, so that moving B to the front keeps each [T, S + T - 1] tile
    whole."""
    b, s = x.shape[:2]
    blocks = x.reshape(b, s // block, block, *x.shape[2:])
    return jnp.transpose(jax.lax.dot_general(blocks, rows, (((4,), (3,)), ((3, 1), (2, 0)))), (2, 0, 1, 3, 4))


def block_product(x: jax.Array, rows: jax.Array, block: int) -> jax.Array:
    """Each block of positions against its rows, [B, N, S / T, T, S + T - 1], in this backend's layout
    (:func:`accelerator_layout`)."""
    return (block_product_queries_first if accelerator_layout() else block_product_einsum)(x, rows, block)


def skew(scores: jax.Array) -> jax.Array:
    """[..., T, S + T - 1] -> [..., T, S] with out[a, b] = scores[a, T - 1 - a + b]: each row shifted
    by its own offset, as a reshape and a slice (the flat index of out[a, b] is a (S + T - 2) + T - 1
    + b), so that neither direction of the pass gathers or scatters."""
    t, width = scores.shape[-2:]
    if t == 1:
        return scores
    lead = scores.shape[:-2]
    flat = scores.reshape(*lead, t * width)[..., t - 1 : t - 1 + t * (width - 1)]
    return flat.reshape(*lead, t, width - 1)[..., : width - t + 1]


class DebertaEmbeddings(nnx.Module):
    def __init__(self, cfg: DebertaV2Config, dtype, rngs: nnx.Rngs):
        self.cfg = cfg
        width = cfg.embedding_size or cfg.hidden_size
        embed = lambda n: nnx.Embed(n, width, param_dtype=jnp.float32, embedding_init=_INIT, rngs=rngs)
        self.word_embeddings = embed(cfg.vocab_size)
        self.position_embeddings = embed(cfg.max_position_embeddings) if cfg.position_biased_input else None
        self.token_type_embeddings = embed(cfg.type_vocab_size) if cfg.type_vocab_size > 0 else None
        self.embed_proj = _dense(width, cfg.hidden_size, jnp.float32, rngs, bias=False) if cfg.embedding_size else None
        self.layer_norm = _norm(cfg, rngs)
        self.dtype = dtype

    def __call__(self, input_ids, token_type_ids, attention_mask, positions, rng):
        x = embedding_lookup(self.word_embeddings, input_ids, self.cfg.pad_token_id)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(positions)
        if self.token_type_embeddings is not None:
            x = x + self.token_type_embeddings(token_type_ids)
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        x = self.layer_norm(x) * attention_mask[..., None].astype(jnp.float32)
        return dropout(x, self.cfg.hidden_dropout_prob, rng).astype(self.dtype)


class DisentangledAttention(nnx.Module):
    def __init__(self, cfg: DebertaV2Config, dtype, attention_impl: AttentionKernel, rngs: nnx.Rngs):
        h = cfg.hidden_size
        self.cfg = cfg
        self.query_proj = _dense(h, h, dtype, rngs)
        self.key_proj = _dense(h, h, dtype, rngs)
        self.value_proj = _dense(h, h, dtype, rngs)
        separate = cfg.relative_attention and not cfg.share_att_key
        self.pos_key_proj = _dense(h, h, dtype, rngs) if separate and "c2p" in cfg.pos_att_type else None
        self.pos_query_proj = _dense(h, h, dtype, rngs) if separate and "p2c" in cfg.pos_att_type else None
        self.output = _dense(h, h, dtype, rngs)
        self.output_norm = _norm(cfg, rngs)
        self.attention_impl = attention_impl
        # 1 + the number of position terms the config names, with or without relative attention: Hugging
        # Face's DisentangledSelfAttention counts pos_att_type alone, so its scale is sqrt(3 d) for a config
        # with relative_attention false and both terms listed, though neither term is computed
        self.scale_factor = 1 + len(cfg.pos_att_type)

    def _heads(self, x: jax.Array) -> jax.Array:
        return x.reshape(*x.shape[:-1], self.cfg.num_attention_heads, self.cfg.head_dim)

    def position_keys(self, rel_emb) -> tuple[jax.Array | None, jax.Array | None]:
        """Relative-position keys (for c2p) and queries (for p2c), [2 span, N, D] each, or None."""
        pk = pq = None
        if "c2p" in self.cfg.pos_att_type:
            pk = self._heads((self.key_proj if self.cfg.share_att_key else self.pos_key_proj)(rel_emb))
        if "p2c" in self.cfg.pos_att_type:
            pq = self._heads((self.query_proj if self.cfg.share_att_key else self.pos_query_proj)(rel_emb))
        return pk, pq

    @staticmethod
    def position_bias(q, k, pk, pq, columns) -> jax.Array:
        """c2p + p2c scores [B, N, S, S] (unscaled): c2p[i, j] = q_i . pk[row(i - j)] and
        p2c[i, j] = k_j . pq[row(i - j)], ``columns`` = :func:`relative_columns`.

        Each term is one matmul per block of :func:`query_block` positions against the rows of the
        distances that block reaches (:func:`block_rows`, :func:`block_product`), then :func:`skew`.
        Hugging Face gathers from a [B, N, S, 2 span] product instead, and the backward pass of that gather is a
        scatter-add over the whole [B, N, S, S] array, which dominated the step; one block of all S
        rows (2 S - 1 distances) made scores twice as wide as the output."""
        s = q.shape[1]
        t = query_block(s)
        square = lambda x: x.reshape(*x.shape[:2], s, s)  # [B, N, S / T, T, S] -> [B, N, S, S]
        bias = 0.0
        if pk is not None:
            bias = bias + square(skew(block_product(q, block_rows(pk, columns, t, c2p=True), t)))
        if pq is not None:  # rows are keys here; then transposed
            bias = bias + jnp.swapaxes(square(skew(block_product(k, block_rows(pq, columns, t, c2p=False), t))), -1, -2)
        return bias

    def __call__(self, x, mask, rel_emb, columns, rng, rows: int | None = None):
        """[B, S, H] -> [B, S, H], or [B, rows, H]: the first ``rows`` positions only (all keys; the
        relative-position scores of those rows, computed as for every row)."""
        queries = x if rows is None else x[:, :rows]
        q, k, v = self._heads(self.query_proj(x)), self._heads(self.key_proj(x)), self._heads(self.value_proj(x))
        layout, mask = mask.layout, mask.padded()  # unpadded projections: the position scores need the padded rows
        if layout is not None:
            q, k, v = layout.pad(q), layout.pad(k), layout.pad(v)
        scale = 1.0 / math.sqrt(self.cfg.head_dim * self.scale_factor)
        kernel = self.attention_impl
        if not (self.cfg.relative_attention and self.cfg.pos_att_type):
            ctx = attention(q[:, : queries.shape[1]], k, v, mask, kernel, scale=scale)
        else:

            def biased_attention(q, k, v, pk, pq):
                bias = (self.position_bias(q, k, pk, pq, columns) * scale).astype(q.dtype)[:, :, : queries.shape[1]]
                kept = dataclasses.replace(kernel, recompute_scores=False)
                return attention(q[:, : queries.shape[1]], k, v, mask, kept, bias=bias, scale=scale)

            if kernel.recompute_scores:  # the [B, N, S, S] position scores are recomputed too
                biased_attention = jax.checkpoint(biased_attention)
            ctx = biased_attention(q, k, v, *self.position_keys(rel_emb))
        ctx = unpad(layout, ctx).reshape(queries.shape)
        out = dropout(self.output(ctx), self.cfg.hidden_dropout_prob, rng)
        return self.output_norm(out.astype(jnp.float32) + queries.astype(jnp.float32)).astype(x.dtype)


class DebertaLayer(nnx.Module):
    def __init__(self, cfg: DebertaV2Config, dtype, attention_impl: AttentionKernel, rngs: nnx.Rngs):
        self.cfg = cfg
        self.attention = DisentangledAttention(cfg, dtype, attention_impl, rngs)
        self.intermediate = _dense(cfg.hidden_size, cfg.intermediate_size, dtype, rngs)
        self.output = _dense(cfg.intermediate_size, cfg.hidden_size, dtype, rngs)
        self.output_norm = _norm(cfg, rngs)
        self.act = activation(cfg.hidden_act)

    def __call__(self, x, mask, rel_emb, columns, rng, rows: int | None = None):
        x = self.attention(x, mask, rel_emb, columns, sub_rng(rng, 0), rows)
        y = dropout(self.output(self.act(self.intermediate(x))), self.cfg.hidden_dropout_prob, sub_rng(rng, 1))
        return self.output_norm(y.astype(jnp.float32) + x.astype(jnp.float32)).astype(x.dtype)


class DebertaV2Encoder(nnx.Module):
    """DeBERTa-v2/v3 backbone: token ids -> hidden states of every layer."""

    takes_first_rows = True
    """``first_rows`` is honoured (:func:`~omnidistill.models.layers.last_rows_call`)."""
    takes_token_index = True
    """``token_index`` is honoured: projections and MLP run unpadded, the disentangled attention on the
    padded rows (:mod:`~omnidistill.models.unpadding`)."""

    def __init__(
        self,
        cfg: DebertaV2Config,
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
        self.embeddings = DebertaEmbeddings(cfg, dtype, rngs)
        self.layers = layer_stack([DebertaLayer(cfg, dtype, kernel, rngs) for _ in range(cfg.num_hidden_layers)], scan=scan)
        rel = cfg.relative_attention
        self.rel_embeddings = (
            nnx.Embed(2 * cfg.relative_span, cfg.hidden_size, param_dtype=jnp.float32, embedding_init=_INIT, rngs=rngs) if rel else None
        )
        # Hugging Face builds this norm whenever norm_rel_ebd asks for it; without relative attention it holds
        # weights that nothing reads, kept so that such a checkpoint loads and exports as it is
        self.rel_norm = _norm(cfg, rngs) if cfg.norm_rel_ebd == "layer_norm" else None
        self.dtype = dtype

    def __call__(
        self,
        input_ids,
        attention_mask,
        token_type_ids=None,
        *,
        segment_ids=None,
        rng=None,
        return_all_layers=False,
        first_rows=None,
        token_index=None,
    ):
        """Last hidden state [B, S, H] (or every layer's; ``first_rows``: [B, first_rows, H], see
        :func:`~omnidistill.models.layers.last_rows_call`). With ``segment_ids`` (packed rows), attention
        stays within a segment; relative positions need no change, since i - j is the same within a
        segment wherever it starts. ``token_index`` [G, t]: the layers' per-token work runs on the real
        tokens only (:class:`TokenLayout`), outputs padded."""
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        seq = input_ids.shape[1]
        if self.cfg.max_sequence_length is not None and seq > self.cfg.max_sequence_length:
            raise ValueError(f"sequence length {seq} exceeds max_position_embeddings={self.cfg.max_position_embeddings}")
        mask = encoder_mask(attention_mask, segment_ids)
        layout = None if token_index is None else TokenLayout.of(attention_mask, token_index)
        inner = mask.unpadded(layout)
        x = self.embeddings(input_ids, token_type_ids, attention_mask, token_positions(input_ids, segment_ids), sub_rng(rng, 10_000))
        rel_emb, columns = None, None
        if self.rel_embeddings is not None:
            rel_emb = self.rel_embeddings.embedding[...]
            if self.rel_norm is not None:
                rel_emb = self.rel_norm(rel_emb)
            rel_emb = dropout(rel_emb, self.cfg.hidden_dropout_prob, sub_rng(rng, 10_001)).astype(self.dtype)
            rel_emb, columns = reached_rows(rel_emb, relative_columns(seq, self.cfg))
        embedded = x
        x, states = run_layers(
            self.layers,
            x,
            lambda layer, h, i: call_layer(layer, self.remat, h, inner, rel_emb, columns, sub_rng(rng, i)),
            collect=return_all_layers,
            last_call=last_rows_call(first_rows, lambda layer, h, i, rows: layer(h, mask, rel_emb, columns, sub_rng(rng, i), rows)),
            layout=layout,
        )
        return [embedded, *states] if return_all_layers else x[:, :first_rows]


class DebertaV2Pooler(nnx.Module):
    """``ContextPooler`` of ``DebertaV2ForSequenceClassification``: act(dense(dropout(h[CLS])))."""

    def __init__(self, cfg: DebertaV2Config, *, dtype=jnp.float32, rngs: nnx.Rngs):
        self.dense = _dense(cfg.hidden_size, cfg.hidden_size, dtype, rngs)
        self.act = activation(cfg.pooler_hidden_act)
        self.dropout_rate = cfg.pooler_dropout

    @property
    def features(self) -> int:
        return self.dense.out_features

    def __call__(self, cls_state: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        return self.act(self.dense(dropout(cls_state, self.dropout_rate, rng)))
