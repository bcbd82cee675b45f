"""Weight table: Hugging Face ``ModernBertForSequenceClassification`` keys <-> Flax regressor paths."""

from __future__ import annotations

from omnidistill.models.modernbert.config import ModernBertConfig
from omnidistill.models.weights import WeightEntry, embedding, layer_norm, linear

HF_CLASS = "ModernBertForSequenceClassification"
# The masked-LM decoder of pre-training checkpoints (Ettin, mmBERT, ModernBERT) is not used.
IGNORABLE_PREFIXES = ("decoder.",)
SHARDING_RULES = (
    (r"attn/Wqkv/kernel$", ("fsdp", "tensor")),
    (r"attn/Wo/kernel$", ("tensor", "fsdp")),
    (r"mlp/Wi/kernel$", ("fsdp", "tensor")),
    (r"mlp/Wo/kernel$", ("tensor", "fsdp")),
    (r"tok_embeddings/embedding$", ("tensor", "fsdp")),
)


def _linear(hf: str, path: tuple, bias: bool, group: str = "encoder") -> list[WeightEntry]:
    entries = linear(hf, path, group)
    return entries if bias else entries[:1]


def weight_table(cfg: ModernBertConfig) -> list[WeightEntry]:
    enc = ("encoder",)
    nb = cfg.norm_bias
    table = [
        embedding("model.embeddings.tok_embeddings.weight", (*enc, "tok_embeddings")),
        *layer_norm("model.embeddings.norm", (*enc, "embedding_norm"), bias=nb),
    ]
    for i in range(cfg.num_hidden_layers):
        hf, fx = f"model.layers.{i}", (*enc, "layers", i)
        if i > 0:
            table += layer_norm(f"{hf}.attn_norm", (*fx, "attn_norm"), bias=nb)
        table += [
            *_linear(f"{hf}.attn.Wqkv", (*fx, "attn", "Wqkv"), cfg.attention_bias),
            *_linear(f"{hf}.attn.Wo", (*fx, "attn", "Wo"), cfg.attention_bias),
            *layer_norm(f"{hf}.mlp_norm", (*fx, "mlp_norm"), bias=nb),
            *_linear(f"{hf}.mlp.Wi", (*fx, "mlp", "Wi"), cfg.mlp_bias),
            *_linear(f"{hf}.mlp.Wo", (*fx, "mlp", "Wo"), cfg.mlp_bias),
        ]
    table += layer_norm("model.final_norm", (*enc, "final_norm"), bias=nb)
    table += _linear("head.dense", ("pooler", "dense"), cfg.classifier_bias, group="pooler")
    table += layer_norm("head.norm", ("pooler", "norm"), group="pooler", bias=nb)
    table += linear("classifier", ("head", "linear"), group="classifier")
    return table
