"""What a run directory holds besides checkpoints: resolved config, model description, tokenizer."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from omnidistill.config import Config, dump_config, load_config

TRAIN_SUMMARY = "train_summary.json"
"""Written when training ends without preemption (finished or stopped early), removed when it starts."""
INPUT_SETTINGS = ("input_format", "layout", "truncation")
"""The ``data`` fields that decide a model's token ids: a run keeps them (resume), and an init warns on change."""
ORDER_SETTINGS = (
    ("train", "seed"),
    ("train", "batch_size"),
    ("data", "workers"),  # each of N worker processes builds every N-th batch
    ("data", "pack_length"),
    ("data", "pack_max_segments"),
    ("data", "pack_bins"),
    ("data", "pairs"),
    ("train", "pair_batch_size"),
)
"""What fixes the sequence of training batches: the saved data iterator's position means the same
batches only if these, and the number of training examples, are the ones the run started with."""
TRAIN_DATA = "train_data.json"
"""The number of training examples of the run's latest start (checked on resume)."""
IMPORTED = "imported.json"
"""What ``omnidistill import`` made the run from: source, family, and the tensors left at random initialisation."""


def is_run_directory(path: str | Path | None) -> bool:
    """Whether ``path`` holds an omnidistill run (``config.yaml`` and ``model.json``)."""
    return bool(path) and (Path(str(path)) / "model.json").is_file() and (Path(str(path)) / "config.yaml").is_file()


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: readers see all of it or nothing."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_train_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """The summary of a run's finished training, or None while it has not finished (or never started)."""
    path = Path(run_dir) / TRAIN_SUMMARY
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def save_run_metadata(run_dir: str | Path, cfg: Config, hf_config: dict[str, Any], tokenizer: Any) -> None:
    """Write ``config.yaml``, ``model.json`` and ``tokenizer/`` so that eval/export need only the run dir."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, run_dir / "config.yaml")
    (run_dir / "model.json").write_text(json.dumps({"family": cfg.model.family, "hf_config": hf_config}, indent=2), encoding="utf-8")
    tokenizer.save_pretrained(run_dir / "tokenizer")


def write_import_record(run_dir: str | Path, source: str, family: str, random_init: list[str]) -> None:
    """Record what an imported run was made from (``imported.json``)."""
    record = {"source": source, "family": family, "random_init": random_init}
    atomic_write_text(Path(run_dir) / IMPORTED, json.dumps(record, indent=2))


def untrained_head(run_dir: str | Path) -> list[str]:
    """The tensors of a run's parameters that ``omnidistill import`` left at random initialisation (a
    backbone's head; its run is never trained in place, so they stay so); empty for any other run."""
    path = Path(run_dir) / IMPORTED
    return list(json.loads(path.read_text(encoding="utf-8")).get("random_init", [])) if path.is_file() else []


def load_run_metadata(run_dir: str | Path) -> tuple[Config, dict[str, Any], Path]:
    """(config, HF-style model config, tokenizer folder) of a run directory."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise FileNotFoundError(
            f"{run_dir}: no such folder (from {Path.cwd()}); for a model on the Hugging Face Hub, "
            f"`omnidistill import {run_dir} RUN_DIR` makes a run of it"
        )
    for name in ("config.yaml", "model.json", "tokenizer"):
        if not (run_dir / name).exists():
            hint = ""
            if (run_dir / "config.json").is_file():  # an export, or a checkpoint from the Hub
                hint = f"; it is a Hugging Face model folder: `omnidistill import {run_dir} RUN_DIR` makes a run of it"
            raise FileNotFoundError(f"{run_dir}: not an omnidistill run directory (missing {name}){hint}")
    cfg = load_config(run_dir / "config.yaml")
    model = json.loads((run_dir / "model.json").read_text(encoding="utf-8"))
    return cfg, model["hf_config"], run_dir / "tokenizer"


def setting_differences(run_dir: str | Path, cfg: Config, settings: tuple[tuple[str, str], ...]) -> list[str]:
    """``section.field: checkpoint A != config B`` for each of ``settings`` where the run's saved
    ``config.yaml`` differs from ``cfg`` (none without a saved config)."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        return []
    saved = load_config(path)
    diffs = []
    for section, field in settings:
        a, b = getattr(getattr(saved, section), field), getattr(getattr(cfg, section), field)
        if a != b:
            diffs.append(f"{section}.{field}: checkpoint {a!r} != config {b!r}")
    return diffs


