"""Ablation sweeps: a grid of named override sets trained on the same data and seed, one table.

A sweep file::

    base: configs/tiny.yaml          # relative to the sweep file's directory or the working directory
    output_dir: runs/ablations/heads
    overrides: [train.epochs=4]      # applied to every run
    runs:
      linear_sigmoid: [model.head=linear_sigmoid]
      ordinal: [model.head=ordinal]

Each run trains into ``output_dir/<name>`` and is scored on dev with its best checkpoint; the table
(``summary.md``, ``summary.json``) lists dev MAE (mean over dimensions), RMSE, Pearson, Acc@±1 and
wall time per run, and for heads with a level distribution the NLL of the dev labels and the Spearman
correlation of the predicted std with the absolute error (:mod:`omnidistill.eval.uncertainty`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from omnidistill.config import ConfigError, load_config


def load_sweep(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: sweep file not found")
    spec = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    unknown = set(spec) - {"base", "output_dir", "overrides", "runs"}
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))} (valid: base, output_dir, overrides, runs)")
    if not isinstance(spec.get("runs"), dict) or not spec["runs"]:
        raise ConfigError(f"{path}: runs must map run names to lists of overrides")
    for name, overrides in spec["runs"].items():
        if not isinstance(overrides, list):
            raise ConfigError(f"{path}: runs.{name} must be a list of key=value overrides")
    base = Path(spec.get("base", ""))
    if not base.is_file() and (path.parent / base).is_file():
        base = path.parent / base
    spec["base"] = base
    return spec


def run_sweep(
    path: str | Path,
    extra_overrides: list[str] | tuple[str, ...] = (),
    output_dir: str | Path | None = None,
    only: list[str] | tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Train and compare every run of a sweep file (or the runs named in ``only``, in the file's
    order); returns one row per run. Every run's config is checked before the first one trains."""
    from omnidistill.eval.run_eval import evaluate_run
    from omnidistill.train.loop import train

    spec = load_sweep(path)
    unknown = [name for name in only if name not in spec["runs"]]
    if unknown:
        raise ConfigError(f"{path}: no run named {', '.join(unknown)} (runs: {', '.join(spec['runs'])})")
    out = Path(output_dir or spec.get("output_dir", "runs/sweep"))
    common = [*spec.get("overrides", []), *extra_overrides]
    configs = {name: load_config(spec["base"], [*common, *ovr, f"train.output_dir={out / name}"]) for name, ovr in spec["runs"].items()}
    rows = []
    for name, cfg in configs.items():
        if only and name not in only:
            continue
        start = time.perf_counter()
        summary = train(cfg)
        wall = time.perf_counter() - start
        full = evaluate_run(cfg.train.output_dir, split="dev")
        report, doubt = full["overall"], full.get("uncertainty", {})
        rows.append(
            {
                "run": name,
                "overrides": spec["runs"][name],
                "dev_mae": report["mae_dims"],
                "dev_rmse": report["rmse"],
                "dev_pearson": report["pearson"],
                "dev_acc1": report["acc1"],
                "dev_nll": doubt.get("nll"),
                "dev_std_error_spearman": doubt.get("spearman"),
                "steps": summary["steps"],
                "wall_s": wall,
            }
        )
        write_summary(out, rows)
    return rows


def _maybe(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def summary_markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | overrides | dev MAE | RMSE | Pearson r | Acc@±1 | NLL | Spearman(std, error) | steps | wall (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | `{' '.join(r['overrides'])}` | {r['dev_mae']:.4f} | {r['dev_rmse']:.4f} | "
            f"{r['dev_pearson']:.3f} | {r['dev_acc1']:.3f} | {_maybe(r.get('dev_nll'))} | {_maybe(r.get('dev_std_error_spearman'))} | "
            f"{r['steps']} | {r['wall_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def write_summary(out: Path, rows: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    (out / "summary.md").write_text(summary_markdown(rows), encoding="utf-8")
