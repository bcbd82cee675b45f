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
from omnidistill.models.weights import hf_to_flax

log = logging.getLogger(__name__)


def resolve_hf_dir(name_or_path: str) -> Path:
    """A local folder, or a hub id downloaded (once, into the HF cache) with ``huggingface_hub``."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if path.exists() or name_or_path.startswith((".", "/")):
        raise FileNotFoundError(f"{name_or_path}: not a Hugging Face model folder")
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(name_or_path, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.bin"]))


def read_hf_config(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing config.json")
    return json.loads(path.read_text(encoding="utf-8"))


def read_hf_tensors(folder: str | Path) -> dict[str, np.ndarray]:
    """All tensors of a folder: ``model.safetensors`` (single or sharded) or ``pytorch_model.bin``."""
    folder = Path(folder)
    from safetensors.numpy import load_file

    single = folder / "model.safetensors"
    index = folder / "model.safetensors.index.json"
    if single.is_file():
        return dict(load_file(str(single)))
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        tensors: dict[str, np.ndarray] = {}
        for shard in shards:
            tensors.update(load_file(str(folder / shard)))
        return tensors
    bin_path = folder / "pytorch_model.bin"
    if bin_path.is_file():
        try:
            import torch
        except ImportError:
            raise RuntimeError(f"{bin_path}: reading .bin weights needs torch (pip install torch==2.13.0)") from None
        state = torch.load(bin_path, map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    raise FileNotFoundError(f"{folder}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def param_dict(model: nnx.Module) -> dict[Any, Any]:
    """The model's parameters as a plain nested dict of arrays."""
    return nnx.state(model, nnx.Param).to_pure_dict()


def unrolled_shapes(model: nnx.Module) -> dict[tuple[Any, ...], tuple[int, ...]]:
    """Shape of every parameter, by its path in the unrolled layout (``encoder/layers/<n>/...``)."""
    tree = jax.eval_shape(unstack_layers, nnx.state(model, nnx.Param).to_pure_dict())  # shapes only: no layer is sliced
    return {path: tuple(leaf.shape) for path, leaf in nnx.traversals.flatten_mapping(tree).items()}


def set_params(model: nnx.Module, params: dict[Any, Any]) -> None:
    """Overwrite the model's parameters (a partial nested dict is allowed). ``params`` may be in either
    layout: an unrolled tree is stacked for a model with ``model.scan_layers`` (see :mod:`omnidistill.models.scan`)."""
    state = nnx.state(model, nnx.Param)
    current = state.to_pure_dict()
    if is_scanned(current):
        params = stack_layers(params, tree_plan(current))
    elif is_scanned(params):
        params = unstack_layers(params)
    flat_new = dict(nnx.traversals.flatten_mapping(params))
    for path, var in state.flat_state():
        if path in flat_new:
            value = flat_new[path]
            current = var.get_value()
            if tuple(value.shape) != tuple(current.shape):
                raise ValueError(f"{'/'.join(map(str, path))}: shape {value.shape} != {current.shape}")
            var.set_value(jnp.asarray(value, dtype=current.dtype))
    unset = [path for path, var in state.flat_state() if isinstance(var.get_value(), jax.ShapeDtypeStruct)]
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


def hf_params(model: Regressor, tensors: dict[str, np.ndarray], required_groups: tuple[str, ...]) -> tuple[dict[Any, Any], list[str]]:
    """HF tensors as ``model``'s parameter tree (checked against its shapes), and the HF keys of the
    optional tensors they lack."""
    family = get_family(model.family_name)
    shapes = unrolled_shapes(model)
    table = [e for e in family.weight_table(model.arch) if e.path in shapes]
    # tensors of parts this model does not have (a checkpoint's pooler under pooling: cls_raw) are not used
    unused = tuple(e.hf_key for e in family.weight_table(model.arch) if e.path not in shapes)
    params, absent = hf_to_flax(
        tensors,
        table,
        required_groups=required_groups,
        ignorable_prefixes=family.ignorable_prefixes + unused + tuple(k.split(".", 1)[1] for k in unused if "." in k),
        shapes=shapes,
    )
    return params, [e.hf_key for e in absent]