def check_same_batches(run_dir: str | Path, cfg: Config, examples: int, *, pairs: int | None = None) -> None:
    """Refuse to resume where the saved data iterator would continue another sequence of batches:
    a changed seed, batch size or packing, or a training split with another number of examples (a
    regenerated file, another split). The resumed run would no longer be the run it continues, and
    nothing would say so. The count of the run's start is in ``TRAIN_DATA`` (:func:`write_train_data`)."""
    run_dir = Path(run_dir)
    diffs = setting_differences(run_dir, cfg, ORDER_SETTINGS)
    saved = json.loads((run_dir / TRAIN_DATA).read_text(encoding="utf-8")) if (run_dir / TRAIN_DATA).exists() else {}
    if saved.get("examples", examples) != examples:
        diffs.append(f"training examples: {saved['examples']} when the run started, {examples} now")
    if pairs is not None and saved.get("pairs", pairs) != pairs:
        diffs.append(f"judged pairs (data.pairs): {saved['pairs']} when the run started, {pairs} now")
    if diffs:
        raise ValueError(
            f"{run_dir}: resuming would not continue the same sequence of training batches: "
            + "; ".join(diffs)
            + " (restore them, or start a new run in another train.output_dir)"
        )


def changed_optimizer(run_dir: str | Path, cfg: Config) -> str:
    """Why a run's saved optimizer state may not fit ``cfg``'s, with the advice: the ``optim`` settings
    that differ from the run's saved ``config.yaml`` (they shape the state: ``ema_decay``, ``grad_clip``,
    the parameter groups and their learning rates)."""
    diffs = setting_differences(run_dir, cfg, tuple(("optim", f.name) for f in dataclasses.fields(cfg.optim)))
    advice = "resume with the settings the run was trained with, or start a new run in another train.output_dir"
    if not diffs:
        return f"no optim setting differs from the run's config.yaml (trained by another version of omnidistill?): {advice}"
    return f"{'; '.join(diffs)}: {advice}"


def write_train_data(run_dir: str | Path, examples: int, *, pairs: int | None = None) -> None:
    """Record the number of training examples (and judged pairs) of this start, for the next resume's check."""
    counts = {"examples": examples, **({"pairs": pairs} if pairs is not None else {})}
    atomic_write_text(Path(run_dir) / TRAIN_DATA, json.dumps(counts))


def check_same_model(run_dir: str | Path, cfg: Config, hf_config: dict[str, Any]) -> None:
    """Refuse to resume a run directory written for a different model; the message names what differs."""
    path = Path(run_dir) / "model.json"
    if not path.exists():
        return
    saved = json.loads(path.read_text(encoding="utf-8"))
    diffs = []
    if saved.get("family") != cfg.model.family:
        diffs.append(f"family {saved.get('family')!r} != {cfg.model.family!r}")
    else:  # imported here: the label command imports this module and should not load jax and the ports
        from omnidistill.models.config_fields import model_differences
        from omnidistill.models.registry import get_family

        diffs += model_differences(get_family(cfg.model.family).config_from_hf, saved.get("hf_config", {}), hf_config)
    model_settings = (("model", "pooling"), ("model", "head"), ("model", "scan_layers"), *(("data", f) for f in INPUT_SETTINGS))
    diffs += setting_differences(run_dir, cfg, model_settings)
    if diffs:
        raise ValueError(f"{run_dir} holds checkpoints of a different model: " + "; ".join(diffs))
