"""Weight table: Hugging Face ``Gemma3TextForSequenceClassification`` keys <-> Flax regressor paths.

The backbone lives under ``model.`` (``Gemma3TextModel``); the four outputs are the regressor's head
(``score``, bias-free in the ``transformers`` class, which scores the last non-padding token).
"""

from __future__ import annotations

from omnidistill.models.gemma3.config import Gemma3Config
from omnidistill.models.qwen3 import params as qwen3_params
from omnidistill.models.qwen3.params import projection
from omnidistill.models.weights import WeightEntry, embedding, linear

HF_CLASS = "Gemma3TextForSequenceClassification"
IGNORABLE_PREFIXES = ("lm_head.",)
SHARDING_RULES = qwen3_params.SHARDING_RULES  # the same module names: q/k/v/o and gate/up/down projections

_NORMS = (
    ("input_layernorm", "input_norm"),
    ("post_attention_layernorm", "post_attention_norm"),
    ("pre_feedforward_layernorm", "pre_feedforward_norm"),
    ("post_feedforward_layernorm", "post_feedforward_norm"),
)


def weight_table(cfg: Gemma3Config) -> list[WeightEntry]:
    """Every tensor of the backbone and the four-output head."""
    enc = ("encoder",)
    table = [embedding("model.embed_tokens.weight", (*enc, "embed_tokens"))]
    for i in range(cfg.num_hidden_layers):
        hf, fx = f"model.layers.{i}", (*enc, "layers", i)
        for hf_name, name in _NORMS:
            table.append(WeightEntry(f"{hf}.{hf_name}.weight", (*fx, name, "scale")))
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            table += projection(f"{hf}.self_attn.{name}", (*fx, "attention", name), cfg.attention_bias)
        for name in ("q_norm", "k_norm"):
            table.append(WeightEntry(f"{hf}.self_attn.{name}.weight", (*fx, "attention", name, "scale")))
        for name in ("gate_proj", "up_proj", "down_proj"):
            table += projection(f"{hf}.mlp.{name}", (*fx, name), False)
    table.append(WeightEntry("model.norm.weight", (*enc, "final_norm", "scale")))
    table += linear("score", ("head", "linear"), group="classifier")
    return table
