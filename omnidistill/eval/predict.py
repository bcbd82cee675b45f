"""Batched, sharded, deterministic prediction over records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from omnidistill.data.pipeline import eval_dataset
from omnidistill.data.schema import Record
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.dimensions import NUM_DIMENSIONS
from omnidistill.parallel.mesh import batch_sharding, global_batch_array

MODEL_INPUTS = ("input_ids", "attention_mask")
"""What ``predict_fn`` receives (the warm-up compiles for exactly this structure)."""


def _to_host(x: jax.Array) -> np.ndarray:
    if jax.process_count() == 1:
        return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def predict_records(
    predict_fn: Callable[[Any, dict], jax.Array],
    params: Any,
    records: Sequence[Record],
    encoder: RecordEncoder,
    mesh: Mesh,
    *,
    batch_size: int,
    buckets: Sequence[int],
    progress: bool = False,
) -> np.ndarray:
    """Scores [N, 4] in record order (or [N, 4, ...] when ``predict_fn`` gives more per dimension).
    ``predict_fn`` should be jitted (one compile per bucket)."""
    n_shards = mesh.shape["data"] * mesh.shape["fsdp"]
    batch_size = max(n_shards, -(-batch_size // n_shards) * n_shards)
    sharding = batch_sharding(mesh)
    ds = eval_dataset(
        records,
        encoder,
        global_batch=batch_size,
        buckets=buckets,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
    )
    out: np.ndarray | None = None
    if progress and jax.process_index() == 0:
        from tqdm import tqdm

        ds = tqdm(ds, total=len(ds), desc="score", unit="batch", dynamic_ncols=True)
    for local in ds:
        batch = {k: global_batch_array(local[k], sharding) for k in MODEL_INPUTS}
        scores = _to_host(predict_fn(params, batch))
        index = _to_host(global_batch_array(local["index"], sharding))
        keep = index >= 0
        if out is None:
            out = np.zeros((len(records), *scores.shape[1:]), np.float32)
        out[index[keep]] = scores[keep]
    return np.zeros((0, NUM_DIMENSIONS), np.float32) if out is None else out


def warm_up(predict_fn: Callable[[Any, dict], jax.Array], params: Any, mesh: Mesh, *, batch_size: int, buckets: Sequence[int]) -> None:
    """Run ``predict_fn`` once per bucket length on a padding batch, so that every compilation happens
    before a timed pass (each bucket compiles once; longer inputs than the largest bucket still compile)."""
    n_shards = mesh.shape["data"] * mesh.shape["fsdp"]
    batch_size = max(n_shards, -(-batch_size // n_shards) * n_shards)
    sharding = batch_sharding(mesh)
    local = batch_size // jax.process_count()
    for length in sorted(set(buckets)):
        batch = {"input_ids": np.zeros((local, length), np.int32), "attention_mask": np.ones((local, length), np.int32)}
        assert tuple(batch) == MODEL_INPUTS
        jax.block_until_ready(predict_fn(params, {k: global_batch_array(v, sharding) for k, v in batch.items()}))


def used_buckets(lengths: Sequence[int], max_length: int, buckets: Sequence[int]) -> list[int]:
    """The padded lengths a pass over inputs of these (untruncated) token counts will use (a bucket, or
    the length itself above them)."""
    from omnidistill.data.pipeline import bucket_length

    return sorted({bucket_length(min(n, max_length), buckets) for n in lengths})


def inference_buckets(max_length: int, step: int) -> tuple[int, ...]:
    """Padded lengths for inference: every multiple of ``step`` below ``max_length``, and ``max_length``."""
    if step < 1:
        raise ValueError(f"eval.length_step must be >= 1, not {step}")
    return (*range(step, max_length, step), max_length)
