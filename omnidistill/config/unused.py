"""Settings that only another setting puts to use, named when that one leaves them idle.

``model.head_hidden`` sizes the ``shared_mlp`` head alone, ``data.layout`` is read by the ``omniscore``
input format alone, and so on: set away from its default while the setting it serves is off, such a
field changes nothing, and training says so at its start rather than run as if it did. A warning,
not an error: a sweep's base config may set a field that only some of its runs use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from omnidistill.config import Config


@dataclasses.dataclass(frozen=True)
class Dependent:
    """``key`` (``section.field``) is used only where ``applies(cfg)``; ``needs`` says when, for the message."""

    key: str
    applies: Callable[[Config], bool]
    needs: str


DEPENDENTS: tuple[Dependent, ...] = (
    Dependent("model.head_hidden", lambda c: c.model.head == "shared_mlp", "model.head=shared_mlp"),
    Dependent("model.head_dropout", lambda c: c.model.head == "shared_mlp", "model.head=shared_mlp"),
    Dependent("data.layout", lambda c: c.data.input_format == "omniscore", "data.input_format=omniscore"),
    Dependent("data.pack_max_segments", lambda c: c.data.pack_length > 0, "data.pack_length > 0"),
    Dependent("data.pack_bins", lambda c: c.data.pack_length > 0, "data.pack_length > 0"),
    Dependent("optim.decay_ratio", lambda c: c.optim.schedule == "wsd", "optim.schedule=wsd"),
    Dependent("loss.huber_delta", lambda c: c.loss.name == "huber", "loss.name=huber"),
    Dependent("loss.distribution_mse_weight", lambda c: c.loss.name == "distribution", "loss.name=distribution"),
    Dependent("data.pair_items", lambda c: bool(c.data.pairs), "data.pairs"),
    Dependent("train.pair_batch_size", lambda c: bool(c.data.pairs), "data.pairs"),
    Dependent("loss.pair_weight", lambda c: bool(c.data.pairs), "data.pairs"),
    Dependent("logging.wandb_mode", lambda c: bool(c.logging.wandb), "logging.wandb"),
    Dependent("train.early_stopping_metric", lambda c: c.train.early_stopping_patience > 0, "train.early_stopping_patience > 0"),
)


def _value(cfg: Any, key: str) -> Any:
    section, field = key.split(".")
    return getattr(getattr(cfg, section), field)


def _assignments(key: str, value: Any, default: Any) -> str:
    """``key=value``; for a nested section (``data.layout``), each of its fields that differs."""
    if dataclasses.is_dataclass(value):
        fields = [f.name for f in dataclasses.fields(value) if getattr(value, f.name) != getattr(default, f.name)]
        return ", ".join(f"{key}.{name}={getattr(value, name)!r}" for name in fields)
    return f"{key}={value!r}"


def idle_settings(cfg: Config) -> list[str]:
    """One line per field of :data:`DEPENDENTS` set away from its default where nothing reads it."""
    default = Config()
    return [
        f"{_assignments(d.key, _value(cfg, d.key), _value(default, d.key))} changes nothing: only {d.needs} uses it"
        for d in DEPENDENTS
        if _value(cfg, d.key) != _value(default, d.key) and not d.applies(cfg)
    ]
