"""Device memory figures: the measured peak (GPU/TPU) and XLA's compile-time estimate (any backend)."""

from __future__ import annotations

import math
from typing import Any

import jax


def device_peak_gb(device: Any = None) -> float | None:
    """Peak bytes in use on ``device`` (default: this process's first) in GB; None where the
    backend keeps no statistics (CPU)."""
    stats = (device or jax.local_devices()[0]).memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return round(peak / 1e9, 2) if peak else None


def compiled_peak_gb(compiled: Any) -> float | None:
    """XLA's peak memory estimate of a compiled function, per device, in GB."""
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    peak = getattr(stats, "peak_memory_in_bytes", 0) or (
        stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes
    )
    return round(peak / 1e9, 3)


def per_device_bytes(tree: Any) -> int:
    """Bytes of ``tree``'s arrays that one device holds (its shard of each; arrays or sharded
    ``jax.ShapeDtypeStruct``s): a train state's footprint per device, before activations."""
    return sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(tree))
