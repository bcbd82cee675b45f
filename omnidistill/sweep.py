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

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import yaml

from omnidistill import strict_json
from omnidistill.config import Config, ConfigError, config_not_found, load_config, load_yaml, to_dict
from omnidistill.runs.checkpoint import saved_steps
from omnidistill.runs.run_dir import atomic_write_text, read_train_summary


def load_sweep(path: str | Path) -> dict[str, Any]:
    """A sweep file, checked: its keys, its runs, and its base config file. Errors name the file and
    the line of the key at fault; ``spec["lines"]`` maps ``base``, ``overrides`` and ``runs.<name>`` to
    their lines, for errors found later (:func:`sweep_configs`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: {config_not_found(path, 'sweep file')}")
    text = path.read_text(encoding="utf-8")
    spec = load_yaml(text, path) or {}
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: expected a mapping with base, output_dir, overrides and runs")
    lines = _key_lines(text)
    unknown = set(spec) - {"base", "output_dir", "overrides", "runs"}
    if unknown:
        first = min(unknown, key=lambda k: lines.get(str(k), 0))
        raise ConfigError(
            f"{path}:{lines.get(str(first), 1)}: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
            "(valid: base, output_dir, overrides, runs)"
        )
    if not isinstance(spec.get("runs"), dict) or not spec["runs"]:
        raise ConfigError(f"{path}:{lines.get('runs', 1)}: runs must map run names to lists of overrides")
    for name, overrides in spec["runs"].items():
        where = f"{path}:{lines.get(f'runs.{name}', 1)}"
        if not isinstance(overrides, list):
            raise ConfigError(f"{where}: runs.{name} must be a list of key=value overrides")
        if not isinstance(name, str):
            raise ConfigError(f"{where}: run name {name!r} is not text (YAML read it as a {type(name).__name__}): quote it")
        if name.strip() in ("", ".", "..") or any(c in name for c in "/\\"):
            # the run trains into OUTPUT_DIR/<name>: ".." was the sweep folder's parent, "a/b" a folder in a folder
            raise ConfigError(f"{where}: run name {name!r} must be a folder name (without / or \\, not . or ..)")
    base = Path(spec.get("base", ""))
    if not base.is_file() and (path.parent / base).is_file():
        base = path.parent / base
    if not base.is_file():
        raise ConfigError(
            f"{path}:{lines.get('base', 1)}: base: {spec.get('base')!r} is not a file (relative to the sweep file or the working directory)"
        )
    spec["base"] = base
    spec["lines"] = lines
    return spec


def _key_lines(text: str) -> dict[str, int]:
    """1-based line of each top-level key, and of each ``runs.<name>``, of a YAML mapping."""
    root = yaml.compose(text)
    lines: dict[str, int] = {}
    if not isinstance(root, yaml.MappingNode):
        return lines
    for key, value in root.value:
        lines[str(key.value)] = key.start_mark.line + 1
        if key.value == "runs" and isinstance(value, yaml.MappingNode):
            for run_key, _ in value.value:
                lines[f"runs.{run_key.value}"] = run_key.start_mark.line + 1
    return lines


def run_error(path: str | Path, spec: dict[str, Any], name: str, err: Exception) -> ConfigError:
    """``err`` of the sweep's run ``name``, located at that run's line of the sweep file."""
    return ConfigError(f"{path}:{spec['lines'].get(f'runs.{name}', 1)}: runs.{name}: {err}")


def sweep_configs(path: str | Path, spec: dict[str, Any], common: list[str], out: Path) -> dict[str, Config]:
    """Each run's config (the base config, ``common`` overrides, the run's own, its output directory);
    an error names the sweep file, the run's line and the run."""
    configs = {}
    owned = f"train.output_dir is the sweep's: each run trains into {out}/<run name> (set the sweep file's output_dir instead)"
    sets_dir = lambda overrides: any(str(o).startswith("train.output_dir=") for o in overrides)
    if sets_dir(spec.get("overrides", [])):
        raise ConfigError(f"{path}:{spec['lines'].get('overrides', 1)}: overrides: {owned}")
    if sets_dir(common):
        raise ConfigError(f"{path}: an override on the command line: {owned}")
    for name, overrides in spec["runs"].items():
        if sets_dir(overrides):
            raise run_error(path, spec, name, ConfigError(owned))
        try:
            configs[name] = load_config(spec["base"], [*common, *overrides, f"train.output_dir={out / name}"])
        except (ConfigError, ValueError) as err:
            raise run_error(path, spec, name, err) from None
    return configs


@dataclasses.dataclass
class SweepOutcome:
    rows: list[dict[str, Any]]
    """One row per finished run, in the sweep file's order."""
    preempted: str | None = None
    """The run that was preempted (its checkpoint saved); the sweep stopped there."""


