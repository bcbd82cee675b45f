"""Multi-process start-up: ``jax.distributed.initialize`` when the environment describes a cluster."""

from __future__ import annotations

import logging
import os

import jax

log = logging.getLogger(__name__)
_CLUSTER_VARS = ("JAX_COORDINATOR_ADDRESS", "SLURM_JOB_ID", "TPU_WORKER_HOSTNAMES", "MEGASCALE_COORDINATOR_ADDRESS")


def maybe_initialize_distributed() -> None:
    """Initialise JAX's distributed runtime for multi-process runs; a no-op for a single process.

    Set ``OMNIDISTILL_DISTRIBUTED=0`` to skip it, or ``=1`` to force it (auto-detection of TPU VMs,
    SLURM and explicit ``JAX_COORDINATOR_ADDRESS``/``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID`` is JAX's own).
    """
    flag = os.environ.get("OMNIDISTILL_DISTRIBUTED")
    if flag == "0":
        return
    if flag == "1" or any(v in os.environ for v in _CLUSTER_VARS):
        jax.distributed.initialize()
        log.info(
            "process %d of %d, %d local / %d global devices",
            jax.process_index(),
            jax.process_count(),
            jax.local_device_count(),
            jax.device_count(),
        )
