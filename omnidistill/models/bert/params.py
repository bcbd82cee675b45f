"""Weight table: Hugging Face ``BertForSequenceClassification`` keys <-> Flax regressor paths."""

from __future__ import annotations

from omnidistill.models.bert.config import BertConfig
from omnidistill.models.weights import WeightEntry, embedding, layer_norm, linear

HF_CLASS = "BertForSequenceClassification"
# Tensors of pre-training checkpoints that the regressor does not use.
IGNORABLE_PREFIXES = ("cls.", "bert.embeddings.position_ids", "embeddings.position_ids")

# Megatron-style tensor parallelism: column-parallel in-projections, row-parallel out-projections.
SHARDING_RULES = (
    (r"attention/(query|key|value)/kernel$", ("fsdp", "tensor")),
    (r"attention/(query|key|value)/bias$", ("tensor",)),
    (r"attention/output/kernel$", ("tensor", "fsdp")),
    (r"layers/\d+/intermediate/kernel$", ("fsdp", "tensor")),
    (r"layers/\d+/intermediate/bias$", ("tensor",)),
    (r"layers/\d+/output/kernel$", ("tensor", "fsdp")),
    (r"word_embeddings/embedding$", ("tensor", "fsdp")),
)


def weight_table(
    cfg: BertConfig, *, base: str = "bert", pooler_key: str = "bert.pooler.dense", classifier_key: str = "classifier"
) -> list[WeightEntry]:
    """Every tensor of the encoder (under ``base``), pooler and the four-output classifier."""
    enc = ("encoder",)
    table = [
        embedding(f"{base}.embeddings.word_embeddings.weight", (*enc, "embeddings", "word_embeddings")),
        embedding(f"{base}.embeddings.position_embeddings.weight", (*enc, "embeddings", "position_embeddings")),
        embedding(f"{base}.embeddings.token_type_embeddings.weight", (*enc, "embeddings", "token_type_embeddings")),
        *layer_norm(f"{base}.embeddings.LayerNorm", (*enc, "embeddings", "layer_norm")),
    ]
    for i in range(cfg.num_hidden_layers):
        hf = f"{base}.encoder.layer.{i}"
        fx = (*enc, "layers", i)
        table += [
            *linear(f"{hf}.attention.self.query", (*fx, "attention", "query")),
            *linear(f"{hf}.attention.self.key", (*fx, "attention", "key")),
            *linear(f"{hf}.attention.self.value", (*fx, "attention", "value")),
            *linear(f"{hf}.attention.output.dense", (*fx, "attention", "output")),
            *layer_norm(f"{hf}.attention.output.LayerNorm", (*fx, "attention", "output_norm")),
            *linear(f"{hf}.intermediate.dense", (*fx, "intermediate")),
            *linear(f"{hf}.output.dense", (*fx, "output")),
            *layer_norm(f"{hf}.output.LayerNorm", (*fx, "output_norm")),
        ]
    table += linear(pooler_key, ("pooler", "dense"), group="pooler")
    table += linear(classifier_key, ("head", "linear"), group="classifier")
    return table


def pooler_extras(cfg: BertConfig) -> dict[str, tuple[int, ...]]:
    """Tensors ``AutoModel`` builds for the backbone (its pooler) that no omnidistill head uses."""
    return {"pooler.dense.weight": (cfg.hidden_size, cfg.hidden_size), "pooler.dense.bias": (cfg.hidden_size,)}