def run_sweep(
    path: str | Path,
    extra_overrides: list[str] | tuple[str, ...] = (),
    output_dir: str | Path | None = None,
    only: list[str] | tuple[str, ...] = (),
    resume: bool = False,
) -> SweepOutcome:
    """Train and compare every run of a sweep file (or the runs named in ``only``, in the file's
    order). Every run's config, and whether its directory may be written, is checked before the
    first one trains.

    ``resume`` continues a sweep that was interrupted (preempted, killed) or ran in parts (``only``):
    a finished run (it has ``train_summary.json``) keeps its row of ``summary.json`` and is not
    trained again, an interrupted one resumes from its latest checkpoint, and the rest train. The
    table then lists every finished run of the file. A run directory whose config differs from the
    sweep's is refused by name. A preempted run stops the sweep (its checkpoint is saved), and
    ``resume`` goes on from there."""
    from omnidistill.eval.run_eval import evaluate_run
    from omnidistill.train.loop import train
    from omnidistill.train.setup import check_run_config

    spec = load_sweep(path)
    unknown = [name for name in only if name not in spec["runs"]]
    if unknown:
        raise ConfigError(f"{path}: no run named {', '.join(unknown)} (runs: {', '.join(spec['runs'])})")
    out = Path(output_dir or spec.get("output_dir", "runs/sweep"))
    common = [*spec.get("overrides", []), *extra_overrides]
    configs = sweep_configs(path, spec, common, out)
    selected = [name for name in configs if not only or name in only]
    finished = {name: read_train_summary(cfg.train.output_dir) for name, cfg in configs.items()}
    for name in configs:  # resuming lists every finished run of the file: each is checked
        if name in selected or resume:
            check_run_directory(name, configs[name], resume, finished[name] is not None)
    for name in selected:  # what training would refuse, for every run before the first one trains
        if not (resume and finished[name] is not None):
            try:
                check_run_config(configs[name])
            except (ValueError, OSError) as err:
                raise run_error(path, spec, name, err) from None
    previous = {r["run"]: r for r in _read_rows(out)} if resume else {}
    rows: dict[str, dict[str, Any]] = {}

    def table() -> list[dict[str, Any]]:
        return [rows[n] for n in configs if n in rows]

    for name, cfg in configs.items():
        run_dir = Path(cfg.train.output_dir)
        done = finished[name] if resume else None  # trained by an earlier invocation
        if name in previous and done is not None:
            rows[name] = previous[name]  # and evaluated by it
        if name not in selected or name in rows:
            continue
        resumed = done is None and resume and bool(saved_steps(run_dir))
        start = time.perf_counter()
        summary = done if done is not None else train(cfg, resume=resume)
        wall = time.perf_counter() - start
        if summary.get("preempted"):
            write_summary(out, table())
            return SweepOutcome(table(), preempted=name)
        full = evaluate_run(run_dir, split="dev")
        report, doubt = full["overall"], full.get("uncertainty", {})
        rows[name] = {
            "run": name,
            "overrides": spec["runs"][name],
            "dev_mae": report["mae_dims"],
            "dev_rmse": report["rmse"],
            "dev_pearson": report["pearson"],
            "dev_acc1": report["acc1"],
            "dev_nll": doubt.get("nll"),
            "dev_std_error_spearman": doubt.get("spearman"),
            "steps": summary["steps"],
            "wall_s": None if done is not None else wall,  # of this invocation: a resumed run's earlier part is not counted
            "resumed": resumed,
        }
        write_summary(out, table())
    write_summary(out, table())  # also when every row was kept from before
    return SweepOutcome(table())


def check_run_directory(name: str, cfg: Config, resume: bool, finished: bool) -> None:
    """Refuse a run directory that holds a run (``finished``: its training ended), unless resuming;
    refuse resuming one whose config differs."""
    run_dir = Path(cfg.train.output_dir)
    holds_run = finished or bool(saved_steps(run_dir))
    if holds_run and not resume:
        raise ConfigError(
            f"run {name}: {run_dir} already holds a run; pass --resume to continue the sweep, or --output-dir to start another"
        )
    if resume and (run_dir / "config.yaml").is_file():
        differences = _differences(to_dict(load_config(run_dir / "config.yaml")), to_dict(cfg))
        if differences:
            raise ConfigError(
                f"run {name}: {run_dir} was trained with another config ({'; '.join(differences)}); "
                "remove it to train it again, or pass another --output-dir"
            )


def _differences(saved: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
    """``key: saved != now`` for every leaf of two config dicts that differs."""
    out = []
    for key in sorted(set(saved) | set(now)):
        a, b = saved.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} != {b!r}")
    return out


def _read_rows(out: Path) -> list[dict[str, Any]]:
    path = out / "summary.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []


def _maybe(value: float | None, digits: int = 3) -> str:
    """A table cell: ``—`` for a value that is missing or undefined (null in ``summary.json``, NaN before)."""
    return "—" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _wall(row: dict[str, Any]) -> str:
    if row.get("wall_s") is None:
        return "—"
    return f"{row['wall_s']:.1f}" + (" (resumed: this part)" if row.get("resumed") else "")


def summary_markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | overrides | dev MAE | RMSE | Pearson r | Acc@±1 | NLL | Spearman(std, error) | steps | wall (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | `{' '.join(r['overrides'])}` | {_maybe(r['dev_mae'], 4)} | {_maybe(r['dev_rmse'], 4)} | "
            f"{_maybe(r['dev_pearson'])} | {_maybe(r['dev_acc1'])} | {_maybe(r.get('dev_nll'))} | "
            f"{_maybe(r.get('dev_std_error_spearman'))} | "
            f"{r['steps']} | {_wall(r)} |"
        )
    return "\n".join(lines) + "\n"


def write_summary(out: Path, rows: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "summary.json", strict_json.dumps(rows, indent=2))
    atomic_write_text(out / "summary.md", summary_markdown(rows))
