"""The training loop: build everything from a :class:`Config`, train, evaluate on dev, checkpoint."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm import tqdm

from omnidistill.config import Config
from omnidistill.data.pipeline import PackSpec, packed_train_dataset, train_dataset, with_workers
from omnidistill.data.splits import load_split
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.eval.metrics import load_group_weights
from omnidistill.eval.predict import predict_records
from omnidistill.eval.report import build_report, report_markdown
from omnidistill.models.loader import load_model
from omnidistill.models.registry import get_family
from omnidistill.train.checkpoint import RunCheckpoints
from omnidistill.train.memory import device_peak_gb
from omnidistill.train.mesh import batch_sharding, build_mesh, global_batch_array, param_shardings, replicated
from omnidistill.train.optimizer import build_optimizer
from omnidistill.train.preemption import PreemptionGuard
from omnidistill.train.run_dir import atomic_write_text, check_same_model, save_run_metadata
from omnidistill.train.state import TrainState
from omnidistill.train.step import make_predict_fn, make_train_step

log = logging.getLogger(__name__)
BATCH_KEYS = ("input_ids", "attention_mask", "labels", "label_mask", "example_mask")
PACKED_BATCH_KEYS = (*BATCH_KEYS, "segment_ids")


class TrainError(ValueError):
    """The run cannot start as configured."""


def check_batching(cfg: Config, n_batch_shards: int, process_count: int) -> None:
    b, a = cfg.train.batch_size, cfg.train.grad_accum
    if a < 1 or b % a:
        raise TrainError(f"train.batch_size={b} must be divisible by train.grad_accum={a}")
    if (b // a) % n_batch_shards:
        raise TrainError(f"train.batch_size/grad_accum={b // a} must be divisible by mesh data x fsdp = {n_batch_shards}")
    if b % process_count:
        raise TrainError(f"train.batch_size={b} must be divisible by the number of processes ({process_count})")


def mean_example_tokens(records: list, encoder: RecordEncoder, seed: int, sample: int = 2048) -> float:
    """Mean token count of the training inputs, from a seeded sample of at most ``sample`` records."""
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(records), size=min(sample, len(records)), replace=False)
    return float(np.mean([len(encoder.token_ids(records[int(i)])) for i in picks]))


def steps_per_epoch(cfg: Config, records: list, encoder: RecordEncoder) -> int:
    """Optimizer steps per pass over the training records.

    Packed rows: the rows that a perfect packing of the epoch's tokens would fill (at least
    records / ``pack_max_segments``), so a packed "epoch" covers slightly fewer examples than a pass.
    """
    batch = cfg.train.batch_size
    if cfg.data.pack_length <= 0:
        return max(1, len(records) // batch)
    tokens = len(records) * mean_example_tokens(records, encoder, cfg.train.seed)
    rows = max(tokens / cfg.data.pack_length, len(records) / cfg.data.pack_max_segments)
    return max(1, math.ceil(rows / batch))


def training_batches(cfg: Config, records: list, encoder: RecordEncoder) -> Any:
    """The endless, resumable iterator of this process's training batches (plain or packed)."""
    read = grain.ReadOptions(num_threads=cfg.data.read_threads, prefetch_buffer_size=cfg.data.prefetch_buffer)
    where = dict(process_index=jax.process_index(), process_count=jax.process_count())
    if cfg.data.pack_length > 0:
        pack = PackSpec(cfg.data.pack_length, cfg.data.pack_max_segments, cfg.data.pack_bins)
        try:
            ds = packed_train_dataset(
                records, encoder, global_batch=cfg.train.batch_size, seed=cfg.train.seed, pack=pack, read_options=read, **where
            )
        except ValueError as err:
            raise TrainError(str(err)) from None
    else:
        ds = train_dataset(
            records, encoder, global_batch=cfg.train.batch_size, seed=cfg.train.seed, buckets=cfg.data.length_buckets, **where
        ).to_iter_dataset(read)
    return iter(with_workers(ds, cfg.data.workers))


def init_state(params: Any, tx: Any, seed: int, mesh: Any, rules: Any) -> TrainState:
    """Sharded train state: parameters by rule, optimizer state following its parameters."""
    params = jax.device_put(params, param_shardings(params, mesh, rules))
    rep = replicated(mesh)
    # Moments follow their parameter's sharding; scalars (step counts) are replicated over the mesh.
    opt_state = jax.jit(tx.init)(params)
    opt_state = jax.tree.map(lambda x: x if x.sharding.is_equivalent_to(_on_mesh(x, mesh), x.ndim) else jax.device_put(x, rep), opt_state)
    return TrainState(
        step=jax.device_put(jnp.int32(0), rep),
        params=params,
        opt_state=opt_state,
        rng=jax.device_put(jax.random.PRNGKey(seed), rep),
    )


