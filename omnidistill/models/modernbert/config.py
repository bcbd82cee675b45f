"""ModernBERT configuration (covers ModernBERT, Ettin encoders and mmBERT)."""

from __future__ import annotations

import dataclasses
from typing import Any

from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.layers import ACTIVATIONS

GLOBAL, LOCAL = "full_attention", "sliding_attention"


@dataclasses.dataclass(frozen=True)
class ModernBertConfig:
    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    norm_eps: float = 1e-5
    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    local_attention: int = 128
    layer_types: tuple[str, ...] = ()
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    embedding_dropout: float = 0.0
    attention_dropout: float = 0.0
    mlp_dropout: float = 0.0
    classifier_dropout: float = 0.0
    pad_token_id: int | None = 50283
    bos_token_id: int | None = 50281
    eos_token_id: int | None = 50282
    cls_token_id: int | None = 50281
    sep_token_id: int | None = 50282

    @property
    def max_sequence_length(self) -> int:
        """The longest input (RoPE has no table; the model refuses rows beyond this)."""
        return self.max_position_embeddings

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def hidden_dropout_prob(self) -> float:
        """The largest of the rates the port applies (embeddings, attention output, MLP, classifier)."""
        return max(self.embedding_dropout, self.attention_dropout, self.mlp_dropout, self.classifier_dropout)

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> ModernBertConfig:
        """From a Hugging Face ModernBERT config dict (old ``global_attn_every_n_layers`` or v5 ``layer_types``)."""
        if hf.get("model_type", "modernbert") != "modernbert":
            raise UnsupportedConfigError(f"model_type={hf.get('model_type')!r} is not supported by the modernbert port")
        for key in ("hidden_activation", "classifier_activation"):
            if hf.get(key, "gelu") not in ACTIVATIONS:
                raise UnsupportedConfigError(f"{key}={hf.get(key)!r} is not supported")
        if hf["hidden_size"] % hf["num_attention_heads"]:
            raise UnsupportedConfigError("hidden_size must be divisible by num_attention_heads")
        if hf.get("rope_scaling"):
            raise UnsupportedConfigError(f"rope_scaling={hf['rope_scaling']!r} is not supported (plain RoPE only)")
        n = hf.get("num_hidden_layers", 22)
        layer_types = hf.get("layer_types")
        if not layer_types:  # the older pattern, looked up only here: every n-th layer is global
            every = hf.get("global_attn_every_n_layers", 3)
            layer_types = [LOCAL if i % every else GLOBAL for i in range(n)]
        layer_types = tuple(layer_types)
        if len(layer_types) != n or set(layer_types) - {GLOBAL, LOCAL}:
            raise UnsupportedConfigError(f"layer_types={list(layer_types)!r} must list {GLOBAL!r}/{LOCAL!r} for each of {n} layers")
        rope = hf.get("rope_parameters") or {}
        for kind, params in rope.items():
            if params is not None and params.get("rope_type", "default") != "default":
                raise UnsupportedConfigError(f"rope_parameters.{kind}.rope_type={params['rope_type']!r} is not supported")
        theta = {}
        for kind, (legacy, default) in {GLOBAL: ("global_rope_theta", 160_000.0), LOCAL: ("local_rope_theta", 10_000.0)}.items():
            params = rope.get(kind) or {}  # transformers' order: the nested value, else the older top-level field
            theta[kind] = params["rope_theta"] if "rope_theta" in params else hf.get(legacy, default)
        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("layer_types", "global_rope_theta", "local_rope_theta")]
        kept = {k: hf[k] for k in names if k in hf and (hf[k] is not None or k.endswith("token_id"))}  # looked up by name
        return cls(**kept, layer_types=layer_types, global_rope_theta=float(theta[GLOBAL]), local_rope_theta=float(theta[LOCAL]))

    def to_hf(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["layer_types"] = list(self.layer_types)
        out["rope_parameters"] = {
            GLOBAL: {"rope_type": "default", "rope_theta": out.pop("global_rope_theta")},
            LOCAL: {"rope_type": "default", "rope_theta": out.pop("local_rope_theta")},
        }
        out["classifier_pooling"] = "cls"
        out["model_type"] = "modernbert"
        return out

    def with_dropout(self, rate: float) -> ModernBertConfig:
        return dataclasses.replace(self, embedding_dropout=rate, attention_dropout=rate, mlp_dropout=rate, classifier_dropout=rate)


def check_head_config(hf: dict[str, Any]) -> None:
    """The port's classification head pools [CLS] (``ModernBertPooler``: dense, activation, norm). A
    checkpoint trained with ``classifier_pooling='mean'`` would score differently through it, so its
    head is refused by name (a backbone's ``classifier_pooling`` does not matter: its head is new)."""
    pooling = hf.get("classifier_pooling") or "cls"
    if pooling != "cls":
        raise UnsupportedConfigError(
            f"classifier_pooling={pooling!r} is not supported for an imported classification head (the port pools [CLS]); "
            "import the backbone without its head, or use a checkpoint trained with classifier_pooling='cls'"
        )
