"""The training loop: take a prepared run, step, log, evaluate on dev, checkpoint (see :func:`train`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
from tqdm import tqdm

from omnidistill import strict_json
from omnidistill.config import Config
from omnidistill.eval.predict import predict_ids
from omnidistill.eval.preferences import agreement_over
from omnidistill.eval.report import build_report, report_markdown
from omnidistill.runs.checkpoint import weights_to_evaluate
from omnidistill.runs.run_dir import TRAIN_SUMMARY, atomic_write_text
from omnidistill.train.early_stopping import EarlyStopping
from omnidistill.train.memory import device_peak_gb, per_device_bytes
from omnidistill.train.metering import WindowMeter
from omnidistill.train.preemption import PreemptionGuard
from omnidistill.train.profiling import ProfileWindow
from omnidistill.train.setup import TrainError, TrainRun, prepare_run
from omnidistill.train.sinks import MetricSink, build_sinks

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Cadence:
    """When the loop logs, evaluates and checkpoints: plain predicates of the step."""

    total_steps: int
    log_every: int
    eval_every: int
    checkpoint_every: int
    has_dev: bool

    @classmethod
    def of(cls, cfg: Config, run: TrainRun) -> Cadence:
        eval_every = cfg.train.eval_every_steps or run.epoch_steps
        return cls(run.total_steps, cfg.train.log_every_steps, eval_every, cfg.checkpoint.every_steps or eval_every, bool(run.dev_records))

    def log(self, step: int) -> bool:
        return step % self.log_every == 0 or step == self.total_steps

    def evaluate(self, step: int) -> bool:
        return self.has_dev and (step % self.eval_every == 0 or step == self.total_steps)

    def checkpoint(self, step: int, preempted: bool) -> bool:
        return step % self.checkpoint_every == 0 or step == self.total_steps or preempted


def dev_report(run: TrainRun, params: Any, epsilon: dict | None = None) -> dict:
    """The dev report of ``params`` (``epsilon``: tie thresholds to reuse instead of fitting)."""
    cfg = run.cfg
    batching = {"batch_size": cfg.eval.batch_size, "buckets": cfg.data.length_buckets}
    pred = predict_ids(run.predict_fn, params, run.dev_ids, run.mesh, pad_id=run.encoder.pad_id, **batching)
    report = build_report(run.dev_records, pred, epsilon=epsilon, lang_weights=run.lang_weights)
    if run.dev_pairs is not None:  # data.dev_pairs: as eval --pairs reports it
        report["preferences"] = {"file": cfg.data.dev_pairs, **agreement_over(run.dev_pairs, run.dev_records, pred)}
    return report


def dev_epsilon(run_dir: Path, report: dict | None = None) -> dict | None:
    """The dev set's pairwise-accuracy tie thresholds: fitted on the run's first dev evaluation, saved in
    ``dev_epsilon.json`` and reused by every later one (also after a resume), so each evaluation
    costs one exact count per dimension instead of a sweep over all pairs."""
    path = run_dir / "dev_epsilon.json"
    if report is None:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    eps = {dim: c["epsilon"] for dim, c in report["tie_calibration"].items()}
    if jax.process_index() == 0 and not path.is_file():
        atomic_write_text(path, json.dumps(eps))
    return eps


@dataclasses.dataclass
class BestCheckpoint:
    """The best dev MAE so far (``best_metrics.json``), and saving the parameters that beat it."""

    path: Path
    mae: float = math.inf

    @classmethod
    def load(cls, run_dir: Path, resume: bool) -> BestCheckpoint:
        path = run_dir / "best_metrics.json"
        return cls(path, json.loads(path.read_text())["dev_mae"] if resume and path.exists() else math.inf)

    def offer(self, run: TrainRun, step: int, params: Any, dev_mae: float) -> None:
        if dev_mae < self.mae:
            self.mae = dev_mae
            run.checkpoints.save_best(step, params, dev_mae)
            if jax.process_index() == 0:
                self.path.write_text(json.dumps({"step": step, "dev_mae": dev_mae}))


def evaluate_dev(run: TrainRun, params: Any, step: int, sink: MetricSink, bar: Any) -> tuple[dict, dict[str, float]]:
    """One dev evaluation: the report and its headline scalars (also logged and shown)."""
    report = dev_report(run, params, dev_epsilon(run.run_dir))
    dev_epsilon(run.run_dir, report)
    ov = report["overall"]
    fields = {"dev_mae": ov["mae_dims"], "dev_rmse": ov["rmse"], "dev_pearson": ov["pearson"], "dev_acc1": ov["acc1"]}
    agreement = ""
    if "preferences" in report:  # None when no judged pair has both scores: NaN, which never improves
        accuracy = report["preferences"]["overall"]["accuracy"]
        fields["dev_pair_accuracy"] = math.nan if accuracy is None else accuracy
        agreement = f" pairs {fields['dev_pair_accuracy']:.3f}"
    sink.write(step, fields)
    bar.write(f"step {step}: dev MAE {ov['mae_dims']:.4f} RMSE {ov['rmse']:.4f} r {ov['pearson']:.3f} Acc@±1 {ov['acc1']:.3f}{agreement}")
    return report, fields


def settle(pending: list, first_step: int, policy: str, meter: WindowMeter) -> int:
    """Fetch the pending step metrics into the meter; apply the non-finite policy. Returns skipped updates."""
    fetched = jax.device_get(pending)
    bad = [first_step + i for i, m in enumerate(fetched) if not m["finite"]]
    if bad and policy == "stop":
        raise TrainError(f"non-finite loss or gradient at step {bad[0]} (parameters were not updated); see train.nonfinite")
    if bad:
        log.warning("skipped %d non-finite update(s) at steps %s", len(bad), bad)
    meter.add_step_metrics(fetched)
    return len(bad)


@contextlib.contextmanager
def closed_at_end(run: TrainRun, sink: MetricSink, bar: tqdm, profile: ProfileWindow) -> Iterator[None]:
    """Close the sinks, progress bar, profile and the input's worker processes however training ends;
    W&B marks a run that raised as failed. An exception used to leave TensorBoard's writer to its
    exit hook, which on Python >= 3.12 cannot start the thread it needs at shutdown: a run failing
    before its first log line ended in a 15-line traceback after the CLI's one-line error."""
    failed = True
    try:
        yield
        failed = False
    finally:
        profile.close()
        bar.close()
        sink.close(failed)
        if hasattr(run.batches, "close"):  # stops grain worker processes
            run.batches.close()


