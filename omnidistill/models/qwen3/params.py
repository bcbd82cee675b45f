"""Weight table: Hugging Face ``Qwen3ForSequenceClassification`` (and ``Qwen2…``) keys <-> Flax regressor paths.

The backbone lives under ``model.`` (``Qwen3Model``); the four outputs are the regressor's head. The
Hugging Face class scores with a bias-free ``score`` layer, so there is no ``transformers`` export of
this head (it exports as ``omniscore``); a backbone imports its encoder.
"""

from __future__ import annotations

from omnidistill.models.qwen3.config import Qwen3Config
from omnidistill.models.weights import WeightEntry, embedding, linear

HF_CLASS = "Qwen3ForSequenceClassification"
IGNORABLE_PREFIXES = ("lm_head.",)
# Column-parallel q/k/v and MLP in-projections, row-parallel out-projections. With grouped-query
# attention the K/V projections have num_key_value_heads * head_dim columns; where the tensor axis
# does not divide a dimension, that dimension stays unsharded (parallel/mesh.py: _fit).
SHARDING_RULES = (
    (r"attention/(q_proj|k_proj|v_proj)/kernel$", ("fsdp", "tensor")),
    (r"attention/(q_proj|k_proj|v_proj)/bias$", ("tensor",)),
    (r"attention/o_proj/kernel$", ("tensor", "fsdp")),
    (r"layers/\d+/(gate_proj|up_proj)/kernel$", ("fsdp", "tensor")),
    (r"layers/\d+/down_proj/kernel$", ("tensor", "fsdp")),
    (r"embed_tokens/embedding$", ("tensor", "fsdp")),
)


def projection(hf_key: str, path: tuple, bias: bool) -> list[WeightEntry]:
    """A linear layer's kernel, and its bias when the layer has one."""
    entries = linear(hf_key, path)
    return entries if bias else entries[:1]


def weight_table(cfg: Qwen3Config) -> list[WeightEntry]:
    """Every tensor of the decoder and the four-output head."""
    enc = ("encoder",)
    table = [embedding("model.embed_tokens.weight", (*enc, "embed_tokens"))]
    for i in range(cfg.num_hidden_layers):
        hf, fx = f"model.layers.{i}", (*enc, "layers", i)
        table.append(WeightEntry(f"{hf}.input_layernorm.weight", (*fx, "input_norm", "scale")))
        for name in ("q_proj", "k_proj", "v_proj"):
            table += projection(f"{hf}.self_attn.{name}", (*fx, "attention", name), cfg.qkv_bias)
        table += projection(f"{hf}.self_attn.o_proj", (*fx, "attention", "o_proj"), cfg.output_bias)
        if cfg.qk_norm:
            table.append(WeightEntry(f"{hf}.self_attn.q_norm.weight", (*fx, "attention", "q_norm", "scale")))
            table.append(WeightEntry(f"{hf}.self_attn.k_norm.weight", (*fx, "attention", "k_norm", "scale")))
        table.append(WeightEntry(f"{hf}.post_attention_layernorm.weight", (*fx, "post_attention_norm", "scale")))
        for name in ("gate_proj", "up_proj", "down_proj"):
            table += projection(f"{hf}.mlp.{name}", (*fx, name), False)
    table.append(WeightEntry("model.norm.weight", (*enc, "final_norm", "scale")))
    table += linear("score", ("head", "linear"), group="classifier")
    return table
