"""Qwen3 configuration: the fields of Hugging Face ``Qwen3Config`` that change the forward pass.

Qwen3 (Qwen3-Embedding-0.6B is a Table 6 student, §E) is a decoder: pre-RMSNorm blocks, rotary
positions, grouped-query attention with RMSNorm on each query and key head, a SiLU-gated MLP, and
causal attention. Options the port does not implement (sliding-window layers, scaled RoPE) are
refused by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.layers import ACTIVATIONS


@dataclasses.dataclass(frozen=True)
class Qwen3Config:
    """Architecture of a Qwen3 decoder used as an embedding backbone."""

    vocab_size: int = 151936
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    attention_bias: bool = False
    pad_token_id: int | None = None

    MODEL_TYPES = ("qwen3",)

    @property
    def max_sequence_length(self) -> int:
        return self.max_position_embeddings

    @property
    def qk_norm(self) -> bool:
        """RMSNorm on each query and key head (Qwen3; Qwen2 has none)."""
        return True

    @property
    def qkv_bias(self) -> bool:
        return self.attention_bias

    @property
    def output_bias(self) -> bool:
        return self.attention_bias

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> Qwen3Config:
        """Build from a Hugging Face config dict, refusing options the port does not implement."""
        model_type = hf.get("model_type", cls.MODEL_TYPES[0])
        if model_type not in cls.MODEL_TYPES:
            raise UnsupportedConfigError(f"model_type={model_type!r} is not supported by this port (only {cls.MODEL_TYPES[0]!r})")
        if hf.get("use_sliding_window"):
            raise UnsupportedConfigError("use_sliding_window=True is not supported (every layer attends to the full causal context)")
        if hf.get("attention_dropout"):
            raise UnsupportedConfigError(f"attention_dropout={hf['attention_dropout']} is not supported (the port has no dropout)")
        layer_types = hf.get("layer_types") or []
        if any(t != "full_attention" for t in layer_types):
            raise UnsupportedConfigError(f"layer_types={sorted(set(layer_types))} is not supported (only 'full_attention')")
        rope = dict(hf.get("rope_parameters") or {})
        if hf.get("rope_scaling"):
            rope.update(hf["rope_scaling"])
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise UnsupportedConfigError(f"rope_parameters.rope_type={rope_type!r} is not supported (only 'default')")
        theta = rope["rope_theta"] if "rope_theta" in rope else hf.get("rope_theta", 10000.0)  # the nested value first, as transformers
        act = hf.get("hidden_act", "silu")
        if act not in ACTIVATIONS:
            raise UnsupportedConfigError(f"hidden_act={act!r} is not supported")
        heads = hf["num_attention_heads"]
        kv_heads = hf.get("num_key_value_heads") or heads
        if heads % kv_heads:
            raise UnsupportedConfigError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}")
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_hidden_layers=hf["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            hidden_act=act,
            max_position_embeddings=hf.get("max_position_embeddings", 32768),
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            attention_bias=bool(hf.get("attention_bias", False)),
            pad_token_id=hf.get("pad_token_id"),
        )

    def to_hf(self) -> dict[str, Any]:
        """Hugging Face config fields (without architectures / labels)."""
        return {
            "model_type": self.MODEL_TYPES[0],
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": self.hidden_act,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "attention_bias": self.attention_bias,
            "pad_token_id": self.pad_token_id,
        }

    def with_dropout(self, rate: float) -> Qwen3Config:
        """Qwen decoders train without dropout; a requested rate is refused rather than ignored."""
        if rate:
            raise UnsupportedConfigError(f"model.dropout={rate} is not supported by the {self.MODEL_TYPES[0]} port (it has no dropout)")
        return self
