"""Batched, sharded, deterministic prediction over records: items sorted by token count and padded to
length buckets, in batches of ``batch_size`` items or of ``eval.batch_tokens`` real tokens (an
encoder that runs unpadded, :class:`TokenBudget`), or packed several to a row
(:class:`InferencePacking`, ``eval.pack_length``)."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from omnidistill.data.pipeline import InferencePacking, eval_dataset, packed_eval_dataset, process_slice
from omnidistill.data.token_batches import TokenBudget, token_eval_dataset
from omnidistill.dimensions import NUM_DIMENSIONS
from omnidistill.models.kernel_casts import kernels_in_compute_dtype
from omnidistill.models.regressor import make_predict_fn
from omnidistill.parallel.mesh import MeshBoundFunction, batch_sharding, global_batch_array, replicated, under_mesh

MODEL_INPUTS = ("input_ids", "attention_mask")
"""What ``predict_fn`` receives for padded batches (the warm-up compiles for exactly this structure)."""
PACKED_INPUTS = (*MODEL_INPUTS, "segment_ids")
"""What it receives for packed rows."""
UNPADDED_INPUTS = (*MODEL_INPUTS, "token_index")
"""What it receives for batches filled by tokens (the encoder's layers run unpadded)."""


DEFAULT_BATCH_TOKENS = 1024
"""``eval.batch_tokens`` when unset, on one CPU batch shard: the best budget measured on CPU
(docs/benchmarks.md)."""


def default_batch_tokens(shards: int, platform: str) -> int:
    """``eval.batch_tokens`` when unset: :data:`DEFAULT_BATCH_TOKENS` on one CPU batch shard, else 0
    (batches of items). On several shards a batch closes at each new padded length with most shards'
    groups empty, which costs more than it saves on small inputs; on GPU and TPU no budget has been
    measured against the item batches yet (``tools/bench_device.sh`` times one), so they keep those."""
    return DEFAULT_BATCH_TOKENS if shards == 1 and platform == "cpu" else 0


def token_budget(batch_tokens: int | None, mesh: Mesh, buckets: Sequence[int], *, unpadded: bool = True) -> TokenBudget | None:
    """``eval.batch_tokens`` real tokens per batch shard of ``mesh`` (at least the longest padded
    length) as a :class:`TokenBudget` with one group per shard. None (batches of items) when it is 0,
    when the model cannot run ``unpadded`` (an encoder without ``takes_token_index``, or packed rows),
    or when it is unset (None) and :func:`default_batch_tokens` gives 0 for the mesh."""
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    if batch_tokens is None:
        batch_tokens = default_batch_tokens(shards, mesh.devices.flat[0].platform)
    if batch_tokens <= 0 or not unpadded:
        return None
    return TokenBudget(max(batch_tokens, max(buckets)) * shards, shards, tuple(buckets))


def input_keys(batch: dict[str, Any]) -> tuple[str, ...]:
    """The model inputs of a batch from any of the inference datasets."""
    if "segment_ids" in batch:
        return PACKED_INPUTS
    return UNPADDED_INPUTS if "token_index" in batch else MODEL_INPUTS


def inference_packing(pack_length: int, batch_size: int, max_length: int) -> InferencePacking | None:
    """``eval.pack_length`` (0: off) as rows of that many tokens, holding at most one item per 16 tokens
    of the row, with half as many rows per batch as would hold ``batch_size`` items of ``max_length``
    tokens (a batch of rows then holds about as many tokens as ``batch_size`` items of half the length)."""
    if pack_length <= 0:
        return None
    return InferencePacking(
        length=pack_length, rows=max(1, -(-batch_size * max_length // pack_length) // 2), max_segments=max(1, pack_length // 16)
    )


CompilerOptions = dict[str, bool | int | float | str]
"""XLA options for one jitted program (``jax.jit``'s ``compiler_options``): option name -> value."""


def checked_compiler_options(options: Mapping[str, Any] | None, where: str) -> CompilerOptions:
    """``options`` as a plain dict, each checked by XLA now: a trivial program is compiled with them, so
    a name XLA does not know or a value of the wrong type is a :class:`ValueError` naming ``where``
    (the config field or flag) before any scoring, not an error at the first batch. XLA parses every
    backend's options on every backend, so a GPU option is checked on a CPU as well."""
    options = dict(options or {})
    if options:
        try:
            jax.jit(lambda: 0, compiler_options=options).lower().compile()
        except jax.errors.JaxRuntimeError as err:
            raise ValueError(f"{where}: {err}") from None
    return options


def scoring_params(graphdef: Any, params: Any, mesh: Mesh) -> Any:
    """``params`` as the scoring program takes them, for ``score`` and ``eval`` alike: the kernels of
    layers that compute in bf16 cast once (:func:`kernels_in_compute_dtype`, the same scores), and
    replicated over ``mesh``."""
    return jax.device_put(kernels_in_compute_dtype(graphdef, params), replicated(mesh))


def jitted_predict_fn(
    graphdef: Any,
    mesh: Mesh,
    *,
    levels: bool = False,
    packing: InferencePacking | None = None,
    compiler_options: CompilerOptions | None = None,
) -> MeshBoundFunction:
    """:func:`make_predict_fn` jitted and traced under ``mesh`` (the splash kernel ``shard_map``-s over
    it), pooling ``packing.max_segments`` slots per row when ``packing`` is set, and compiled with
    ``compiler_options`` (``eval.compiler_options``; see :func:`checked_compiler_options`)."""
    slots = packing.max_segments if packing else 1
    fn = make_predict_fn(graphdef, levels=levels, num_segments=slots)
    return under_mesh(jax.jit(fn, compiler_options=dict(compiler_options) if compiler_options else None), mesh)


def _shard_multiple(size: int, mesh: Mesh) -> int:
    """``size`` rounded up to a multiple of the mesh's batch shards."""
    n_shards = mesh.shape["data"] * mesh.shape["fsdp"]
    return max(n_shards, -(-size // n_shards) * n_shards)


def _to_host(x: jax.Array | np.ndarray) -> np.ndarray:
    if jax.process_count() == 1:  # an array of this process's devices, or the host's own (an index)
        return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


IN_FLIGHT = 2
"""Batches :func:`predict_ids` dispatches beyond the one whose scores it reads back. JAX dispatches
asynchronously: reading a batch's scores waits for its program to finish, so with none ahead the
device idles while the host collates the next batch, copies it over and dispatches it. With two
ahead that host work overlaps the device's (docs/scoring.md)."""


def _batch_index(local: dict[str, np.ndarray], sharding: Any) -> np.ndarray | jax.Array:
    """The global batch's ``index`` (items of its rows or slots; -1: padding): the host's own on one
    process, else assembled on the devices like the batch (and gathered back with the scores), so that
    it is in the scores' order whatever the mesh's order of processes."""
    if jax.process_count() == 1:
        return local["index"]
    return global_batch_array(local["index"], sharding)


def predict_ids(
    predict_fn: Callable[[Any, dict], jax.Array],
    params: Any,
    ids: Sequence[np.ndarray],
    mesh: Mesh,
    *,
    pad_id: int,
    batch_size: int,
    buckets: Sequence[int],
    packing: InferencePacking | None = None,
    budget: TokenBudget | None = None,
    progress: bool = False,
    in_flight: int | None = None,
) -> np.ndarray:
    """Scores [N, 4] of N items' token ``ids``, in their order (or [N, 4, ...] when ``predict_fn`` gives
    more per dimension). ``predict_fn`` should be jitted (one compile per bucket, and one for the packed
    rows); with ``packing`` it must pool ``packing.max_segments`` slots per row
    (:func:`make_predict_fn`). With ``budget`` (and no ``packing``) batches hold up to ``budget.tokens``
    real tokens instead of ``batch_size`` items, and the model runs its layers on them unpadded.
    ``in_flight`` batches are dispatched ahead of the one read back (None: :data:`IN_FLIGHT`; 0: each
    batch is read back before the next is made)."""
    in_flight = IN_FLIGHT if in_flight is None else in_flight
    batch_size = _shard_multiple(batch_size, mesh)
    sharding = batch_sharding(mesh)
    where = dict(process_index=jax.process_index(), process_count=jax.process_count())
    if budget is not None and packing is None:
        ds = token_eval_dataset(ids, pad_id=pad_id, budget=budget, **where)
    elif packing is None:
        ds = eval_dataset(ids, pad_id=pad_id, global_batch=batch_size, buckets=buckets, **where)
    else:
        packing = dataclasses.replace(packing, rows=_shard_multiple(packing.rows, mesh))
        ds = packed_eval_dataset(ids, pad_id=pad_id, global_batch=batch_size, buckets=buckets, packing=packing, **where)
    out: np.ndarray | None = None
    if progress and jax.process_index() == 0:
        from tqdm import tqdm

        ds = tqdm(ds, total=len(ds), desc="score", unit="batch", dynamic_ncols=True)

    def read_back(scores: jax.Array, index: np.ndarray | jax.Array) -> None:
        nonlocal out
        scores = _to_host(scores)
        index = _to_host(index).reshape(-1)  # packed: [rows, K] slots, row-major
        keep = index >= 0
        if out is None:
            out = np.zeros((len(ids), *scores.shape[1:]), np.float32)
        out[index[keep]] = scores[keep]

    pending: collections.deque[tuple[jax.Array, np.ndarray | jax.Array]] = collections.deque()
    for local in ds:
        batch = {k: global_batch_array(local[k], sharding) for k in input_keys(local)}  # exactly what warm_up compiled for
        scores = predict_fn(params, batch)
        if scores.is_fully_addressable:
            scores.copy_to_host_async()  # the copy back starts when the program ends, not when it is read
        pending.append((scores, _batch_index(local, sharding)))
        if len(pending) > in_flight:
            read_back(*pending.popleft())
    while pending:
        read_back(*pending.popleft())
    return np.zeros((0, NUM_DIMENSIONS), np.float32) if out is None else out


def warm_up(
    predict_fn: Callable[[Any, dict], jax.Array],
    params: Any,
    mesh: Mesh,
    *,
    batch_size: int,
    buckets: Sequence[int],
    packing: InferencePacking | None = None,
    budget: TokenBudget | None = None,
) -> None:
    """Run ``predict_fn`` once per bucket length on a padding batch (and once on packed rows), so that
    every compilation happens before a timed pass (longer inputs than the largest bucket still compile).
    With ``packing``, only the buckets longer than a row are padded batches (shorter items are packed);
    with ``budget`` (and no packing) the batches have its rows and ``token_index``."""
    batches = []  # global batches of every compiled shape; the values do not matter
    if budget is not None and packing is None:
        for length in sorted(set(buckets)):
            padding = np.zeros((budget.groups * budget.rows_for(length), length), np.int32)  # all padding: any token_index is valid
            index = np.zeros((budget.groups, budget.per_group), np.int32)
            batches.append({"input_ids": padding, "attention_mask": padding, "token_index": index})
    else:
        padded = sorted({length for length in buckets if packing is None or length > packing.length})
        shapes = [(_shard_multiple(batch_size, mesh), length, False) for length in padded]
        if packing is not None:
            shapes.append((_shard_multiple(packing.rows, mesh), packing.length, True))
        for rows, length, packed in shapes:
            batches.append({"input_ids": np.zeros((rows, length), np.int32), "attention_mask": np.ones((rows, length), np.int32)})
            if packed:
                batches[-1]["segment_ids"] = np.ones((rows, length), np.int32)
    sharding = batch_sharding(mesh)
    for batch in batches:
        local = process_slice(batch, jax.process_index(), jax.process_count())
        jax.block_until_ready(predict_fn(params, {k: global_batch_array(v, sharding) for k, v in local.items()}))


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
