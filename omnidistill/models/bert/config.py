"""BERT configuration mirroring the fields of Hugging Face ``BertConfig`` that the port implements."""

from __future__ import annotations

import dataclasses
from typing import Any

from omnidistill.models.layers import ACTIVATIONS


class UnsupportedConfigError(ValueError):
    """A Hugging Face config asks for something the Flax port does not implement."""


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Architecture of a BERT / mBERT / BERT-large (mxbai) / MiniLM encoder."""

    MODEL_TYPES = ("bert",)
    """Hugging Face ``model_type`` values this config reads (subclasses add their own)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def max_sequence_length(self) -> int:
        """The longest input the position table holds."""
        return self.max_position_embeddings

    @property
    def position_padding_idx(self) -> int | None:
        """The position embedding's ``padding_idx`` in transformers: none for BERT (XLM-R's is its pad id)."""
        return None

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> BertConfig:
        """Build from a Hugging Face config dict, rejecting options the port does not implement."""
        model_type = hf.get("model_type", cls.MODEL_TYPES[0])
        if model_type not in cls.MODEL_TYPES:
            raise UnsupportedConfigError(
                f"model_type={model_type!r} is not supported by this port (only {', '.join(map(repr, cls.MODEL_TYPES))})"
            )
        pos_type = hf.get("position_embedding_type", "absolute")
        if pos_type not in (None, "absolute"):
            raise UnsupportedConfigError(f"position_embedding_type={pos_type!r} is not supported (only 'absolute')")
        for flag in ("is_decoder", "add_cross_attention"):
            if hf.get(flag):
                raise UnsupportedConfigError(f"{flag}=True is not supported (encoder only)")
        act = hf.get("hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise UnsupportedConfigError(f"hidden_act={act!r} is not supported")
        if hf["hidden_size"] % hf["num_attention_heads"]:
            raise UnsupportedConfigError("hidden_size must be divisible by num_attention_heads")
        pad = hf.get("pad_token_id", cls.pad_token_id)  # the class's default: 0, XLM-R's 1
        pad = 0 if pad is None else pad
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            num_hidden_layers=hf["num_hidden_layers"],
            num_attention_heads=hf["num_attention_heads"],
            intermediate_size=hf["intermediate_size"],
            hidden_act=act,
            hidden_dropout_prob=hf.get("hidden_dropout_prob", 0.1),
            attention_probs_dropout_prob=hf.get("attention_probs_dropout_prob", 0.1),
            max_position_embeddings=hf.get("max_position_embeddings", 512),
            type_vocab_size=hf.get("type_vocab_size", 2),
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            pad_token_id=pad,
        )

    def to_hf(self) -> dict[str, Any]:
        """Hugging Face config fields (without architectures / labels)."""
        return {
            "model_type": self.MODEL_TYPES[0],
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "hidden_dropout_prob": self.hidden_dropout_prob,
            "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "layer_norm_eps": self.layer_norm_eps,
            "pad_token_id": self.pad_token_id,
            "position_embedding_type": "absolute",
        }

    def with_dropout(self, rate: float) -> BertConfig:
        return dataclasses.replace(self, hidden_dropout_prob=rate, attention_probs_dropout_prob=rate)
