"""Read Hugging Face model folders (config + PyTorch weights) and load them into a regressor."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from omnidistill.models.registry import get_family
from omnidistill.models.regressor import Regressor
from omnidistill.models.scan import is_scanned, stack_layers, tree_plan, unstack_layers
from omnidistill.models.weights import hf_to_flax, match_hf_keys

log = logging.getLogger(__name__)


def resolve_hf_dir(name_or_path: str) -> Path:
    """A local folder, or a hub id downloaded (once, into the HF cache) with ``huggingface_hub``."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if path.exists() or name_or_path.startswith((".", "/")):
        raise FileNotFoundError(f"{name_or_path}: not a Hugging Face model folder")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name_or_path, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.bin"]))
    except Exception as err:  # huggingface_hub raises many types: offline, no such repo, gated, bad id
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise FileNotFoundError(
            f"{name_or_path}: not a local folder (a relative path is read from the current directory, {Path.cwd()}), "
            f"nor a model the Hugging Face Hub gave ({type(err).__name__}: {reason})"
        ) from None


def read_hf_config(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing config.json")
    return json.loads(path.read_text(encoding="utf-8"))


def _weight_files(folder: Path) -> list[Path]:
    """The folder's safetensors files (single or sharded), or its ``pytorch_model.bin``."""
    single = folder / "model.safetensors"
    index = folder / "model.safetensors.index.json"
    if single.is_file():
        return [single]
    if index.is_file():
        return [folder / shard for shard in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    bin_path = folder / "pytorch_model.bin"
    if bin_path.is_file():
        return [bin_path]
    raise FileNotFoundError(f"{folder}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def read_hf_tensors(folder: str | Path) -> dict[str, np.ndarray]:
    """All tensors of a folder: ``model.safetensors`` (single or sharded) or ``pytorch_model.bin``."""
    from safetensors.numpy import load_file

    files = _weight_files(Path(folder))
    if files[0].suffix != ".bin":
        tensors: dict[str, np.ndarray] = {}
        for file in files:
            tensors.update(load_file(str(file)))
        return tensors
    try:
        import torch
    except ImportError:
        raise RuntimeError(f"{files[0]}: reading .bin weights needs torch (pip install torch==2.13.0)") from None
    state = torch.load(files[0], map_location="cpu", weights_only=True)
    return {k: v.float().numpy() for k, v in state.items()}


def read_hf_tensor_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor of a folder, from the safetensors headers alone (no tensor is read;
    a ``pytorch_model.bin`` has no separate header and is read whole)."""
    from safetensors import safe_open

    files = _weight_files(Path(folder))
    if files[0].suffix == ".bin":
        return {k: tuple(v.shape) for k, v in read_hf_tensors(folder).items()}
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        with safe_open(str(file), framework="numpy") as f:
            shapes.update({k: tuple(f.get_slice(k).get_shape()) for k in f.keys()})
    return shapes


def param_dict(model: nnx.Module) -> dict[Any, Any]:
    """The model's parameters as a plain nested dict of arrays."""
    return nnx.to_pure_dict(nnx.state(model, nnx.Param))


def unrolled_shapes(model: nnx.Module) -> dict[tuple[Any, ...], tuple[int, ...]]:
    """Shape of every parameter, by its path in the unrolled layout (``encoder/layers/<n>/...``)."""
    tree = jax.eval_shape(unstack_layers, nnx.to_pure_dict(nnx.state(model, nnx.Param)))  # shapes only: no layer is sliced
    return {path: tuple(leaf.shape) for path, leaf in nnx.traversals.flatten_mapping(tree).items()}


def set_params(model: nnx.Module, params: dict[Any, Any]) -> None:
    """Overwrite the model's parameters (a partial nested dict is allowed). ``params`` may be in either
    layout: an unrolled tree is stacked for a model with ``model.scan_layers`` (see :mod:`omnidistill.models.scan`)."""
    state = nnx.state(model, nnx.Param)
    current = nnx.to_pure_dict(state)
    if is_scanned(current):
        params = stack_layers(params, tree_plan(current))
    elif is_scanned(params):
        params = unstack_layers(params)
    flat_new = dict(nnx.traversals.flatten_mapping(params))
    for path, var in nnx.to_flat_state(state):
        if path in flat_new:
            value = flat_new[path]
            current = var.get_value()
            if tuple(value.shape) != tuple(current.shape):
                raise ValueError(f"{'/'.join(map(str, path))}: shape {value.shape} != {current.shape}")
            var.set_value(jnp.asarray(value, dtype=current.dtype))
    unset = [path for path, var in nnx.to_flat_state(state) if isinstance(var.get_value(), jax.ShapeDtypeStruct)]
    if unset:  # a model built without weights (abstract_regressor) must get every one
        where = "/".join(map(str, unset[0]))
        raise ValueError(f"{where}: no value for this parameter of a model built without weights ({len(unset)} unset)")
    nnx.update(model, state)


def load_hf_weights(
    model: Regressor,
    tensors: dict[str, np.ndarray],
    required_groups: tuple[str, ...] = ("encoder",),
) -> list[str]:
    """Load HF tensors into ``model``; returns the HF keys of optional tensors left at random init."""
    params, absent_keys = hf_params(model, tensors, required_groups)
    set_params(model, params)
    if absent_keys:
        log.info("left at random initialisation: %s", ", ".join(absent_keys))
    return absent_keys


def _match_options(model: Regressor, required_groups: tuple[str, ...]) -> dict[str, Any]:
    """How a family's HF tensors map onto ``model``: its table entries, shapes and ignorable keys."""
    family = get_family(model.family_name)
    shapes = unrolled_shapes(model)
    full_table = family.weight_table(model.arch)
    # tensors of parts this model does not have (a checkpoint's pooler under pooling: cls_raw) are not used
    unused = tuple(e.hf_key for e in full_table if e.path not in shapes)
    return {
        "table": [e for e in full_table if e.path in shapes],
        "required_groups": required_groups,
        "ignorable_prefixes": family.ignorable_prefixes + unused + tuple(k.split(".", 1)[1] for k in unused if "." in k),
        "shapes": shapes,
    }


def hf_params(model: Regressor, tensors: dict[str, np.ndarray], required_groups: tuple[str, ...]) -> tuple[dict[Any, Any], list[str]]:
    """HF tensors as ``model``'s parameter tree (checked against its shapes), and the HF keys of the
    optional tensors they lack."""
    params, absent = hf_to_flax(tensors, **_match_options(model, required_groups))
    return params, [e.hf_key for e in absent]


def absent_hf_keys(model: Regressor, hf_shapes: dict[str, tuple[int, ...]], required_groups: tuple[str, ...]) -> list[str]:
    """The HF keys of the optional tensors that a checkpoint of these tensor shapes lacks, after the
    same checks as :func:`hf_params` (missing, unexpected, mis-shaped tensors), without any values."""
    _, absent = match_hf_keys(hf_shapes, **_match_options(model, required_groups))
    return [e.hf_key for e in absent]