def predict_and_report(
    predict_fn: Any, params: Any, records: list, encoder: RecordEncoder, mesh: Any, cfg: Config, epsilon: dict | None = None
) -> dict:
    """Dev/test report of the current parameters (``epsilon``: tie thresholds to reuse instead of fitting)."""
    pred = predict_records(predict_fn, params, records, encoder, mesh, batch_size=cfg.eval.batch_size, buckets=cfg.data.length_buckets)
    weights = load_group_weights(cfg.eval.lang_weights) if cfg.eval.lang_weights else None
    return build_report(records, pred, epsilon=epsilon, lang_weights=weights)


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


def _on_mesh(x: jax.Array, mesh: Any) -> Any:
    spec = getattr(x.sharding, "spec", None)
    return jax.sharding.NamedSharding(mesh, spec if spec is not None else jax.sharding.PartitionSpec())


def _log_line(path: Path, record: dict) -> None:
    if jax.process_index() == 0:
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def train(cfg: Config, *, resume: bool = False) -> dict[str, Any]:
    """Run training as configured; returns a summary (steps, best dev MAE, run directory)."""
    run_dir = Path(cfg.train.output_dir)
    mesh = build_mesh(cfg.mesh)
    n_shards = mesh.shape["data"] * mesh.shape["fsdp"]
    check_batching(cfg, n_shards, jax.process_count())

    loaded = load_model(cfg.model, compute_dtype=cfg.train.compute_dtype, seed=cfg.train.seed)
    family = get_family(cfg.model.family)
    encoder = RecordEncoder(loaded.tokenizer, cfg.data.max_length)
    if not cfg.data.train and cfg.data.tfds is None:
        raise TrainError("data.train names no file (or set data.tfds)")
    train_records, skipped = load_split(cfg.data, "train")
    dev_records = load_split(cfg.data, "dev")[0]
    epoch_steps = steps_per_epoch(cfg, train_records, encoder)
    total_steps = cfg.train.max_steps or max(1, math.ceil(cfg.train.epochs * epoch_steps))
    eval_every = cfg.train.eval_every_steps or epoch_steps
    ckpt_every = cfg.checkpoint.every_steps or eval_every

    graphdef, params_state = nnx.split(loaded.model, nnx.Param)
    params = params_state.to_pure_dict()
    tx, schedules = build_optimizer(cfg.optim, params, total_steps)
    state = init_state(params, tx, cfg.train.seed, mesh, family.sharding_rules)
    state_shardings = jax.tree.map(lambda x: x.sharding, state)
    b_sharding = batch_sharding(mesh)
    dropout_on = (cfg.model.dropout if cfg.model.dropout is not None else getattr(loaded.model.arch, "hidden_dropout_prob", 0.0)) > 0
    step_fn = jax.jit(
        make_train_step(graphdef, tx, loss_cfg=cfg.loss, grad_accum=cfg.train.grad_accum, dropout=dropout_on),
        in_shardings=(state_shardings, b_sharding),
        out_shardings=(state_shardings, replicated(mesh)),
        donate_argnums=0,
    )
    predict_fn = jax.jit(make_predict_fn(graphdef))

    data_iter = training_batches(cfg, train_records, encoder)
    batch_keys = PACKED_BATCH_KEYS if cfg.data.pack_length > 0 else BATCH_KEYS
    ckpts = RunCheckpoints(run_dir, keep=cfg.checkpoint.keep)
    start = 0
    if ckpts.latest_step() is not None:
        if not resume:
            raise TrainError(f"{run_dir} already has checkpoints: pass --resume to continue, or set train.output_dir to a new directory")
        check_same_model(run_dir, cfg, loaded.hf_config)
        state, start = ckpts.restore(state, data_iter)
        log.info("resumed from step %d", start)
    if jax.process_index() == 0:
        save_run_metadata(run_dir, cfg, loaded.hf_config, loaded.tokenizer)
    log_path = run_dir / "train_log.jsonl"
    log.info(
        "training %d steps (%d per epoch, %d train / %d dev records, %d skipped) on mesh %s",
        total_steps,
        epoch_steps,
        len(train_records),
        len(dev_records),
        skipped,
        dict(mesh.shape),
    )

    best_file = run_dir / "best_metrics.json"
    best_mae = json.loads(best_file.read_text())["dev_mae"] if resume and best_file.exists() else float("inf")
    bar = tqdm(total=total_steps, initial=start, disable=jax.process_index() != 0, desc="train", dynamic_ncols=True)
    window = {"tokens": 0, "padded": 0, "examples": 0, "wait": 0.0, "steps": 0, "start": time.perf_counter(), "pending": []}
    skipped_updates = 0
    last_dev: dict[str, Any] | None = None
    preempted = False
    step = start

    def flush(log_now: bool) -> None:
        """Fetch pending step metrics: apply the non-finite policy, then log."""
        nonlocal skipped_updates
        fetched = jax.device_get(window["pending"])
        bad = [start_step + i + 1 for i, m in enumerate(fetched) if not m["finite"]]
        if bad:
            if cfg.train.nonfinite == "stop":
                raise TrainError(f"non-finite loss or gradient at step {bad[0]} (parameters were not updated); see train.nonfinite")
            skipped_updates += len(bad)
            log.warning("skipped %d non-finite update(s) at steps %s", len(bad), bad)
        if log_now and fetched:
            elapsed = time.perf_counter() - window["start"]
            finite = [m for m in fetched if m["finite"]]
            loss = float(np.mean([m["loss"] for m in finite])) if finite else float("nan")
            rate = window["tokens"] / max(elapsed, 1e-9)
            lrs = {f"lr_{k}": float(f(step)) for k, f in schedules.items()}
            bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{rate:,.0f}")
            record = {"step": step, "loss": loss, "grad_norm": float(fetched[-1]["grad_norm"]), "tokens_per_s": rate}
            pipeline = {
                "examples_per_s": window["examples"] / max(elapsed, 1e-9),
                "padding_fraction": 1.0 - window["tokens"] / max(window["padded"], 1),
                "input_wait_ms": 1e3 * window["wait"] / max(window["steps"], 1),
            }
            memory = {"device_peak_gb": peak} if (peak := device_peak_gb()) is not None else {}
            _log_line(log_path, {**record, **pipeline, **memory, "skipped_updates": skipped_updates, **lrs})
            window.update(tokens=0, padded=0, examples=0, wait=0.0, steps=0, start=time.perf_counter())
        window["pending"] = []

    with PreemptionGuard() as guard:
        while step < total_steps:
            start_step = step - len(window["pending"])
            wait_start = time.perf_counter()
            local = next(data_iter)
            window["wait"] += time.perf_counter() - wait_start
            window["steps"] += 1
            window["tokens"] += int(local["attention_mask"].sum()) * jax.process_count()
            window["padded"] += int(local["attention_mask"].size) * jax.process_count()
            window["examples"] += int(local["example_mask"].sum()) * jax.process_count()
            gbatch = {k: global_batch_array(local[k], b_sharding) for k in batch_keys}
            state, metrics = step_fn(state, gbatch)
            window["pending"].append(metrics)
            step += 1
            bar.update(1)
            preempted = guard.should_stop(step)
            at_log = step % cfg.train.log_every_steps == 0 or step == total_steps
            at_eval = bool(dev_records) and (step % eval_every == 0 or step == total_steps)
            at_ckpt = step % ckpt_every == 0 or step == total_steps or preempted
            if at_log or at_eval or at_ckpt:
                flush(log_now=at_log)
            if at_eval:
                report = predict_and_report(predict_fn, state.params, dev_records, encoder, mesh, cfg, dev_epsilon(run_dir))
                dev_epsilon(run_dir, report)
                last_dev = report
                ov = report["overall"]
                dev_mae = ov["mae_dims"]
                dev_fields = {"dev_mae": dev_mae, "dev_rmse": ov["rmse"], "dev_pearson": ov["pearson"], "dev_acc1": ov["acc1"]}
                _log_line(log_path, {"step": step, **dev_fields})
                bar.write(f"step {step}: dev MAE {dev_mae:.4f} RMSE {ov['rmse']:.4f} r {ov['pearson']:.3f} Acc@±1 {ov['acc1']:.3f}")
                if dev_mae < best_mae:
                    best_mae = dev_mae
                    ckpts.save_best(step, state.params, dev_mae)
                    if jax.process_index() == 0:
                        best_file.write_text(json.dumps({"step": step, "dev_mae": dev_mae}))
            if at_ckpt:
                ckpts.save(step, state, data_iter)
            if preempted:
                bar.write(f"preempted: checkpoint saved at step {step}; continue with --resume")
                break
    bar.close()
    if hasattr(data_iter, "close"):  # stops grain worker processes
        data_iter.close()
    if not dev_records and not preempted:  # no dev set: the final parameters stand in for the best ones
        ckpts.save_best(step, state.params, 0.0)
    ckpts.wait()
    ckpts.close()
    summary = {
        "steps": step,
        "best_dev_mae": best_mae if math.isfinite(best_mae) else None,
        "run_dir": str(run_dir),
        "preempted": preempted,
        "skipped_updates": skipped_updates,
    }
    if last_dev is not None and jax.process_index() == 0:
        (run_dir / "dev_report.md").write_text(report_markdown(last_dev, f"Dev set at step {step}"), encoding="utf-8")
        print(report_markdown(last_dev, f"Dev set at step {step}"))
    return summary
