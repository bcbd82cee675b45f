"""DeBERTa-v2/v3 configuration (deberta-v3-base/large, mdeberta-v3-base)."""

from __future__ import annotations

import dataclasses
from typing import Any

from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.layers import ACTIVATIONS


@dataclasses.dataclass(frozen=True)
class DebertaV2Config:
    vocab_size: int = 128100
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 0
    layer_norm_eps: float = 1e-7
    relative_attention: bool = True
    max_relative_positions: int = -1
    position_buckets: int = 256
    pos_att_type: tuple[str, ...] = ("p2c", "c2p")
    share_att_key: bool = True
    norm_rel_ebd: str = "layer_norm"
    position_biased_input: bool = False
    embedding_size: int | None = None
    pooler_hidden_act: str = "gelu"
    pooler_dropout: float = 0.0
    pad_token_id: int | None = 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def relative_span(self) -> int:
        """Half the number of relative-position embeddings (``att_span`` in Hugging Face)."""
        if self.position_buckets > 0:
            return self.position_buckets
        return self.max_relative_positions if self.max_relative_positions > 0 else self.max_position_embeddings

    @property
    def max_sequence_length(self) -> int | None:
        """The longest input: the absolute position table's size where there is one (no relative
        attention, or ``position_biased_input``); None with relative positions alone."""
        return self.max_position_embeddings if self.position_biased_input or not self.relative_attention else None

    @property
    def max_relative(self) -> int:
        return self.max_relative_positions if self.max_relative_positions > 0 else self.max_position_embeddings

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> DebertaV2Config:
        """From a Hugging Face ``DebertaV2Config`` dict; options the port lacks are rejected by name."""
        if hf.get("model_type", "deberta-v2") != "deberta-v2":
            raise UnsupportedConfigError(f"model_type={hf.get('model_type')!r} is not supported by the deberta_v2 port")
        if hf.get("conv_kernel_size", 0) > 0:
            raise UnsupportedConfigError(f"conv_kernel_size={hf['conv_kernel_size']} (the DeBERTa-v2 convolution layer) is not supported")
        if hf.get("z_steps", 0) > 1:
            raise UnsupportedConfigError(f"z_steps={hf['z_steps']} is not supported")
        head_dim = hf["hidden_size"] // hf["num_attention_heads"]
        if hf["hidden_size"] % hf["num_attention_heads"] or hf.get("attention_head_size", head_dim) != head_dim:
            raise UnsupportedConfigError("attention_head_size must equal hidden_size / num_attention_heads")
        pooler_size = hf.get("pooler_hidden_size", hf["hidden_size"])
        if pooler_size != hf["hidden_size"]:
            raise UnsupportedConfigError(f"pooler_hidden_size={pooler_size} must equal hidden_size")
        pos = hf.get("pos_att_type") or []
        pos = tuple(p.strip() for p in pos.lower().split("|")) if isinstance(pos, str) else tuple(pos)
        pos = tuple(dict.fromkeys(pos))  # transformers asks whether each term is listed: a repeat counts once
        if set(pos) - {"c2p", "p2c"}:
            raise UnsupportedConfigError(f"pos_att_type={list(pos)} is not supported (only c2p and p2c)")
        for key in ("hidden_act", "pooler_hidden_act"):
            if hf.get(key, "gelu") not in ACTIVATIONS:
                raise UnsupportedConfigError(f"{key}={hf.get(key)!r} is not supported")
        norm_rel = {x.strip() for x in str(hf.get("norm_rel_ebd", "none")).lower().split("|")}
        if norm_rel - {"layer_norm", "none", ""}:
            raise UnsupportedConfigError(f"norm_rel_ebd={hf.get('norm_rel_ebd')!r} is not supported")
        emb = hf.get("embedding_size")
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            num_hidden_layers=hf["num_hidden_layers"],
            num_attention_heads=hf["num_attention_heads"],
            intermediate_size=hf["intermediate_size"],
            hidden_act=hf.get("hidden_act", "gelu"),
            hidden_dropout_prob=hf.get("hidden_dropout_prob", 0.1),
            attention_probs_dropout_prob=hf.get("attention_probs_dropout_prob", 0.1),
            max_position_embeddings=hf.get("max_position_embeddings", 512),
            type_vocab_size=hf.get("type_vocab_size", 0),
            layer_norm_eps=hf.get("layer_norm_eps", 1e-7),
            relative_attention=hf.get("relative_attention", False),
            max_relative_positions=hf.get("max_relative_positions", -1),
            position_buckets=hf.get("position_buckets", -1),
            pos_att_type=pos,
            share_att_key=hf.get("share_att_key", False),
            norm_rel_ebd="layer_norm" if "layer_norm" in norm_rel else "none",
            position_biased_input=hf.get("position_biased_input", True),
            embedding_size=None if emb in (None, hf["hidden_size"]) else emb,
            pooler_hidden_act=hf.get("pooler_hidden_act", "gelu"),
            pooler_dropout=hf.get("pooler_dropout", 0.0),
            pad_token_id=hf.get("pad_token_id", 0),  # None stays None: transformers then gives the embedding no padding_idx
        )

    def to_hf(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["pos_att_type"] = list(self.pos_att_type)
        out["embedding_size"] = self.embedding_size or self.hidden_size
        out["pooler_hidden_size"] = self.hidden_size
        out["model_type"] = "deberta-v2"
        return out

    def with_dropout(self, rate: float) -> DebertaV2Config:
        return dataclasses.replace(self, hidden_dropout_prob=rate, attention_probs_dropout_prob=rate, pooler_dropout=rate)
