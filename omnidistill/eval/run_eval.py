"""Evaluate a trained run directory on labelled files: report (JSON + Markdown) and predictions."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from omnidistill import strict_json
from omnidistill.data.level_dist import level_std
from omnidistill.data.own_fields import check_group_by, check_keep_fields, fields_to_read
from omnidistill.data.preference_file import read_preferences
from omnidistill.data.sources import read_records, refuse_duplicate_ids
from omnidistill.data.splits import check_split_files, load_split
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.compare import compare_judges, comparison_markdown, load_predictions
from omnidistill.eval.metrics import load_group_weights
from omnidistill.eval.plots import write_calibration_plot, write_plots
from omnidistill.eval.predict import checked_compiler_options
from omnidistill.eval.preferences import agreement_over
from omnidistill.eval.program import ScoringProgram
from omnidistill.eval.report import build_report, gold_arrays, mean_baseline, train_mean_labels, write_report
from omnidistill.eval.significance import differences_markdown, judge_differences
from omnidistill.eval.uncertainty import uncertainty_report
from omnidistill.runs.load import load_trained, scoring_dtype
from omnidistill.storage import files_at_hand

log = logging.getLogger(__name__)


def train_mean_baseline(cfg: Any, records: list, model_mae: float) -> dict | None:
    """The constant baseline (the run's training-label means) on ``records``; None without training data."""
    files = files_at_hand(cfg.data.train)
    if not files:
        return None
    train, _ = read_records(files, skip_invalid=True, keep=frozenset(cfg.data.keep_fields))
    try:
        return mean_baseline(records, train_mean_labels(train), model_mae)
    except ValueError as err:
        log.warning("%s", err)
        return None


def run_compiler_options(cfg: Any, compiler_options: Mapping[str, Any] | None) -> Any:
    """A trained run's ``eval.compiler_options`` with ``compiler_options`` (``--xla-option``) over them,
    checked by XLA (:func:`checked_compiler_options`)."""
    return checked_compiler_options({**cfg.eval.compiler_options, **(compiler_options or {})}, "eval.compiler_options")


def run_program(
    cfg: Any, graphdef: Any, params: Any, *, batch_size: int | None, batch_tokens: int | None, pack_length: int | None, options: Any
) -> ScoringProgram:
    """The scoring program of a trained run under its ``eval`` settings, with ``batch_size``,
    ``batch_tokens`` and ``pack_length`` over them where given (``batch_size`` alone: batches of items)."""
    tokens = (0 if batch_size else cfg.eval.batch_tokens) if batch_tokens is None else batch_tokens
    return ScoringProgram.build(
        graphdef,
        params,
        max_length=cfg.data.max_length,
        batch_size=batch_size or cfg.eval.batch_size,
        length_step=cfg.eval.length_step,
        pack_length=cfg.eval.pack_length if pack_length is None else pack_length,
        batch_tokens=tokens,
        compiler_options=options,
    )


def judge_scores(
    path: str | Path, records: list, *, compute_dtype: str | None = None, compiler_options: Mapping[str, Any] | None = None
) -> np.ndarray:
    """[N, 4] scores of one ``eval --compare`` judge on ``records``: read from a prediction file
    (:func:`load_predictions`), or, for a run directory, its best checkpoint scoring them here with its
    own tokenizer and input settings (its ``eval`` settings; ``compute_dtype`` and ``compiler_options``
    over them as for the evaluated run)."""
    folder = Path(path)
    if not folder.is_dir():
        return load_predictions(path, records)
    if not (folder / "config.yaml").is_file():
        raise ValueError(
            f"--compare {path}: a folder but not a run directory (no config.yaml); an exported or Hub model becomes one "
            f"with `omnidistill import {path} RUN_DIR`"
        )
    cfg, graphdef, params, tokenizer, _ = load_trained(folder, "best", compute_dtype)
    options = run_compiler_options(cfg, compiler_options)
    encoder = RecordEncoder.from_config(tokenizer, cfg.data)
    program = run_program(cfg, graphdef, params, batch_size=None, batch_tokens=None, pack_length=None, options=options)
    return program.predict(encoder.encode_inputs(records).ids, pad_id=encoder.pad_id)[0].astype(np.float64)


def evaluate_run(
    run_dir: str | Path,
    *,
    files: list[str] | None = None,
    split: str = "test",
    out_dir: str | Path | None = None,
    checkpoint: str = "best",
    batch_size: int | None = None,
    bootstrap_samples: int = 1000,
    null: str = "uniform",
    plots: bool = True,
    compare: dict[str, str] | None = None,
    lang_weights: str | None = None,
    skip_invalid: bool | None = None,
    usd_per_hour: float | None = None,
    pack_length: int | None = None,
    batch_tokens: int | None = None,
    compiler_options: Mapping[str, Any] | None = None,
    compute_dtype: str | None = None,
    keep_fields: Sequence[str] = (),
    group_by: Sequence[str] | None = None,
    pairs: str | Path | None = None,
) -> dict:
    """Score ``files`` (default: the run config's ``data.<split>``) and write ``<split>.json/.md`` reports,
    PNG plots, predictions, and with ``compare`` (name -> prediction file) a side-by-side judge table and
    every pair of judges' paired tests (``<split>_differences.json``, :mod:`~omnidistill.eval.significance`).
    ``skip_invalid`` (default: the run's ``data.skip_invalid``) skips malformed records and counts them;
    the report's ``meta`` has the skipped and truncated counts, and the time per 1,000 items (tokenization
    included, every length bucket compiled beforehand), with ``usd_per_hour`` also its price (the
    paper's Table 9 "Time" and "Cost" columns). ``pack_length`` (default: the run's ``eval.pack_length``)
    packs items into rows of that many tokens. Batches hold up to ``batch_tokens`` real tokens (default:
    the run's ``eval.batch_tokens``; an encoder that runs unpadded) unless ``batch_size`` is given,
    which makes them batches of that many items. ``compiler_options``: XLA options for the scoring
    program, over the run's ``eval.compiler_options``. ``compute_dtype``: ``float32`` or ``bfloat16``
    (default: the run's ``eval.compute_dtype``). ``keep_fields``: fields of the user's own the files
    carry, beside the run's ``data.keep_fields``, written into the predictions. ``group_by`` (default: the
    run's ``eval.group_by``): fields whose values get metrics of their own (``by_field``). ``pairs``: a
    teacher's pairwise preferences over the items (``label --pairwise``); the report's ``preferences``
    says how often the student orders each pair as the judges chose (:mod:`omnidistill.eval.preferences`)."""
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir else run_dir / "eval"
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} is a file: eval writes its reports into a folder")
    given_keep = check_keep_fields(keep_fields, "--keep-fields")  # before the model is loaded
    given_groups = None if group_by is None else check_group_by(group_by, "--group-by")
    preferences = read_preferences(pairs) if pairs else None
    cfg, graphdef, params, tokenizer, step = load_trained(run_dir, checkpoint, compute_dtype)
    dtype = scoring_dtype(cfg, compute_dtype)
    options = run_compiler_options(cfg, compiler_options)
    weights_file = lang_weights or cfg.eval.lang_weights  # read before scoring: a bad file costs no scoring pass
    weights = load_group_weights(weights_file) if weights_file else None
    if skip_invalid is not None:
        cfg.data.skip_invalid = skip_invalid
    keep = check_keep_fields(cfg.data.keep_fields, "data.keep_fields") | given_keep
    groups = check_group_by(cfg.eval.group_by, "eval.group_by") if given_groups is None else given_groups
    cfg.data.keep_fields = sorted(fields_to_read(keep, groups))
    if files:
        records, skipped = read_records(files, skip_invalid=cfg.data.skip_invalid, keep=frozenset(cfg.data.keep_fields))
    else:
        check_split_files(cfg.data, split, f"data.{split} of {run_dir / 'config.yaml'}", ": pass --data FILE")
        records, skipped = load_split(cfg.data, split)
        files = (
            list(getattr(cfg.data, split)) or [f"tfds:{cfg.data.tfds.name}/{split}"] if cfg.data.tfds else list(getattr(cfg.data, split))
        )
    if not records:
        raise ValueError(f"nothing to evaluate: pass --data or set data.{split} (or data.tfds) in the run config")
    joins = [  # joined to these items by id: a repeated id would pair the wrong items
        *(["eval --compare joins prediction files to them"] if compare else []),
        *(["eval --pairs joins the pairs to them"] if preferences is not None else []),
    ]
    if joins:  # one read of the files for both
        refuse_duplicate_ids([f for f in files if not str(f).startswith("tfds:")], "; ".join(joins))
    others = {  # read (or scored) before the evaluated run's scoring: a bad judge costs no pass
        name: judge_scores(path, records, compute_dtype=compute_dtype, compiler_options=compiler_options)
        for name, path in (compare or {}).items()
    }
    out_dir.mkdir(parents=True, exist_ok=True)  # before the scoring and the bootstrap: a folder that cannot be made fails now
    encoder = RecordEncoder.from_config(tokenizer, cfg.data)
    start = time.perf_counter()
    encoded = encoder.encode_inputs(records)  # tokenized once: the ids, the truncation count and the warm-up's lengths
    tokenize_seconds = time.perf_counter() - start
    truncated = encoded.truncated
    if truncated:
        log.warning(
            "%d of %d inputs exceed data.max_length=%d and are truncated (data.truncation=%s)",
            truncated,
            len(records),
            cfg.data.max_length,
            cfg.data.truncation,
        )
    program = run_program(cfg, graphdef, params, batch_size=batch_size, batch_tokens=batch_tokens, pack_length=pack_length, options=options)
    program.warm_up(encoded.full_lengths)
    start = time.perf_counter()
    pred, level_probs = program.predict(encoded.ids, pad_id=encoder.pad_id)
    seconds = tokenize_seconds + time.perf_counter() - start  # tokenization included, compilation (warm_up) not
    report = build_report(records, pred, bootstrap_samples=bootstrap_samples, null=null, lang_weights=weights, group_by=groups)
    baseline = train_mean_baseline(cfg, records, report["overall"]["mae_dims"])
    if baseline is not None:
        report["baseline"] = baseline
    if level_probs is not None:
        report["uncertainty"] = uncertainty_report(records, pred, level_probs)
    if weights_file:
        report["lang_mae_weights"] = str(weights_file)
    if preferences is not None:
        report["preferences"] = {"file": str(pairs), **agreement_over(preferences, records, pred)}
    report["meta"] = {
        "run_dir": str(run_dir),
        "checkpoint": checkpoint,
        "step": step,
        "files": list(files),
        "items": len(records),
        "skipped_records": skipped,
        "truncated_inputs": truncated,
        "device": jax.devices()[0].device_kind,
        "compute_dtype": dtype,
        "seconds_per_1000": 1000 * seconds / len(records),
    }
    if options:  # the time per 1,000 items depends on them
        report["meta"]["compiler_options"] = options
    if usd_per_hour is not None:
        report["meta"]["usd_per_hour"] = usd_per_hour
        report["meta"]["usd_per_1000"] = report["meta"]["seconds_per_1000"] / 3600 * usd_per_hour
    write_report(report, out_dir, name=split, title=f"{split} ({len(records)} items, step {step})")
    if plots:
        report["meta"]["plots"] = [str(p) for p in write_plots(records, pred, report, out_dir, prefix=split)]
        if level_probs is not None:
            report["meta"]["plots"].append(str(write_calibration_plot(report["uncertainty"], out_dir / f"{split}_calibration.png")))
    if compare:
        judges = {"student": pred, **others}
        comparison = compare_judges(records, judges, group_by=groups, preferences=preferences)
        differences = judge_differences(*gold_arrays(records), judges, samples=bootstrap_samples)
        (out_dir / f"{split}_compare.json").write_text(strict_json.dumps(comparison, indent=2), encoding="utf-8")
        (out_dir / f"{split}_differences.json").write_text(strict_json.dumps(differences, indent=2), encoding="utf-8")
        markdown = comparison_markdown(comparison) + "\n" + differences_markdown(differences)
        (out_dir / f"{split}_compare.md").write_text(markdown, encoding="utf-8")
        report["comparison"], report["judge_differences"] = comparison, differences
    std = None if level_probs is None else level_std(level_probs)
    with (out_dir / f"{split}_predictions.jsonl").open("w", encoding="utf-8") as f:
        for i, (rec, row) in enumerate(zip(records, pred, strict=True)):
            line = {"id": rec.id, "task": rec.task, "lang": rec.lang, **(rec.extra or {})}
            line["pred"] = dict(zip(DIMENSIONS, map(float, row), strict=True))
            if std is not None:
                line["uncertainty"] = dict(zip(DIMENSIONS, map(float, std[i]), strict=True))
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    return report
