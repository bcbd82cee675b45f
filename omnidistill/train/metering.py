"""What the training loop measures between two log lines: a small typed meter, no closures."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator

import numpy as np


@dataclasses.dataclass
class WindowMeter:
    """Counters of the current logging window.

    Every step's loss counts towards the window's mean, also the steps fetched early for an
    evaluation or a checkpoint, and time spent inside :meth:`paused` (dev evaluation) is left out
    of the rates.
    """

    processes: int = 1
    started: float = dataclasses.field(default_factory=time.perf_counter)
    paused_s: float = 0.0
    steps: int = 0
    tokens: int = 0
    padded: int = 0
    examples: int = 0
    wait_s: float = 0.0
    losses: list[float] = dataclasses.field(default_factory=list)
    pair_losses: list[float] = dataclasses.field(default_factory=list)
    pair_accuracies: list[float] = dataclasses.field(default_factory=list)
    grad_norm: float = float("nan")

    def add_batch(self, local: dict[str, np.ndarray], wait_s: float) -> None:
        """One step's local batch (counts scale by the process count: every process feeds as much)."""
        self.steps += 1
        self.wait_s += wait_s
        for key in ("attention_mask", "pair_attention_mask"):  # the preference pairs' candidates are tokens the step reads too
            if key in local:
                self.tokens += int(local[key].sum()) * self.processes
                self.padded += int(local[key].size) * self.processes
        self.examples += int(local["example_mask"].sum()) * self.processes

    def add_step_metrics(self, fetched: list[dict]) -> None:
        """Host copies of step metrics; non-finite steps were not applied and do not count."""
        self.losses += [float(m["loss"]) for m in fetched if m["finite"]]
        self.pair_losses += [float(m["pair_loss"]) for m in fetched if m["finite"] and "pair_loss" in m]
        self.pair_accuracies += [float(m["pair_accuracy"]) for m in fetched if m["finite"] and "pair_accuracy" in m]
        if fetched:
            self.grad_norm = float(fetched[-1]["grad_norm"])

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Leave the enclosed time (an evaluation, say) out of the window's rates."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.paused_s += time.perf_counter() - start

    def scalars(self) -> dict[str, float]:
        """The window as log scalars."""
        elapsed = max(time.perf_counter() - self.started - self.paused_s, 1e-9)
        pairs = (
            {"pair_loss": float(np.mean(self.pair_losses)), "pair_accuracy": float(np.mean(self.pair_accuracies))}
            if self.pair_losses
            else {}
        )
        return {
            **pairs,
            "loss": float(np.mean(self.losses)) if self.losses else float("nan"),
            "grad_norm": self.grad_norm,
            "tokens_per_s": self.tokens / elapsed,
            "examples_per_s": self.examples / elapsed,
            "padding_fraction": 1.0 - self.tokens / max(self.padded, 1),
            "input_wait_ms": 1e3 * self.wait_s / max(self.steps, 1),
        }

    def reset(self) -> None:
        fresh = WindowMeter(self.processes)
        self.__dict__.update(fresh.__dict__)
