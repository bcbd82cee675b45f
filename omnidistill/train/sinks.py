"""Where training metrics go. Every sink takes ``write(step, scalars)``; the loop does not know which
sinks a run has (:func:`build_sinks` reads ``logging.*``). Only process 0 writes.

- ``train_log.jsonl`` (always): one JSON object per line. On resume, lines of steps after the restored
  checkpoint (steps that are about to be re-done) and a torn last line are dropped first, so the log
  never repeats a step.
- TensorBoard (``logging.tensorboard``, default on): event files under ``RUN/tensorboard/`` written
  with tensorboardX (no TensorFlow); a resumed run writes a purge marker so TensorBoard discards the
  re-done steps of the earlier file.
- Weights & Biases (``logging.wandb``: the project name) when the ``wandb`` package is installed;
  ``logging.wandb_mode: offline`` writes the run locally (sync it later with ``wandb sync``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol

import jax

from omnidistill import strict_json
from omnidistill.runs.run_dir import atomic_write_text


class MetricSink(Protocol):
    def write(self, step: int, scalars: dict[str, float]) -> None:
        """Record ``scalars`` at ``step``."""

    def close(self, failed: bool = False) -> None:
        """Flush and release; ``failed``: training stopped on an exception."""


class JsonlSink:
    """One JSON object per line (``{"step": ..., **scalars}``)."""

    def __init__(self, path: str | Path, resume_step: int | None = None):
        self.path = Path(path)
        if resume_step is not None and self.path.exists() and jax.process_index() == 0:
            self.truncate_after(resume_step)

    def truncate_after(self, step: int) -> None:
        """Keep only complete lines of steps <= ``step`` (atomically)."""
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line torn by a kill
        atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def write(self, step: int, scalars: dict[str, float]) -> None:
        if jax.process_index() == 0:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(strict_json.dumps({"step": step, **scalars}) + "\n")

    def close(self, failed: bool = False) -> None:
        pass


def _numbers(scalars: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in scalars.items() if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


class TensorBoardSink:
    """Every finite scalar as a TensorBoard scalar, grouped as ``train/…``, ``dev/…`` and ``lr/…``."""

    def __init__(self, log_dir: str | Path, resume_step: int | None = None):
        from tensorboardX import SummaryWriter

        purge = resume_step + 1 if resume_step else None
        self.writer = SummaryWriter(str(log_dir), purge_step=purge, flush_secs=30)

    @staticmethod
    def tag(key: str) -> str:
        if key.startswith("dev_"):
            return "dev/" + key[4:]
        if key.startswith("lr_"):
            return "lr/" + key[3:]
        return "train/" + key

    def write(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in _numbers(scalars).items():
            self.writer.add_scalar(self.tag(key), value, step)

    def close(self, failed: bool = False) -> None:
        self.writer.close()


class WandbSink:
    """Weights & Biases, one run per training run (resumed under the same id)."""

    def __init__(self, project: str, run_dir: Path, config: dict, mode: str, resume: bool):
        try:
            import wandb
        except ImportError:
            raise ValueError("logging.wandb is set but the wandb package is not installed (pip install wandb)") from None
        run_id = "".join(c if c.isalnum() else "-" for c in run_dir.resolve().name)[:60]
        self.run = wandb.init(
            project=project, dir=str(run_dir), id=run_id, config=config, mode=mode, resume="allow" if resume else None, reinit=True
        )

    def write(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log({TensorBoardSink.tag(k): v for k, v in _numbers(scalars).items()}, step=step)

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)  # a run that raised is marked failed, as W&B's own hook would


class Sinks:
    """Several sinks behind the one interface."""

    def __init__(self, sinks: list[MetricSink]):
        self.sinks = sinks

    def write(self, step: int, scalars: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.write(step, scalars)

    def close(self, failed: bool = False) -> None:
        for sink in self.sinks:
            sink.close(failed)


def build_sinks(cfg: Any, run_dir: Path, resume_step: int | None) -> Sinks:
    """The sinks ``cfg.logging`` asks for; ``resume_step``: the restored step of a resumed run."""
    sinks: list[MetricSink] = [JsonlSink(run_dir / "train_log.jsonl", resume_step)]
    if jax.process_index() != 0:
        return Sinks(sinks)
    if cfg.logging.tensorboard:
        sinks.append(TensorBoardSink(run_dir / "tensorboard", resume_step))
    if cfg.logging.wandb:
        import dataclasses

        sinks.append(WandbSink(cfg.logging.wandb, run_dir, dataclasses.asdict(cfg), cfg.logging.wandb_mode, resume_step is not None))
    return Sinks(sinks)
