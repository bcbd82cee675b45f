"""Preemption: SIGTERM asks the loop to checkpoint at the next step boundary and exit cleanly.

Single process: a signal handler sets a flag. Multi-process: JAX's coordination service propagates the
notice and ``multihost_utils.reached_preemption_sync_point`` (cheap, called every step) makes every
process stop at the same step; a notice that only this process's signal handler saw is shared through
an all-gather of the flags, done every ``train.preemption_check_every`` steps (the same steps on every
process, so the collective lines up) rather than every step.
"""

from __future__ import annotations

import logging
import signal
import threading

import jax
import numpy as np
from jax.experimental import multihost_utils

log = logging.getLogger(__name__)


class PreemptionGuard:
    """Context manager: ``should_stop(step)`` is True once a stop was requested (on any process)."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM,), every: int = 10):
        if every < 1:
            raise ValueError(f"train.preemption_check_every={every} must be at least 1")
        self.signals = signals
        self.every = every
        self.requested = False
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if not self.requested:
            log.warning("received signal %d: checkpointing at the next step boundary, then exiting", signum)
        self.requested = True

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def should_stop(self, step: int) -> bool:
        if jax.process_count() == 1:
            return self.requested
        try:
            if multihost_utils.reached_preemption_sync_point(step):
                return True
        except RuntimeError:  # no preemption sync manager in this runtime
            pass
        return step % self.every == 0 and self._any_process_requested()

    def _any_process_requested(self) -> bool:
        flags = multihost_utils.process_allgather(np.array([self.requested], np.int32))
        return bool(np.asarray(flags).any())
