"""The regressor: encoder -> pooling -> family pooler -> head -> four 1-5 scores."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from omnidistill.config import ModelConfig
from omnidistill.models.heads import HEADS, POOLINGS, lookup
from omnidistill.models.layers import sub_rng
from omnidistill.models.registry import Family, get_family


class Regressor(nnx.Module):
    """Scores (input, candidate) token sequences on the four dimensions."""

    def __init__(self, family: Family, arch: Any, model_cfg: ModelConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        self.family_name = family.name
        self.arch = arch
        self.pooling_name = model_cfg.pooling
        self.head_name = model_cfg.head
        self.pooling = lookup(POOLINGS, model_cfg.pooling, "pooling")
        self.encoder = family.encoder_cls(arch, dtype=dtype, attention_impl=model_cfg.attention, rngs=rngs)
        self.pooler = family.pooler_cls(arch, dtype=dtype, rngs=rngs)
        self.head = lookup(HEADS, model_cfg.head, "head")(self.pooler.features, rngs=rngs)

    def __call__(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array,
        token_type_ids: jax.Array | None = None,
        *,
        rng: jax.Array | None = None,
    ) -> jax.Array:
        """Logits [B, 4] (float32). ``rng`` enables dropout (training); None is deterministic."""
        hidden = self.encoder(input_ids, attention_mask, token_type_ids, rng=sub_rng(rng, 1))
        pooled = self.pooler(self.pooling(hidden, attention_mask), rng=sub_rng(rng, 2))
        return self.head(pooled)

    def scores(self, logits: jax.Array) -> jax.Array:
        """Map logits to the 1-5 scale with the head's link."""
        return self.head.scores(logits)


def build_regressor(model_cfg: ModelConfig, hf_config: dict[str, Any], *, dtype=jnp.float32, seed: int = 0) -> Regressor:
    """Randomly initialised regressor for ``hf_config`` (an HF config dict) in ``model_cfg.family``."""
    family = get_family(model_cfg.family)
    arch = family.config_from_hf(hf_config)
    if model_cfg.dropout is not None:
        arch = arch.with_dropout(model_cfg.dropout)
    return Regressor(family, arch, model_cfg, dtype=dtype, rngs=nnx.Rngs(seed))