def train(cfg: Config, *, resume: bool = False) -> dict[str, Any]:
    """Run training as configured; returns a summary (steps, best dev MAE, run directory)."""
    run = prepare_run(cfg, resume=resume)
    if jax.process_index() == 0:  # the run is training again: it is not finished until it ends
        (run.run_dir / TRAIN_SUMMARY).unlink(missing_ok=True)
    cadence = Cadence.of(cfg, run)
    log.info("training %d steps (%d per epoch, %d train / %d dev records, %d skipped) on mesh %s; train state %.3f GB per device",
             run.total_steps, run.epoch_steps, len(run.train_records), len(run.dev_records), run.skipped_records,
             dict(run.mesh.shape), per_device_bytes(run.state) / 1e9)  # fmt: skip
    sink = build_sinks(cfg, run.run_dir, run.start_step if resume else None)
    best = BestCheckpoint.load(run.run_dir, resume)
    stopper = EarlyStopping.load(run.run_dir, cfg.train.early_stopping_metric, cfg.train.early_stopping_patience, resume)
    profile = ProfileWindow(cfg.train.profile, run.run_dir / "profile", quiesce=run.checkpoints.wait)
    bar = tqdm(total=run.total_steps, initial=run.start_step, disable=jax.process_index() != 0, desc="train", dynamic_ncols=True)
    meter, pending, skipped, last_dev, preempted, stopped = WindowMeter(jax.process_count()), [], 0, None, False, False
    state, step = run.state, run.start_step
    first_line = run.data_scalars() if run.start_step == 0 else {}  # the run's input counts, logged once
    with (
        closed_at_end(run, sink, bar, profile),
        PreemptionGuard(every=cfg.train.preemption_check_every) as guard,
        run.checkpoints.finished_on_interrupt(),
    ):
        while step < cadence.total_steps:
            profile.before(step + 1)
            waited = time.perf_counter()
            local = run.next_batch(step)
            meter.add_batch(local, time.perf_counter() - waited)
            state, metrics = run.step_fn(state, run.global_batch(local))
            pending.append(metrics)
            step += 1
            bar.update(1)
            profile.after(step, metrics)
            preempted = guard.should_stop(step)
            at_log, at_eval, at_ckpt = cadence.log(step), cadence.evaluate(step), cadence.checkpoint(step, preempted)
            if at_log or at_eval or at_ckpt:
                skipped += settle(pending, step - len(pending) + 1, cfg.train.nonfinite, meter)
                pending = []
            if at_log:
                scalars = meter.scalars()
                bar.set_postfix(loss=f"{scalars['loss']:.4f}", tok_s=f"{scalars['tokens_per_s']:,.0f}")
                memory = {"device_peak_gb": peak} if (peak := device_peak_gb()) is not None else {}
                sink.write(step, {**scalars, **memory, "skipped_updates": skipped, **run.lr_scalars(step), **first_line})
                meter.reset()
                first_line = {}
            if at_eval:
                with meter.paused():
                    weights = weights_to_evaluate(state)  # the moving average with optim.ema_decay
                    last_dev, dev = evaluate_dev(run, weights, step, sink, bar)
                    best.offer(run, step, weights, dev["dev_mae"])
                    stopped = stopper.update(step, dev, write=jax.process_index() == 0)
            if at_ckpt or stopped:
                run.checkpoints.save(step, state, run.batches)
            if preempted or stopped:
                bar.write(f"preempted: checkpoint saved at step {step}; continue with --resume" if preempted else
                          f"early stopping: {stopper.bad_evals} evaluations without a better {stopper.metric}")  # fmt: skip
                break
    summary = finish(run, state, step, best, last_dev, preempted, skipped)
    if cfg.train.early_stopping_patience:
        summary["early_stopping"] = {**stopper.summary(), "stopped": stopped}
    if not preempted and jax.process_index() == 0:
        atomic_write_text(run.run_dir / TRAIN_SUMMARY, strict_json.dumps(summary, indent=2))
    return summary


def finish(run: TrainRun, state: Any, step: int, best: BestCheckpoint, last_dev: dict | None, preempted: bool, skipped: int) -> dict:
    """Settle checkpoints (the input workers are stopped by :func:`closed_at_end`), write the last dev
    report; the run's summary."""
    if not run.dev_records and not preempted:  # no dev set: the final parameters stand in for the best ones
        run.checkpoints.save_best(step, weights_to_evaluate(state), 0.0)
    run.checkpoints.wait()
    run.checkpoints.close()
    if last_dev is not None and jax.process_index() == 0:
        text = report_markdown(last_dev, f"Dev set at step {step}")
        (run.run_dir / "dev_report.md").write_text(text, encoding="utf-8")
        print(text)
    return {
        "steps": step,
        "data": run.data_counts,
        "best_dev_mae": best.mae if math.isfinite(best.mae) else None,
        "run_dir": str(run.run_dir),
        "preempted": preempted,
        "skipped_updates": skipped,
    }
