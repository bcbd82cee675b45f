"""Convert between Hugging Face PyTorch state dicts and Flax parameter trees with an explicit table.

Each family's ``params.py`` lists one :class:`WeightEntry` per tensor: the HF key (in the key space
of the family's ``*ForSequenceClassification`` class), the Flax path inside the regressor, and how
the tensor is transformed. The same table drives import and export, so they cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np

from omnidistill.models.scan import unstack_layers

Path = tuple[str | int, ...]


class WeightMismatchError(ValueError):
    """Tensors are missing, unexpected, or of the wrong shape."""


@dataclasses.dataclass(frozen=True)
class WeightEntry:
    """One tensor: HF key <-> Flax path. ``kind="linear"`` transposes a 2-D weight."""

    hf_key: str
    path: Path
    kind: Literal["linear", "copy"] = "copy"
    group: Literal["encoder", "pooler", "classifier"] = "encoder"

    def to_flax(self, tensor: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(tensor.T) if self.kind == "linear" else tensor

    def to_hf(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array.T) if self.kind == "linear" else array

    def flax_shape(self, hf_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape :meth:`to_flax` gives a tensor of ``hf_shape``."""
        return tuple(reversed(hf_shape)) if self.kind == "linear" else tuple(hf_shape)


def linear(hf_prefix: str, path: Path, group: str = "encoder") -> list[WeightEntry]:
    """Entries of a ``torch.nn.Linear`` (weight transposed to a Flax kernel, bias copied)."""
    return [
        WeightEntry(f"{hf_prefix}.weight", (*path, "kernel"), "linear", group),  # type: ignore[arg-type]
        WeightEntry(f"{hf_prefix}.bias", (*path, "bias"), "copy", group),  # type: ignore[arg-type]
    ]


def layer_norm(hf_prefix: str, path: Path, group: str = "encoder", bias: bool = True) -> list[WeightEntry]:
    """Entries of a ``torch.nn.LayerNorm`` (weight -> scale)."""
    entries = [WeightEntry(f"{hf_prefix}.weight", (*path, "scale"), "copy", group)]  # type: ignore[arg-type]
    if bias:
        entries.append(WeightEntry(f"{hf_prefix}.bias", (*path, "bias"), "copy", group))  # type: ignore[arg-type]
    return entries


def embedding(hf_key: str, path: Path, group: str = "encoder") -> WeightEntry:
    return WeightEntry(hf_key, (*path, "embedding"), "copy", group)  # type: ignore[arg-type]


def _get(tree: Mapping[Any, Any], path: Path) -> Any:
    node: Any = tree
    for part in path:
        node = node[part]
    return node


def _set(tree: dict[Any, Any], path: Path, value: Any) -> None:
    node = tree
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def match_hf_keys(
    hf_shapes: Mapping[str, tuple[int, ...]],
    table: Iterable[WeightEntry],
    *,
    key_prefixes: tuple[str, ...] = ("",),
    required_groups: tuple[str, ...] = ("encoder", "pooler", "classifier"),
    ignorable_prefixes: tuple[str, ...] = (),
    shapes: Mapping[Path, tuple[int, ...]] | None = None,
) -> tuple[list[tuple[WeightEntry, str]], list[WeightEntry]]:
    """Match HF tensor keys (with their shapes; no values needed) to the table's entries.

    A table key ``k`` is looked up as ``p + k`` for each ``p`` in ``key_prefixes`` (then as the key
    with the table's own first component removed, for bare backbone checkpoints). Returns the
    (entry, HF key) pairs found and the optional entries that were absent. Raises
    :class:`WeightMismatchError` listing every missing required tensor, every unexpected tensor, and
    every shape mismatch against ``shapes`` (Flax shapes by path).
    """
    used: set[str] = set()
    found: list[tuple[WeightEntry, str]] = []
    missing, absent_optional, bad_shapes = [], [], []
    for entry in table:
        candidates = [p + entry.hf_key for p in key_prefixes]
        if "." in entry.hf_key:
            candidates.append(entry.hf_key.split(".", 1)[1])
        key = next((c for c in candidates if c in hf_shapes), None)
        if key is None:
            (missing if entry.group in required_groups else absent_optional).append(entry)
            continue
        used.add(key)
        flax_shape = entry.flax_shape(hf_shapes[key])
        if shapes is not None and flax_shape != tuple(shapes[entry.path]):
            bad_shapes.append(f"{key}: checkpoint {flax_shape} vs model {tuple(shapes[entry.path])}")
        found.append((entry, key))
    unexpected = sorted(k for k in hf_shapes if k not in used and not any(k.startswith(p) for p in ignorable_prefixes))
    problems = []
    if missing:
        problems.append("missing tensors: " + listed([e.hf_key for e in missing], ", "))
    if unexpected:
        problems.append("unexpected tensors: " + listed(unexpected, ", "))
    if bad_shapes:
        problems.append("shape mismatches: " + listed(bad_shapes, "; "))
    if problems:
        raise WeightMismatchError("; ".join(problems))
    return found, absent_optional


def listed(names: list[str], sep: str, most: int = 8) -> str:
    """The first ``most`` of ``names``, then how many there are in all: a checkpoint of another size
    mismatches every tensor, and a list of hundreds hid the cause."""
    shown = sep.join(names[:most])
    return shown if len(names) <= most else f"{shown}{sep}... ({len(names)} in all)"


def hf_to_flax(
    tensors: Mapping[str, np.ndarray],
    table: Iterable[WeightEntry],
    **match: Any,
) -> tuple[dict[Any, Any], list[WeightEntry]]:
    """Map an HF state dict onto Flax paths: the nested Flax dict, and the optional entries that were
    absent. ``match`` are :func:`match_hf_keys`' options, which decide and check the mapping."""
    found, absent_optional = match_hf_keys({k: tuple(np.shape(v)) for k, v in tensors.items()}, table, **match)
    out: dict[Any, Any] = {}
    for entry, key in found:
        _set(out, entry.path, entry.to_flax(np.asarray(tensors[key])))
    return out, absent_optional


def flax_to_hf(params: Mapping[Any, Any], table: Iterable[WeightEntry]) -> dict[str, np.ndarray]:
    """Export Flax parameters (either layer layout) to HF keys; every table entry must exist in ``params``."""
    params = unstack_layers(params)
    out = {}
    missing = []
    for entry in table:
        try:
            value = _get(params, entry.path)
        except (KeyError, IndexError, TypeError):
            missing.append("/".join(map(str, entry.path)))
            continue
        out[entry.hf_key] = entry.to_hf(np.asarray(value, dtype=np.float32))
    if missing:
        raise WeightMismatchError("parameters missing from the model: " + ", ".join(missing))
    return out
