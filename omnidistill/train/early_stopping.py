"""Early stopping on a dev metric with patience (as COMET does), resumable.

After each dev evaluation the chosen metric (``train.early_stopping_metric``: lower is better for
``dev_mae`` and ``dev_rmse``, higher for ``dev_pearson``, ``dev_acc1`` and ``dev_pair_accuracy``, the
agreement with ``data.dev_pairs``) is compared with the best so
far; after ``train.early_stopping_patience`` evaluations in a row without improvement, training stops.
The state lives in ``RUN/early_stopping.json``, written atomically after every evaluation and keyed by
step, so a resumed run continues the count, and an evaluation that a resume re-does is not counted twice.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from omnidistill.runs.run_dir import atomic_write_text

HIGHER_IS_BETTER = {"dev_mae": False, "dev_rmse": False, "dev_pearson": True, "dev_acc1": True, "dev_pair_accuracy": True}


@dataclasses.dataclass
class EarlyStopping:
    metric: str
    patience: int
    path: Path
    best: float = math.nan
    best_step: int = 0
    bad_evals: int = 0
    last_step: int = 0

    @classmethod
    def load(cls, run_dir: Path, metric: str, patience: int, resume: bool) -> EarlyStopping:
        if metric not in HIGHER_IS_BETTER:
            raise ValueError(f"train.early_stopping_metric={metric!r} is not one of {sorted(HIGHER_IS_BETTER)}")
        state = cls(metric, patience, run_dir / "early_stopping.json")
        if resume and state.path.is_file():
            saved = json.loads(state.path.read_text(encoding="utf-8"))
            if saved.get("metric") == metric:
                state.best, state.best_step = float(saved["best"]), int(saved["best_step"])
                state.bad_evals, state.last_step = int(saved["bad_evals"]), int(saved["last_step"])
        return state

    def improves(self, value: float) -> bool:
        if math.isnan(self.best):
            return not math.isnan(value)
        return value > self.best if HIGHER_IS_BETTER[self.metric] else value < self.best

    def update(self, step: int, metrics: dict[str, float], write: bool = True) -> bool:
        """Record the evaluation at ``step``; True when training should stop now."""
        if step > self.last_step:  # a step at or before the saved one was already counted before a resume
            value = float(metrics[self.metric])
            if self.improves(value):
                self.best, self.best_step, self.bad_evals = value, step, 0
            else:
                self.bad_evals += 1
            self.last_step = step
            if write:
                atomic_write_text(self.path, json.dumps(self.summary()))
        return self.patience > 0 and self.bad_evals >= self.patience

    def summary(self) -> dict:
        return {"metric": self.metric, "best": self.best, "best_step": self.best_step, "bad_evals": self.bad_evals,
                "last_step": self.last_step, "patience": self.patience}  # fmt: skip
