"""Weight table: Hugging Face ``DebertaV2ForSequenceClassification`` keys <-> Flax regressor paths."""

from __future__ import annotations

from omnidistill.models.deberta_v2.config import DebertaV2Config
from omnidistill.models.weights import WeightEntry, embedding, layer_norm, linear

HF_CLASS = "DebertaV2ForSequenceClassification"
# Pre-training heads (replaced-token detection / masked LM) and buffers the regressor does not use.
IGNORABLE_PREFIXES = ("lm_predictions.", "mask_predictions.", "cls.", "deberta.embeddings.position_ids", "embeddings.position_ids")
SHARDING_RULES = (
    (r"attention/(query|key|value)_proj/kernel$", ("fsdp", "tensor")),
    (r"attention/(query|key|value)_proj/bias$", ("tensor",)),
    (r"attention/output/kernel$", ("tensor", "fsdp")),
    (r"layers/\d+/intermediate/kernel$", ("fsdp", "tensor")),
    (r"layers/\d+/output/kernel$", ("tensor", "fsdp")),
    (r"word_embeddings/embedding$", ("tensor", "fsdp")),
)


def weight_table(cfg: DebertaV2Config) -> list[WeightEntry]:
    enc, emb = ("encoder",), ("encoder", "embeddings")
    table = [embedding("deberta.embeddings.word_embeddings.weight", (*emb, "word_embeddings"))]
    if cfg.position_biased_input:
        table.append(embedding("deberta.embeddings.position_embeddings.weight", (*emb, "position_embeddings")))
    if cfg.type_vocab_size > 0:
        table.append(embedding("deberta.embeddings.token_type_embeddings.weight", (*emb, "token_type_embeddings")))
    if cfg.embedding_size:
        table.append(WeightEntry("deberta.embeddings.embed_proj.weight", (*emb, "embed_proj", "kernel"), "linear"))
    table += layer_norm("deberta.embeddings.LayerNorm", (*emb, "layer_norm"))
    for i in range(cfg.num_hidden_layers):
        hf, fx = f"deberta.encoder.layer.{i}", (*enc, "layers", i)
        att = (*fx, "attention")
        table += [
            *linear(f"{hf}.attention.self.query_proj", (*att, "query_proj")),
            *linear(f"{hf}.attention.self.key_proj", (*att, "key_proj")),
            *linear(f"{hf}.attention.self.value_proj", (*att, "value_proj")),
        ]
        if cfg.relative_attention and not cfg.share_att_key:
            if "c2p" in cfg.pos_att_type:
                table += linear(f"{hf}.attention.self.pos_key_proj", (*att, "pos_key_proj"))
            if "p2c" in cfg.pos_att_type:
                table += linear(f"{hf}.attention.self.pos_query_proj", (*att, "pos_query_proj"))
        table += [
            *linear(f"{hf}.attention.output.dense", (*att, "output")),
            *layer_norm(f"{hf}.attention.output.LayerNorm", (*att, "output_norm")),
            *linear(f"{hf}.intermediate.dense", (*fx, "intermediate")),
            *linear(f"{hf}.output.dense", (*fx, "output")),
            *layer_norm(f"{hf}.output.LayerNorm", (*fx, "output_norm")),
        ]
    if cfg.relative_attention:
        table.append(embedding("deberta.encoder.rel_embeddings.weight", (*enc, "rel_embeddings")))
    if cfg.norm_rel_ebd == "layer_norm":  # built by transformers with or without relative attention (read only with it)
        table += layer_norm("deberta.encoder.LayerNorm", (*enc, "rel_norm"))
    table += linear("pooler.dense", ("pooler", "dense"), group="pooler")
    table += linear("classifier", ("head", "linear"), group="classifier")
    return table
