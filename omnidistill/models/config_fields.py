"""The ``model.arch`` fields a family's port takes: a field its ``from_hf`` does not read is refused by
name, since a mistyped ``model.arch.num_hidden_layer`` would otherwise build the default model and
train it without a word (Hugging Face configs keep unknown keys as plain attributes); a value of the
wrong type for the port's field, and a dropout rate that ``model.dropout`` would override, are
refused too."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from omnidistill.config import ConfigError, ModelConfig, check_value, nearest_name
from omnidistill.models.registry import Family

SCALARS = (bool, int, float, str)


class LookupLog(Mapping[str, Any]):
    """A read-only view of a config dict that notes every key looked up (``[]``, ``get``, ``in``),
    present or not. Iterating it counts as reading every key, so a port that walks the whole dict
    never has a field refused wrongly; the ports look fields up by name (``tests/models/test_config_fields.py``)."""

    def __init__(self, data: Mapping[str, Any]):
        self._data = data
        self.looked_up: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.looked_up.add(key)
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        self.looked_up.update(self._data)
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def fields_read(config_from_hf: Callable[[Any], Any], hf_config: Mapping[str, Any]) -> frozenset[str]:
    """The keys ``config_from_hf`` (a family's ``from_hf``) looks up when it builds its config from
    ``hf_config``. A field it refuses is read too; one it reads only under a condition (Gemma 3's
    ``hidden_act``, looked up when ``hidden_activation`` is absent) counts where the condition holds."""
    log = LookupLog(hf_config)
    config_from_hf(log)
    return frozenset(log.looked_up)


def _scalar_type(tp: Any) -> bool:
    """Whether a field annotation is a scalar (or an optional scalar) that :func:`check_value` checks."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return all(arg is type(None) or arg in SCALARS for arg in typing.get_args(tp))
    return tp in SCALARS


def check_arch_fields(family: Family, hf_config: Mapping[str, Any], model_cfg: ModelConfig, where: str = "model.arch") -> None:
    """Refuse, naming the field: a value of ``model_cfg.arch`` that the port's field of that name cannot
    take (``num_hidden_layers: abc``); a field of it that ``family``'s port does not read from
    ``hf_config`` (``model.arch`` over ``init_from``'s ``config.json``, or alone), with the closest
    field it reads; and a dropout rate beside ``model.dropout``, which sets every rate of the backbone."""
    hints = typing.get_type_hints(family.config_class)
    for field in dataclasses.fields(family.config_class):
        if field.name in model_cfg.arch and _scalar_type(hints[field.name]):
            check_value(model_cfg.arch[field.name], hints[field.name], f"{where}.{field.name}")
    read = fields_read(family.config_from_hf, hf_config)
    for key in sorted(set(model_cfg.arch) - read):
        close = nearest_name(key, read)
        hint = f"did you mean {close}?" if close else f"the fields it reads: {', '.join(sorted(read))}"
        if "dropout" in key:
            hint += "; model.dropout sets every dropout rate of a backbone that has them"
        unread = f"the {family.name} port does not read this field from this config, so it changes nothing"
        raise ConfigError(f"{where}.{key}: {unread} ({hint})")
    rates = sorted(key for key in model_cfg.arch if "dropout" in key)
    if model_cfg.dropout is not None and rates:
        overridden = f"model.dropout={model_cfg.dropout} sets every dropout rate of the backbone, this one too"
        raise ConfigError(f"{where}.{rates[0]}: {overridden}; change model.dropout, or set it to null to take the rates from {where}")


def model_differences(config_from_hf: Callable[[Any], Any], old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``field: checkpoint X != config Y`` for each field of the family's config (``config_from_hf``:
    the port's ``from_hf``) that the two HF configs give different values. Keys the port does not
    read, and a field written in one and left to the port's default in the other, are no difference."""
    before, after = config_from_hf(old), config_from_hf(new)
    return [
        f"{field.name}: checkpoint {getattr(before, field.name)!r} != config {getattr(after, field.name)!r}"
        for field in dataclasses.fields(before)
        if getattr(before, field.name) != getattr(after, field.name)
    ]
