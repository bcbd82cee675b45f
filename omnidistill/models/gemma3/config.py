"""Gemma 3 text configuration: the fields of Hugging Face ``Gemma3TextConfig`` that change the forward pass.

Gemma 3 is the backbone of EmbeddingGemma (Gemma-300M-Emb, a Table 6 student, §E and Table 12 of the
OmniScore paper). Its blocks are pre- and post-normed ("sandwich" RMSNorm around attention and MLP,
norm weights stored as offsets from 1), grouped-query attention with per-head q/k RMSNorm and a
query scale of ``query_pre_attn_scalar ** -0.5``, a GELU-tanh gated MLP, embeddings multiplied by
``sqrt(hidden_size)``, and layers of two kinds: ``sliding_attention`` (a local window, RoPE base
``rope_local_base_freq``) and ``full_attention`` (global, RoPE base ``rope_theta``). EmbeddingGemma
sets ``use_bidirectional_attention``: every layer then attends both ways, the local ones within
``sliding_window // 2`` tokens either side. Options the port does not implement (attention-logit
softcapping, RoPE types other than default and linear) are refused by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.layers import ACTIVATIONS

FULL, SLIDING = "full_attention", "sliding_attention"
_DEFAULT_THETA = {FULL: 1_000_000.0, SLIDING: 10_000.0}


@dataclasses.dataclass(frozen=True)
class RopeSetting:
    """One layer type's rotary embedding: base ``theta`` and the linear position ``factor`` (1 = none)."""

    theta: float
    factor: float = 1.0

    def to_hf(self) -> dict[str, Any]:
        if self.factor == 1.0:
            return {"rope_type": "default", "rope_theta": self.theta}
        return {"rope_type": "linear", "rope_theta": self.theta, "factor": self.factor}


def _rope_setting(field: str, params: dict[str, Any] | None, theta: float) -> RopeSetting:
    params = dict(params or {})
    rope_type = params.get("rope_type", params.get("type", "default"))
    theta = float(params.get("rope_theta", theta))
    if rope_type == "default":
        return RopeSetting(theta)
    if rope_type == "linear":
        return RopeSetting(theta, float(params["factor"]))
    raise UnsupportedConfigError(f"{field}.rope_type={rope_type!r} is not supported (only 'default' and 'linear')")


def _theta(params: dict[str, Any] | None, hf: dict[str, Any], legacy: str, default: float) -> float:
    """A layer type's RoPE base: its ``rope_parameters`` entry's, else the older top-level field
    ``legacy`` (looked up only then), as transformers orders them."""
    return params["rope_theta"] if params and "rope_theta" in params else hf.get(legacy, default)


def _layer_types(hf: dict[str, Any]) -> tuple[str, ...]:
    types = hf.get("layer_types")
    if types is None:  # the older integer pattern: every n-th layer is global
        pattern = hf.get("sliding_window_pattern", 6)
        types = [SLIDING if (i + 1) % pattern else FULL for i in range(hf["num_hidden_layers"])]
    unknown = sorted(set(types) - {FULL, SLIDING})
    if unknown:
        raise UnsupportedConfigError(f"layer_types={unknown} is not supported (only {FULL!r} and {SLIDING!r})")
    if len(types) != hf["num_hidden_layers"]:
        raise UnsupportedConfigError(f"layer_types has {len(types)} entries for num_hidden_layers={hf['num_hidden_layers']}")
    return tuple(types)


def _whole_number(hf: dict[str, Any], field: str, default: int) -> int:
    """``hf[field]`` as an int; a fractional value is refused (transformers' config refuses a float there)."""
    value = hf.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer():
        raise UnsupportedConfigError(f"{field}={value!r} is not supported (a whole number)")
    return int(value)


def _sliding_window(hf: dict[str, Any], types: tuple[str, ...]) -> int:
    """The local layers' ``sliding_window`` (transformers' default 4096 where the field is absent). With
    local layers, a null or non-positive one is refused (transformers' forward fails on a null one); with
    none, no layer reads it."""
    if SLIDING not in types:
        return int(hf.get("sliding_window") or 4096)
    window = hf.get("sliding_window", 4096)
    if window is None or _whole_number(hf, "sliding_window", 4096) < 1:
        raise UnsupportedConfigError(f"sliding_window={window!r} is not supported with {SLIDING!r} layers (a positive number of tokens)")
    return int(window)


