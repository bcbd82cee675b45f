"""Where training metrics go. Every sink takes ``write(step, scalars)``; the loop does not know which
sinks a run has. ``train_log.jsonl`` is always written; other sinks (TensorBoard, W&B) plug in here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import jax


class MetricSink(Protocol):
    def write(self, step: int, scalars: dict[str, float]) -> None:
        """Record ``scalars`` at ``step``."""

    def close(self) -> None:
        """Flush and release."""


class JsonlSink:
    """One JSON object per line (``{"step": ..., **scalars}``), written by process 0."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def write(self, step: int, scalars: dict[str, float]) -> None:
        if jax.process_index() == 0:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"step": step, **scalars}) + "\n")

    def close(self) -> None:
        pass


class Sinks:
    """Several sinks behind the one interface."""

    def __init__(self, sinks: list[MetricSink]):
        self.sinks = sinks

    def write(self, step: int, scalars: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.write(step, scalars)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
