"""Device mesh from config, and regex rules that give every parameter a ``PartitionSpec``.

Axes: ``data`` (pure data parallel), ``fsdp`` (data parallel with parameters/optimizer state sharded),
``tensor`` (Megatron-style tensor parallel). The batch is split over ``data`` x ``fsdp``.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from omnidistill.config import MeshConfig
from omnidistill.models.scan import plan_of, unrolled_names

log = logging.getLogger(__name__)
AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")
Rule = tuple[str, tuple[str | None, ...]]


class MeshError(ValueError):
    """Mesh axis sizes do not fit the available devices."""


def mesh_shape(cfg: MeshConfig, n_devices: int) -> tuple[int, int, int]:
    """Per-slice (ICI) axis sizes for ``n_devices`` devices in one slice."""
    sizes = [cfg.data, cfg.fsdp, cfg.tensor]
    if sum(s == -1 for s in sizes) > 1:
        raise MeshError("mesh: at most one of data/fsdp/tensor may be -1")
    if any(s == 0 or s < -1 for s in sizes):
        raise MeshError(f"mesh: axis sizes must be positive or -1, got data={cfg.data} fsdp={cfg.fsdp} tensor={cfg.tensor}")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if n_devices % known:
            raise MeshError(f"mesh: {n_devices} devices are not divisible by the fixed axes (product {known})")
        sizes[sizes.index(-1)] = n_devices // known
    if math.prod(sizes) != n_devices:
        raise MeshError(
            f"mesh: data={sizes[0]} x fsdp={sizes[1]} x tensor={sizes[2]} = {math.prod(sizes)} devices, but {n_devices} are available"
        )
    return tuple(sizes)  # type: ignore[return-value]


def build_mesh(cfg: MeshConfig, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``(data, fsdp, tensor)`` mesh over all (or the given) devices.

    On one slice the device order follows the hardware topology (``mesh_utils.create_device_mesh``);
    with ``dcn_data``/``dcn_fsdp`` > 1 the mesh is a hybrid of ICI axes within a slice and DCN axes across
    slices (TPU) or processes (elsewhere), and the sizes are checked against what is there.
    """
    from jax.experimental import mesh_utils

    devices = list(devices if devices is not None else jax.devices())
    dcn = (cfg.dcn_data, cfg.dcn_fsdp, 1)
    if min(dcn) < 1:
        raise MeshError(f"mesh: dcn_data={cfg.dcn_data} and dcn_fsdp={cfg.dcn_fsdp} must be >= 1")
    granules = math.prod(dcn)
    if granules == 1:
        shape = mesh_shape(cfg, len(devices))
        try:
            arr = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
        except (ValueError, NotImplementedError, AssertionError):
            arr = np.asarray(devices).reshape(shape)
        return Mesh(arr, AXES)
    on_tpu = devices[0].platform == "tpu"
    groups = {getattr(d, "slice_index", 0) if on_tpu else d.process_index for d in devices}
    unit = "slices" if on_tpu else "processes"
    if len(groups) != granules:
        raise MeshError(f"mesh: dcn_data x dcn_fsdp = {granules}, but the devices span {len(groups)} {unit}")
    if len(devices) % granules:
        raise MeshError(f"mesh: {len(devices)} devices do not split evenly over {granules} {unit}")
    ici = mesh_shape(cfg, len(devices) // granules)
    arr = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices, process_is_granule=not on_tpu, allow_split_physical_axes=True)
    return Mesh(arr, AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) dimension split over data x fsdp; other dimensions replicated."""
    return NamedSharding(mesh, P(BATCH_AXES))


class MeshBoundFunction:
    """``fn`` (a jitted function) called and lowered with ``mesh`` as the context mesh (``jax.set_mesh``),
    so that what it traces can read the mesh: the splash attention kernel ``shard_map``-s itself over
    it (``models/splash.py``). Other attributes (``_cache_size``, ...) are ``fn``'s."""

    def __init__(self, fn: Callable, mesh: Mesh) -> None:
        self.fn, self.mesh = fn, mesh

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with jax.set_mesh(self.mesh):
            return self.fn(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        with jax.set_mesh(self.mesh):
            return self.fn.lower(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fn, name)


def under_mesh(fn: Callable, mesh: Mesh) -> MeshBoundFunction:
    """``fn`` traced under ``mesh`` (:class:`MeshBoundFunction`)."""
    return MeshBoundFunction(fn, mesh)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def path_string(path: tuple[Any, ...]) -> str:
    """``('encoder', 'layers', 0, 'query', 'kernel')`` -> ``'encoder/layers/0/query/kernel'``."""
    parts = []
    for p in path:
        key = getattr(p, "key", getattr(p, "idx", getattr(p, "name", p)))
        parts.append(str(key))
    return "/".join(parts)


def _fit(spec: tuple[str | None, ...], shape: tuple[int, ...], mesh: Mesh) -> P:
    """Drop axes that do not divide their dimension (or exceed the rank)."""
    spec = tuple(spec[: len(shape)])
    fitted = []
    for dim, axis in zip(shape, spec, strict=False):
        size = mesh.shape[axis] if axis is not None else 1
        fitted.append(axis if axis is not None and size > 1 and dim % size == 0 else None)
    return P(*fitted)


def param_specs(params: Any, mesh: Mesh, rules: Sequence[Rule]) -> Any:
    """``PartitionSpec`` per parameter: the first matching rule, else FSDP over the largest dimension.

    Rules name unrolled paths (``encoder/layers/<n>/...``); a stacked parameter of ``model.scan_layers``
    is sharded as one of its layers would be, its leading (layer) axis unsharded."""
    compiled = [(re.compile(pattern), spec) for pattern, spec in rules]
    plan = plan_of(params)

    def one_layer_spec(name: str, shape: tuple[int, ...]) -> P:
        for regex, spec in compiled:
            if regex.search(name):
                return _fit(spec, shape, mesh)
        if len(shape) >= 2:
            largest = int(np.argmax(shape))
            default = tuple("fsdp" if i == largest else None for i in range(len(shape)))
            return _fit(default, shape, mesh)
        return P()

    def spec_for(path, leaf) -> P:
        shape = tuple(np.shape(leaf))
        names, layer_shape = unrolled_names(path_string(path), shape, plan)
        spec = one_layer_spec(names[0], layer_shape)
        return P(None, *spec) if layer_shape != shape else spec

    return jax.tree_util.tree_map_with_path(spec_for, params)


def param_shardings(params: Any, mesh: Mesh, rules: Sequence[Rule]) -> Any:
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), param_specs(params, mesh, rules))


def shardings_following_params(tree: Any, params: Any, default: NamedSharding) -> Any:
    """A sharding per leaf of ``tree`` (an optimizer state): a leaf whose path ends with a parameter's
    path and has its shape (AdamW's ``mu``/``nu``, any parameter-shaped statistic) is sharded like that
    parameter (``params``: arrays or ``jax.ShapeDtypeStruct``s that carry their sharding); every other
    leaf (step counts) gets ``default``.

    XLA gives state that ``tx.init`` makes from zeros no sharding of its own: left to it, every device
    held the full moments, so FSDP sharded only a third of the train state."""
    by_path = {tuple(path): (tuple(p.shape), p.sharding) for path, p in jax.tree_util.tree_leaves_with_path(params)}

    def pick(path: tuple[Any, ...], leaf: Any) -> NamedSharding:
        for start in range(len(path)):
            shape, sharding = by_path.get(tuple(path[start:]), (None, None))
            if shape == tuple(np.shape(leaf)):
                return sharding
        return default

    return jax.tree_util.tree_map_with_path(pick, tree)


def global_batch_array(local: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """Assemble a global array from this process's rows (works single- and multi-process)."""
    return jax.make_array_from_process_local_data(sharding, local)
