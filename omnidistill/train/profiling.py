"""``train.profile: [first, last]``: a ``jax.profiler`` trace of training steps first..last (inclusive,
the step numbers of ``train_log.jsonl``) in ``RUN/profile/``, viewable in TensorBoard's profile tab or
Perfetto. Empty (the default) traces nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

log = logging.getLogger(__name__)


class ProfileWindow:
    """``quiesce``: called right before the trace starts and right before it stops. Training passes
    the wait for its checkpoints' background writes: starting or stopping a trace sets or clears a
    profile hook in every Python thread, and one full test run crashed (a segfault inside
    ``start_trace``) while orbax's save threads were starting and ending. With the writes finished
    first, no such threads come and go, and no checkpoint I/O runs into the traced steps."""

    def __init__(self, steps: list[int], out_dir: Path, quiesce: Callable[[], None] = lambda: None):
        if steps and (len(steps) != 2 or not 1 <= steps[0] <= steps[1]):
            raise ValueError(f"train.profile={steps!r} must be [first, last] step numbers with 1 <= first <= last")
        self.first, self.last = (steps[0], steps[1]) if steps else (0, -1)
        self.out_dir = out_dir
        self.quiesce = quiesce
        self.active = False

    def before(self, step: int) -> None:
        """Call before running step ``step`` (1-based)."""
        if step == self.first and not self.active:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.quiesce()
            jax.profiler.start_trace(str(self.out_dir))
            self.active = True

    def after(self, step: int, outputs: Any) -> None:
        """Call after step ``step`` was dispatched; waits for it before closing the trace."""
        if self.active and step >= self.last:
            jax.block_until_ready(outputs)
            self.close()
            log.info("profile of steps %d-%d written to %s", self.first, self.last, self.out_dir)

    def close(self) -> None:
        if self.active:
            self.quiesce()
            jax.profiler.stop_trace()
            self.active = False