@dataclasses.dataclass(frozen=True)
class Gemma3Config:
    """Architecture of a Gemma 3 text model used as a scoring backbone."""

    vocab_size: int = 262_144
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 24
    num_attention_heads: int = 3
    num_key_value_heads: int = 1
    head_dim: int = 256
    hidden_activation: str = "gelu_pytorch_tanh"
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    query_pre_attn_scalar: int = 256
    sliding_window: int = 512
    """As Hugging Face stores it in ``config.json`` (before its bidirectional halving)."""
    layer_types: tuple[str, ...] = ()
    full_rope: RopeSetting = RopeSetting(_DEFAULT_THETA[FULL])
    sliding_rope: RopeSetting = RopeSetting(_DEFAULT_THETA[SLIDING])
    attention_bias: bool = False
    use_bidirectional_attention: bool = True
    pad_token_id: int | None = 0

    MODEL_TYPES = ("gemma3_text",)

    @property
    def max_sequence_length(self) -> int:
        return self.max_position_embeddings

    @property
    def causal(self) -> bool:
        return not self.use_bidirectional_attention

    @property
    def window(self) -> int:
        """The local layers' reach, in tokens either side of the query (``attention(window=...)``):
        ``sliding_window // 2`` when bidirectional, ``sliding_window - 1`` back (with the causal mask) otherwise."""
        return self.sliding_window // 2 if self.use_bidirectional_attention else self.sliding_window - 1

    def rope(self, layer_type: str) -> RopeSetting:
        return self.sliding_rope if layer_type == SLIDING else self.full_rope

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> Gemma3Config:
        """Build from a Hugging Face config dict (``config.json`` or ``Gemma3TextConfig.to_dict()``),
        refusing options the port does not implement."""
        model_type = hf.get("model_type", cls.MODEL_TYPES[0])
        if model_type not in cls.MODEL_TYPES:
            raise UnsupportedConfigError(f"model_type={model_type!r} is not supported by this port (only {cls.MODEL_TYPES[0]!r})")
        if hf.get("attn_logit_softcapping") is not None:
            raise UnsupportedConfigError(f"attn_logit_softcapping={hf['attn_logit_softcapping']} is not supported (no score softcapping)")
        if hf.get("attention_dropout"):
            raise UnsupportedConfigError(f"attention_dropout={hf['attention_dropout']} is not supported (the port has no dropout)")
        act = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
        if act not in ACTIVATIONS:
            raise UnsupportedConfigError(f"hidden_activation={act!r} is not supported")
        heads = hf["num_attention_heads"]
        kv_heads = hf.get("num_key_value_heads") or heads
        if heads % kv_heads:
            raise UnsupportedConfigError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}")
        rope = dict(hf.get("rope_parameters") or {})
        if set(rope) <= {FULL, SLIDING}:  # per layer type (transformers >= 5)
            full, sliding = rope.get(FULL), rope.get(SLIDING)
        else:  # one flat dict: it applies to the global layers, as rope_scaling did
            full, sliding = rope, None
        if hf.get("rope_scaling"):
            full = {**(full or {}), **hf["rope_scaling"]}
        types = _layer_types(hf)
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_hidden_layers=hf["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            hidden_activation=act,
            max_position_embeddings=hf.get("max_position_embeddings", 131_072),
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            query_pre_attn_scalar=_whole_number(hf, "query_pre_attn_scalar", 256),
            sliding_window=_sliding_window(hf, types),
            layer_types=types,
            full_rope=_rope_setting("rope_parameters.full_attention", full, _theta(full, hf, "rope_theta", _DEFAULT_THETA[FULL])),
            sliding_rope=_rope_setting(
                "rope_parameters.sliding_attention", sliding, _theta(sliding, hf, "rope_local_base_freq", _DEFAULT_THETA[SLIDING])
            ),
            attention_bias=bool(hf.get("attention_bias", False)),
            use_bidirectional_attention=bool(hf.get("use_bidirectional_attention", False)),
            pad_token_id=hf.get("pad_token_id", 0),
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
            "hidden_activation": self.hidden_activation,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "query_pre_attn_scalar": self.query_pre_attn_scalar,
            "sliding_window": self.sliding_window,
            "layer_types": list(self.layer_types),
            "rope_parameters": {FULL: self.full_rope.to_hf(), SLIDING: self.sliding_rope.to_hf()},
            "attention_bias": self.attention_bias,
            "use_bidirectional_attention": self.use_bidirectional_attention,
            "pad_token_id": self.pad_token_id,
        }

    def with_dropout(self, rate: float) -> Gemma3Config:
        """Gemma 3 trains without dropout here; a requested rate is refused rather than ignored."""
        if rate:
            raise UnsupportedConfigError(f"model.dropout={rate} is not supported by the gemma3 port (it has no dropout)")
        return self


def backbone_pooling(hf: dict[str, Any]) -> str:
    """EmbeddingGemma (bidirectional) is trained to pool the mean of its token states; a causal Gemma 3
    decoder pools its last token."""
    return "mean" if hf.get("use_bidirectional_attention") else "last_token"
