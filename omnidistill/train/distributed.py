"""Multi-process start-up: ``jax.distributed.initialize`` when the environment describes a cluster.

- explicit: ``JAX_COORDINATOR_ADDRESS`` (host:port), ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID`` (and
  optionally ``JAX_LOCAL_DEVICE_IDS``), as set by ``launch/gpu/*`` or by hand;
- auto-detected by JAX: TPU VM pod slices, SLURM (``SLURM_JOB_ID`` with several tasks), Kubernetes
  JobSets (xpk), Open MPI;
- ``OMNIDISTILL_DISTRIBUTED=0`` disables it, ``=1`` forces auto-detection.

Under SLURM, JAX makes each process see only GPU number ``SLURM_LOCALID`` (right for one task per GPU).
With one task per node (``launch/gpu/slurm.sbatch``) that would leave a node with one usable GPU, so
then every GPU of the node is passed as ``local_device_ids`` (:func:`slurm_local_device_ids`).

On CPU processes with a jaxlib whose cached programs hang in their cross-process collectives, the
persistent compilation cache is turned off for the run (:func:`avoid_cached_cpu_collectives`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping

import jax

log = logging.getLogger(__name__)
_AUTO_VARS = ("TPU_WORKER_HOSTNAMES", "MEGASCALE_COORDINATOR_ADDRESS", "OMPI_COMM_WORLD_SIZE", "JOBSET_NAME")


def _slurm_multi_task() -> bool:
    return int(os.environ.get("SLURM_NTASKS", os.environ.get("SLURM_NPROCS", "1")) or 1) > 1


def slurm_local_device_ids(env: Mapping[str, str] = os.environ) -> list[int] | None:
    """All GPUs of the node when SLURM runs one task per node; None otherwise (no SLURM, one task per
    GPU, an explicit ``JAX_LOCAL_DEVICE_IDS``, or a GPU count SLURM does not give)."""
    if "SLURM_JOB_ID" not in env or env.get("JAX_LOCAL_DEVICE_IDS"):
        return None
    nodes = int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or 1)
    tasks = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or 1)
    if tasks != nodes:
        return None
    gpus = env.get("SLURM_GPUS_ON_NODE")
    if not gpus and env.get("CUDA_VISIBLE_DEVICES"):
        gpus = str(len(env["CUDA_VISIBLE_DEVICES"].split(",")))
    return list(range(int(gpus))) if gpus and int(gpus) > 0 else None


CACHED_CPU_COLLECTIVES_HANG = (0, 12, 1)
"""The first jaxlib on which a CPU job of several processes hangs in its first collective across
processes (Gloo) when process 0 runs a program loaded from the persistent compilation cache and the
others compile it (on a CPU their cache keys differ from process 0's, so they always miss): every rank
enters the collective and none returns. Compiled afresh everywhere it runs, and cached on jaxlib 0.10.2
and 0.12.0.1 too. Reproduced with one ``psum`` over two processes of one device each: the first job (a
compile) ends, the next (a cache hit in process 0) hangs (docs/training.md, "Multi-host"). No later
jaxlib is known to be fixed, so every later one is treated alike."""


def jaxlib_version(text: str | None = None) -> tuple[int, int, int]:
    """The installed jaxlib's version (or ``text``) as three numbers: ``0.12.0.1`` -> ``(0, 12, 0)``,
    ``0.13.0rc1`` -> ``(0, 13, 0)``."""
    if text is None:
        from jaxlib import version

        text = version.__version__
    major, minor, patch = re.match(r"(\d+)\.(\d+)\.(\d+)", text).groups()
    return int(major), int(minor), int(patch)


def avoid_cached_cpu_collectives() -> bool:
    """Turn JAX's persistent compilation cache off in a multi-process CPU run on a jaxlib at or after
    :data:`CACHED_CPU_COLLECTIVES_HANG`, with one warning; returns whether it did. Call it after
    ``jax.distributed.initialize`` and before the first compile. GPU and TPU processes communicate
    through NCCL and ICI and keep the cache."""
    cache_on = jax.config.jax_enable_compilation_cache and jax.config.jax_compilation_cache_dir
    if jax.process_count() == 1 or jax.default_backend() != "cpu" or not cache_on:
        return False
    version = jaxlib_version()
    if version < CACHED_CPU_COLLECTIVES_HANG:
        return False
    jax.config.update("jax_enable_compilation_cache", False)
    log.warning(
        "compilation cache off for this run: jaxlib %s's CPU programs loaded from it hang in collectives across processes",
        ".".join(map(str, version)),
    )
    return True


def maybe_initialize_distributed() -> bool:
    """Initialise JAX's distributed runtime for multi-process runs; returns whether it did."""
    flag = os.environ.get("OMNIDISTILL_DISTRIBUTED")
    if flag == "0":
        return False
    if os.environ.get("JAX_COORDINATOR_ADDRESS"):
        local = os.environ.get("JAX_LOCAL_DEVICE_IDS")
        jax.distributed.initialize(
            coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
            process_id=int(os.environ["JAX_PROCESS_ID"]),
            local_device_ids=[int(i) for i in local.split(",")] if local else None,
        )
    elif flag == "1" or any(v in os.environ for v in _AUTO_VARS) or _slurm_multi_task():
        jax.distributed.initialize(local_device_ids=slurm_local_device_ids())
    else:
        return False
    log.info(
        "process %d of %d: %d local / %d global devices",
        jax.process_index(),
        jax.process_count(),
        jax.local_device_count(),
        jax.device_count(),
    )
    avoid_cached_cpu_collectives()
    return True
