"""The ranges of numeric config fields, checked as a config is built.

A batch size of 0, a dropout of 1.5 or a negative learning rate is refused with the key's name when
the config loads, instead of surfacing later as a ``ZeroDivisionError``, a NaN loss or a model that
silently learns nothing. Fields are named by their dataclass and field name, so a rule holds wherever
the dataclass appears (``optim.param_groups[i]`` included). ``None`` (an unset optional) is always
allowed; a list's rule applies to each item.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Limit = tuple[Callable[[float], bool], str]


def at_least(low: float) -> Limit:
    return (lambda v: v >= low, f">= {low}")


POSITIVE: Limit = (lambda v: v > 0, "> 0")
FRACTION: Limit = (lambda v: 0 <= v <= 1, "in [0, 1]")
BELOW_ONE: Limit = (lambda v: 0 <= v < 1, "in [0, 1)")

LIMITS: dict[tuple[str, str], Limit] = {
    ("ModelConfig", "head_hidden"): at_least(1),
    ("ModelConfig", "head_dropout"): BELOW_ONE,
    ("ModelConfig", "dropout"): BELOW_ONE,
    ("DataConfig", "max_length"): at_least(2),  # at least the two special tokens
    ("DataConfig", "length_buckets"): at_least(1),
    ("DataConfig", "read_threads"): at_least(0),
    ("DataConfig", "prefetch_buffer"): at_least(0),
    ("DataConfig", "workers"): at_least(0),
    ("DataConfig", "pack_length"): at_least(0),
    ("DataConfig", "pack_max_segments"): at_least(1),
    ("DataConfig", "pack_bins"): at_least(1),
    ("ParamGroupRule", "lr"): at_least(0),
    ("ParamGroupRule", "weight_decay"): at_least(0),
    ("OptimConfig", "lr"): at_least(0),
    ("OptimConfig", "head_lr"): at_least(0),
    ("OptimConfig", "weight_decay"): at_least(0),
    ("OptimConfig", "b1"): BELOW_ONE,
    ("OptimConfig", "b2"): BELOW_ONE,
    ("OptimConfig", "eps"): at_least(0),
    ("OptimConfig", "warmup_ratio"): FRACTION,
    ("OptimConfig", "decay_ratio"): FRACTION,
    ("OptimConfig", "layer_decay"): POSITIVE,
    ("OptimConfig", "freeze_encoder_steps"): at_least(0),
    ("OptimConfig", "freeze_encoder_fraction"): FRACTION,
    ("OptimConfig", "grad_clip"): POSITIVE,
    ("OptimConfig", "ema_decay"): BELOW_ONE,
    ("CheckpointConfig", "every_steps"): at_least(0),
    ("CheckpointConfig", "keep"): at_least(1),
    ("TrainConfig", "batch_size"): at_least(1),
    ("TrainConfig", "grad_accum"): at_least(1),
    ("TrainConfig", "epochs"): POSITIVE,
    ("TrainConfig", "max_steps"): at_least(1),
    ("TrainConfig", "eval_every_steps"): at_least(0),
    ("TrainConfig", "log_every_steps"): at_least(1),
    ("TrainConfig", "preemption_check_every"): at_least(1),
    ("TrainConfig", "early_stopping_patience"): at_least(0),
    ("TrainConfig", "pair_batch_size"): at_least(1),
    ("LossConfig", "huber_delta"): POSITIVE,
    ("LossConfig", "distribution_mse_weight"): at_least(0),
    ("LossConfig", "ranking_weight"): at_least(0),
    ("LossConfig", "pair_weight"): at_least(0),
    ("LossConfig", "dimension_weights"): at_least(0),
    ("EvalConfig", "batch_size"): at_least(1),
    ("EvalConfig", "length_step"): at_least(1),
    ("EvalConfig", "pack_length"): at_least(0),
    ("EvalConfig", "batch_tokens"): at_least(0),
}
LIST_LENGTHS: dict[tuple[str, str], int] = {("LossConfig", "dimension_weights"): 4}
"""Lists with one item per dimension (a shorter one would broadcast, or fail at the first step)."""


def limit_error(owner: str, field: str, value: Any, limits: dict[tuple[str, str], Limit] = LIMITS) -> str | None:
    """Why ``value`` is out of range for ``owner.field`` (e.g. ``"must be >= 1, got 0"``), or None.
    ``limits``: another table of the same form (the label config has its own)."""
    length = LIST_LENGTHS.get((owner, field))
    if length is not None and isinstance(value, list) and len(value) != length:
        return f"must have {length} items, got {len(value)}"
    limit = limits.get((owner, field))
    if limit is None or value is None:
        return None
    ok, phrase = limit
    bad = [v for v in (value if isinstance(value, list) else [value]) if not ok(v)]
    if not bad:
        return None
    return f"must be {phrase}, got {bad[0]!r}"  # a scalar's only item is itself
