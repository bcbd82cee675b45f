"""Multi-process start-up: ``jax.distributed.initialize`` when the environment describes a cluster.

- explicit: ``JAX_COORDINATOR_ADDRESS`` (host:port), ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID`` (and
  optionally ``JAX_LOCAL_DEVICE_IDS``), as set by ``launch/gpu/*`` or by hand;
- auto-detected by JAX: TPU VM pod slices, SLURM (``SLURM_JOB_ID`` with several tasks), Kubernetes
  JobSets (xpk), Open MPI;
- ``OMNIDISTILL_DISTRIBUTED=0`` disables it, ``=1`` forces auto-detection.
"""

from __future__ import annotations

import logging
import os

import jax

log = logging.getLogger(__name__)
_AUTO_VARS = ("TPU_WORKER_HOSTNAMES", "MEGASCALE_COORDINATOR_ADDRESS", "OMPI_COMM_WORLD_SIZE", "JOBSET_NAME")


def _slurm_multi_task() -> bool:
    return int(os.environ.get("SLURM_NTASKS", os.environ.get("SLURM_NPROCS", "1")) or 1) > 1


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
        jax.distributed.initialize()
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
