"""Watching a run (issue 17): TensorBoard events with every logged scalar, a log without repeated steps
after a resume, W&B in offline mode, a jax.profiler window, and early stopping with patience."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from omnidistill.config import load_config
from omnidistill.train.early_stopping import EarlyStopping
from omnidistill.train.loop import train
from omnidistill.train.sinks import JsonlSink, TensorBoardSink, WandbSink
from tests.shared_runs import TRAINED_TINY


def read_events(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] from TensorBoard event files (TFRecord framing, CRCs checked)."""
    from tensorboardX.proto import event_pb2
    from tensorboardX.record_writer import masked_crc32c

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            header = data[pos : pos + 8]
            (length,) = struct.unpack("<Q", header)
            assert struct.unpack("<I", data[pos + 8 : pos + 12])[0] == masked_crc32c(header)
            payload = data[pos + 12 : pos + 12 + length]
            assert struct.unpack("<I", data[pos + 12 + length : pos + 16 + length])[0] == masked_crc32c(payload)
            pos += 16 + length
            event = event_pb2.Event.FromString(payload)
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tensorboard_sink_writes_every_finite_scalar(tmp_path):
    sink = TensorBoardSink(tmp_path / "tb")
    sink.write(5, {"loss": 1.5, "tokens_per_s": 1000.0, "lr_encoder": 2e-5, "grad_norm": float("nan")})
    sink.write(10, {"dev_mae": 0.8})
    sink.close()
    events = read_events(tmp_path / "tb")
    assert events["train/loss"] == [(5, 1.5)] and events["dev/mae"] == [(10, pytest.approx(0.8))]
    assert events["lr/encoder"][0][1] == pytest.approx(2e-5) and "train/grad_norm" not in events


def test_jsonl_log_drops_redone_steps_and_a_torn_line_on_resume(tmp_path):
    path = tmp_path / "train_log.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (2, 4, 6, 8)) + '{"step": 10, "lo')
    JsonlSink(path, resume_step=4).write(6, {"loss": 0.5})
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [2, 4, 6]


def test_early_stopping_counts_each_evaluation_once_across_a_resume(tmp_path):
    stop = EarlyStopping.load(tmp_path, "dev_pearson", 2, resume=False)
    assert not stop.update(2, {"dev_pearson": 0.3}) and not stop.update(4, {"dev_pearson": 0.2})
    again = EarlyStopping.load(tmp_path, "dev_pearson", 2, resume=True)  # killed after step 4's evaluation
    assert not again.update(4, {"dev_pearson": 0.2})  # re-done after the resume: not counted twice
    assert again.update(6, {"dev_pearson": 0.25}) and again.best_step == 2
    with pytest.raises(ValueError, match="early_stopping_metric"):
        EarlyStopping.load(tmp_path, "dev_loss", 2, resume=False)
    agreement = EarlyStopping.load(tmp_path / "pairs", "dev_pair_accuracy", 1, resume=False)  # higher is better
    assert not agreement.update(2, {"dev_pair_accuracy": 0.6}, write=False)
    assert not agreement.update(4, {"dev_pair_accuracy": 0.7}, write=False)
    assert agreement.update(6, {"dev_pair_accuracy": 0.65}, write=False) and agreement.best_step == 4


def test_training_stops_early_writes_tensorboard_and_a_profile(repo_root, tmp_path, monkeypatch):
    import jax

    from omnidistill.runs.checkpoint import RunCheckpoints

    # the trace starts and stops only with no checkpoint being written: the best of step 2 before
    # the start, the latest of step 4 (checkpoint.every_steps=4) before the stop after step 5
    calls, runs = [], []
    real = {"save": RunCheckpoints.save, "save_best": RunCheckpoints.save_best, "wait": RunCheckpoints.wait}
    profiler = {"start": jax.profiler.start_trace, "stop": jax.profiler.stop_trace}

    def recorded(name):
        def call(self, *args):
            runs.append(self)
            calls.append(name if name == "wait" else "save")
            return real[name](self, *args)

        return call

    def traced(name):
        def call(*args, **kwargs):
            calls.append((name, any(m.is_saving_in_progress() for ck in runs for m in (ck.latest, ck.best))))
            return profiler[name](*args, **kwargs)

        return call

    for name in real:
        monkeypatch.setattr(RunCheckpoints, name, recorded(name))
    for name in profiler:
        monkeypatch.setattr(jax.profiler, f"{name}_trace", traced(name))
    cfg = load_config(
        repo_root / "configs" / "tiny.yaml",
        [f"train.output_dir={tmp_path / 'run'}", "train.max_steps=40", "train.eval_every_steps=2", "train.log_every_steps=2",
         "data.length_buckets=[192]", "eval.length_step=192", "optim.lr=0.0", "optim.head_lr=0.0",
         "train.early_stopping_patience=2", "train.profile=[3,5]", "checkpoint.every_steps=4"],
    )  # fmt: skip
    summary = train(cfg)
    # with a zero learning rate no evaluation after the first improves: stop at the third (step 6)
    assert summary["steps"] == 6 and summary["early_stopping"]["stopped"] and summary["early_stopping"]["best_step"] == 2
    events = read_events(tmp_path / "run" / "tensorboard")
    assert [s for s, _ in events["dev/mae"]] == [2, 4, 6] and [s for s, _ in events["train/loss"]] == [2, 4, 6]
    logged = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    dev = [r["dev_mae"] for r in logged if "dev_mae" in r]
    assert np.allclose([v for _, v in events["dev/mae"]], dev)
    assert list((tmp_path / "run" / "profile").rglob("*.xplane.pb"))
    start, stop = calls.index(("start", False)), calls.index(("stop", False))
    assert calls[start - 1] == calls[stop - 1] == "wait" and "save" in calls[:start] and "save" in calls[start:stop]


def test_wandb_offline_run(repo_root, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = load_config(
        repo_root / "configs" / "tiny.yaml",
        # the session's shared run's shapes and schedule: its compiled steps serve this run too
        [f"train.output_dir={tmp_path / 'run'}", *TRAINED_TINY, "logging.wandb=omnidistill-test",
         "logging.wandb_mode=offline", "logging.tensorboard=false"],
    )  # fmt: skip
    train(cfg)
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_a_failed_training_run_is_finished_as_failed_in_wandb():
    finished = []
    sink = WandbSink.__new__(WandbSink)  # the run object alone: wandb.init is the offline test's
    sink.run = type("Run", (), {"finish": lambda self, exit_code=None: finished.append(exit_code)})()
    sink.close()
    sink.close(failed=True)
    assert finished == [0, 1]


def test_the_model_card_says_the_best_checkpoint_is_chosen_by_dev_mae_whatever_early_stopping_watches(repo_root):
    """The card said ``by dev_pearson`` for a run that stopped early on Pearson r, while the best
    checkpoint is always chosen by dev MAE (docs/training.md, "Early stopping")."""
    from omnidistill.config import load_config
    from omnidistill.export.card_metadata import CardInfo, DataSummary, training_summary

    data = DataSummary(train_items=10, dev_items=5, languages=("en",), teachers=())
    for overrides, said in [
        (["train.early_stopping_patience=2", "train.early_stopping_metric=dev_pearson"], "by dev MAE (early stopping on dev_pearson)."),
        ([], "best dev checkpoint at step 6, by dev MAE."),
    ]:
        cfg = load_config(repo_root / "configs" / "tiny.yaml", overrides)
        (schedule,) = [line for line in training_summary(cfg, 6, data, CardInfo(), None).splitlines() if "**Schedule:**" in line]
        assert schedule.endswith(said)
