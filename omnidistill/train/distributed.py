"""Multi-process start-up: ``jax.distributed.initialize`` when the environment describes a cluster.

- explicit: ``JAX_COORDINATOR_ADDRESS`` (host:port), ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID`` (and
  optionally ``JAX_LOCAL_DEVICE_IDS``), as set by ``launch/gpu/*`` or by hand;
- auto-detected by JAX: TPU VM pod slices, SLURM (``SLURM_JOB_ID`` with several tasks), Kubernetes
  JobSets (xpk), Open MPI;
- ``OMNIDISTILL_DISTRIBUTED=0`` disables it, ``=1`` forces auto-detection.

Under SLURM, JAX makes each process see only GPU number ``SLURM_LOCALID`` (right for one task per GPU).
With one task per node (``launch/gpu/slurm.sbatch``) that would leave a node with one usable GPU, so
then every GPU of the node is passed as ``local_device_ids`` (:func:`slurm_local_device_ids`).
"""

from __future__ import annotations

import logging
import os
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
    return True
