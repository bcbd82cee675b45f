"""The shipped quick start visibly learns: configs/tiny.yaml, exactly as README command 1 trains it (its
own process, XLA's default compile level; on the suite's 8 simulated CPU devices, which trained it
faster than one device on 2 cores: 72 s against 90 s), then evaluated by its `eval` command (in this
process), ends with a best dev MAE at least 10% below predicting the training labels' mean, and
Pearson r >= 0.5.

The baseline and Pearson r are recomputed here from the files and the saved predictions with plain
Python and numpy, not through omnidistill's report code."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from omnidistill.cli import main
from tests.xla_env import child_env

DIMS = ("informativeness", "clarity", "plausibility", "faithfulness")


def _labels(path):
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows, np.array([[np.nan if r["labels"].get(d) is None else r["labels"][d] for d in DIMS] for r in rows])


@pytest.mark.slow
def test_the_tiny_default_beats_the_mean_baseline_clearly(tmp_path, repo_root, monkeypatch):
    run = tmp_path / "tiny"
    # from the repository root (the config's relative paths), as command 1 runs it
    done = subprocess.run(
        [sys.executable, "-m", "omnidistill", "train", "configs/tiny.yaml", f"train.output_dir={run}"],
        cwd=repo_root,
        env=child_env(8, fast_compile=False),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # command 1's `omnidistill eval`, in this process (its imports are the suite's; a few forward passes)
    monkeypatch.chdir(repo_root)
    assert main(["eval", str(run), "--split", "dev", "--no-plots"]) == 0

    _, train = _labels(repo_root / "data" / "sample" / "train.jsonl")
    dev_rows, dev = _labels(repo_root / "data" / "sample" / "dev.jsonl")
    baseline = float(np.mean(np.abs(dev - np.nanmean(train, axis=0))))
    preds = {p["id"]: p["pred"] for p in map(json.loads, (run / "eval" / "dev_predictions.jsonl").read_text().splitlines())}
    pred = np.array([[preds[r["id"]][d] for d in DIMS] for r in dev_rows])
    mae = float(np.mean(np.abs(pred - dev)))
    pearson = float(np.corrcoef(pred.ravel(), dev.ravel())[0, 1])  # pooled over all cells, as the report's r
    assert mae <= 0.9 * baseline, (mae, baseline)
    assert pearson >= 0.5, pearson
    assert json.loads((run / "best_metrics.json").read_text())["dev_mae"] == pytest.approx(mae, abs=1e-4)
    finished = json.loads((run / "train_summary.json").read_text())  # the run finished: sweep --resume keeps it
    assert finished["best_dev_mae"] == pytest.approx(mae, abs=1e-4) and not finished["preempted"]
