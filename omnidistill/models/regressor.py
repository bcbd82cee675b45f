"""The regressor: encoder -> pooling (-> family pooler) -> head -> four 1-5 scores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from omnidistill.config import ModelConfig
from omnidistill.models.heads import HEADS, POOLINGS, lookup
from omnidistill.models.layers import is_predicting, predicting, sub_rng
from omnidistill.models.registry import Family, get_family


class Regressor(nnx.Module):
    """Scores (input, candidate) token sequences on the four dimensions."""

    def __init__(self, family: Family, arch: Any, model_cfg: ModelConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        self.family_name = family.name
        self.arch = arch
        self.pooling_name = model_cfg.pooling
        self.head_name = model_cfg.head
        self.encoder = family.encoder_cls(
            arch, dtype=dtype, attention_impl=model_cfg.attention, remat=model_cfg.remat, scan=model_cfg.scan_layers, rngs=rngs
        )
        self.pooling = lookup(POOLINGS, model_cfg.pooling, "pooling")(arch.num_hidden_layers + 1, rngs=rngs)
        self.pooler = family.pooler_cls(arch, dtype=dtype, rngs=rngs) if self.pooling.uses_family_pooler else None
        features = self.pooler.features if self.pooler is not None else arch.hidden_size
        head_cls = lookup(HEADS, model_cfg.head, "head")
        self.head = head_cls(
            features, hidden=model_cfg.head_hidden, dropout_rate=model_cfg.head_dropout, bias=model_cfg.head_bias, rngs=rngs
        )

    @property
    def dropout_rate(self) -> float:
        """The largest dropout rate a training step applies: the backbone's, its pooler's, or the head's
        (``shared_mlp``'s ``model.head_dropout``). At 0 the step needs no dropout RNG."""
        backbone = max(getattr(self.arch, "hidden_dropout_prob", 0.0), getattr(self.arch, "pooler_dropout", 0.0))
        return max(backbone, getattr(self.head, "dropout_rate", 0.0))

    def __call__(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array,
        token_type_ids: jax.Array | None = None,
        *,
        segment_ids: jax.Array | None = None,
        num_segments: int = 1,
        token_index: jax.Array | None = None,
        rng: jax.Array | None = None,
    ) -> jax.Array:
        """Head outputs (float32; [B, 4] for the sigmoid heads). ``rng`` enables dropout; None is deterministic.

        ``attention_mask`` must be right-padded where cuDNN runs (``model.attention`` auto or cudnn on a
        GPU): it reaches cuDNN as sequence lengths (``layers.cudnn_inputs``). Every omnidistill pipeline
        right-pads; use ``xla`` for left padding.

        Packed rows: ``segment_ids`` [B, S] numbers the examples of each row 1..K (0 = padding) and
        the outputs are per segment slot, [B * num_segments, ...] (empty slots give unused outputs).

        Unpadded layers: ``token_index`` [G, t] lists each group's real slots
        (:func:`~omnidistill.data.token_batches.token_index`); the encoder's layers then run on those
        tokens only, for the same outputs. Only encoders with ``takes_token_index`` take it.
        """
        all_layers = self.pooling.needs_all_layers
        extra = {"first_rows": 1} if self.first_row_only(segment_ids) else {}
        if token_index is not None:
            if not self.takes_token_index:
                raise ValueError(f"model family {self.family_name!r} does not run unpadded (token_index): set eval.batch_tokens=0")
            extra["token_index"] = token_index
        states = self.encoder(
            input_ids, attention_mask, token_type_ids, segment_ids=segment_ids, rng=sub_rng(rng, 1), return_all_layers=all_layers, **extra
        )
        pooled = self.pooling(states if all_layers else [states], attention_mask, segment_ids, num_segments)
        if self.pooler is not None:
            pooled = self.pooler(pooled, rng=sub_rng(rng, 2))
        return self.head(pooled, rng=sub_rng(rng, 3))

    def first_row_only(self, segment_ids: jax.Array | None) -> bool:
        """Whether the encoder's last layer computes the first position of each row only: in a forward
        pass under :func:`~omnidistill.models.layers.predicting` (no gradients, so training's numbers
        never move), with first-token pooling on padded rows, for an encoder that can
        (:func:`~omnidistill.models.layers.last_rows_call`; decoders pool other positions)."""
        return (
            is_predicting()
            and segment_ids is None
            and self.pooling.reads_first_token_only
            and getattr(self.encoder, "takes_first_rows", False)
        )

    @property
    def takes_token_index(self) -> bool:
        """Whether the encoder can run its layers unpadded (``token_index``)."""
        return getattr(self.encoder, "takes_token_index", False)

    def scores(self, outputs: jax.Array) -> jax.Array:
        """Map head outputs to [B, 4] scores on the 1-5 scale."""
        return self.head.scores(outputs)

    @property
    def has_levels(self) -> bool:
        """Whether the head gives a distribution over levels 1..5 (``ordinal``, ``classification``)."""
        return hasattr(self.head, "level_probs")

    def level_probs(self, outputs: jax.Array) -> jax.Array:
        """[B, 4, 5] probabilities of levels 1..5; only for heads with :attr:`has_levels`."""
        if not self.has_levels:
            raise ValueError(f"model.head={self.head_name!r} gives one score per dimension, not a distribution over levels")
        return self.head.level_probs(outputs)


def build_regressor(model_cfg: ModelConfig, hf_config: dict[str, Any], *, dtype=jnp.float32, seed: int = 0) -> Regressor:
    """Randomly initialised regressor for ``hf_config`` (an HF config dict) in ``model_cfg.family``."""
    return _regressor(model_cfg, hf_config, dtype, nnx.Rngs(seed))


def abstract_regressor(model_cfg: ModelConfig, hf_config: dict[str, Any], *, dtype=jnp.float32) -> Regressor:
    """:func:`build_regressor`'s model with shapes in place of values: nothing is initialised, for weights
    that set every parameter (a checkpoint or an export; :func:`~omnidistill.models.hf_io.set_params`
    refuses to leave one unset). Random init only to overwrite it cost 2-3 s per load of a base model.

    The build is traced with :func:`_host_counted_rngs`: flax's own RNG counters, updated under the
    trace, cost time quadratic in the model's size (BERT-large: 2.6 s -> 0.4 s, docs/scoring.md)."""
    return nnx.eval_shape(lambda: _regressor(model_cfg, hf_config, dtype, _host_counted_rngs()))


def _regressor(model_cfg: ModelConfig, hf_config: dict[str, Any], dtype: Any, rngs: nnx.Rngs) -> Regressor:
    family = get_family(model_cfg.family)
    arch = family.config_from_hf(hf_config)
    if model_cfg.dropout is not None:
        arch = arch.with_dropout(model_cfg.dropout)
    return Regressor(family, arch, model_cfg, dtype=dtype, rngs=rngs)


def _host_counted_rngs() -> nnx.Rngs:
    """``nnx.Rngs(0)`` whose draw counters are numpy arrays, for a build under a trace whose values are
    never used (:func:`abstract_regressor`). Each draw updates its stream's counter; when the counter is
    a tracer, flax compares the old and new values' ``sharding``, and a tracer answers that with an
    ``AttributeError`` whose message JAX builds by walking every operation traced so far. A numpy counter
    is updated in place, untraced; the draws' keys are traced as before."""
    rngs = nnx.Rngs(0)
    for stream in vars(rngs).values():
        if isinstance(stream, nnx.RngStream):
            stream.count.set_raw_value(np.zeros(stream.count.shape, np.uint32))
    return rngs


def make_predict_fn(
    graphdef: nnx.GraphDef, *, levels: bool = False, num_segments: int = 1
) -> Callable[[Any, dict[str, jax.Array]], jax.Array]:
    """(params, batch) -> scores [B, 4], deterministic (no dropout; attention traced under
    :func:`~omnidistill.models.layers.predicting`). ``levels``: [B, 4, 6], the score
    followed by the probabilities of levels 1..5 (heads with a level distribution only). A batch with
    ``segment_ids`` holds packed rows: the outputs are per slot, [B * num_segments, ...]. A batch with
    ``token_index`` runs the encoder's layers unpadded (same outputs)."""

    def predict(params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        model = nnx.merge(graphdef, params)
        segment_ids = batch.get("segment_ids")
        slots = num_segments if segment_ids is not None else 1
        with predicting():
            inputs = {"segment_ids": segment_ids, "num_segments": slots, "token_index": batch.get("token_index")}
            outputs = model(batch["input_ids"], batch["attention_mask"], **inputs)
        if not levels:
            return model.scores(outputs)
        return jnp.concatenate([model.scores(outputs)[..., None], model.level_probs(outputs)], axis=-1)

    return predict
