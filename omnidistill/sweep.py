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

With ``seeds: [0, 1, 2]`` every run trains once per seed (``train.seed``), into ``<name>_s<seed>``, and
the table starts with each run's mean and sample standard deviation over its seeds
(``summary_seeds.json``): one seed's difference between two runs is often within the seed spread.
With ``test: true`` each run's best dev checkpoint is also evaluated on ``data.test``, and the rows
gain its metrics; ``test_pairs: FILE`` (a ``label --pairwise`` output for the test items) adds how often
its scores order those pairs as the judges chose (``eval --pairs``'s overall accuracy).

With ``grid: {optim.lr: [2.0e-5, 5.0e-5], optim.head_lr: [1.0e-4, 3.0e-4]}`` every combination of the
values is a run of its own (each of ``runs`` with each combination, when ``runs`` is also given), named
after its values (``lr=2e-05+head_lr=0.0001``); the table names the run with the best dev MAE.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from omnidistill import strict_json
from omnidistill.config import Config, ConfigError, config_not_found, load_config, load_yaml, to_dict
from omnidistill.data.preference_file import read_preferences
from omnidistill.data.splits import check_split_files
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
    unknown = set(spec) - {"base", "output_dir", "overrides", "runs", "grid", "seeds", "test", "test_pairs"}
    if unknown:
        first = min(unknown, key=lambda k: lines.get(str(k), 0))
        raise ConfigError(
            f"{path}:{lines.get(str(first), 1)}: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
            "(valid: base, output_dir, overrides, runs, grid, seeds, test, test_pairs)"
        )
    seeds = spec.get("seeds")
    if seeds is not None and (
        not isinstance(seeds, list) or not seeds or not all(type(x) is int and x >= 0 for x in seeds) or len(set(seeds)) < len(seeds)
    ):
        raise ConfigError(f"{path}:{lines.get('seeds', 1)}: seeds must be a list of distinct integers >= 0, got {seeds!r}")
    if not isinstance(spec.get("test", False), bool):
        raise ConfigError(f"{path}:{lines.get('test', 1)}: test must be true or false, got {spec['test']!r}")
    if "test_pairs" in spec and (not spec.get("test") or not isinstance(spec["test_pairs"], str)):
        raise ConfigError(f"{path}:{lines.get('test_pairs', 1)}: test_pairs names a pairs file for the test split, with test: true")
    if "grid" not in spec or "runs" in spec:
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
    if "grid" in spec:
        spec["grid"] = _check_grid(path, spec["grid"], lines)
        spec["runs"] = grid_runs(path, spec, lines)
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


def _check_grid(path: Path, grid: Any, lines: dict[str, int]) -> dict[str, list[Any]]:
    """``grid``, checked: config keys mapped to non-empty lists of distinct values."""
    where = f"{path}:{lines.get('grid', 1)}"
    if not isinstance(grid, dict) or not grid:
        raise ConfigError(f"{where}: grid must map config keys to lists of values, e.g. optim.lr: [2.0e-5, 5.0e-5]")
    for key, values in grid.items():
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][\w.]*", key):
            raise ConfigError(f"{where}: grid key {key!r} is not a config key such as optim.lr")
        if key in ("train.output_dir", "train.seed"):
            advice = "use seeds: [...]" if key == "train.seed" else "each run trains into OUTPUT_DIR/<run name>"
            raise ConfigError(f"{where}: grid.{key}: {key} is the sweep's ({advice})")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: grid.{key} must be a non-empty list of values, got {values!r}")
        texts = [_override_value(v) for v in values]
        if len(set(texts)) < len(texts):
            raise ConfigError(f"{where}: grid.{key} gives a value twice: {values!r}")
    return grid


def _override_value(value: Any) -> str:
    """``value`` as the text of a ``key=value`` override that YAML reads back as the same value."""
    return yaml.safe_dump(value, default_flow_style=True, width=math.inf).removesuffix("\n...\n").strip()


def _value_label(value: Any) -> str:
    """A grid value as it shows in a run's folder name: the YAML text, with anything but letters,
    digits, ``.`` and ``-`` turned into ``_`` (``[64, 128]`` -> ``64_128``, ``a/b`` -> ``a_b``)."""
    text = repr(value) if type(value) is float else str(value) if type(value) in (str, int) else _override_value(value)
    return re.sub(r"[^A-Za-z0-9.\-]+", "_", text).strip("_") or "_"


def grid_runs(path: Path, spec: dict[str, Any], lines: dict[str, int]) -> dict[str, list[str]]:
    """The runs of a sweep file with a ``grid``: every combination of the grid's values, each with the
    overrides of every one of ``runs`` (when given), named ``[<run>+]<key>=<value>+...``. A key is
    shown by its last part (``lr`` for ``optim.lr``) unless two of the grid's keys share it."""
    grid = spec["grid"]
    last = {key: key.rsplit(".", 1)[-1] for key in grid}
    shown = {key: part if list(last.values()).count(part) == 1 else key for key, part in last.items()}
    named = spec.get("runs") or {"": []}
    runs: dict[str, list[str]] = {}
    for run, overrides in named.items():
        for key in grid:
            if _sets(key, overrides):
                raise ConfigError(f"{path}:{lines.get(f'runs.{run}', 1)}: runs.{run} sets {key}, which the grid varies")
        for values in itertools.product(*grid.values()):
            point = dict(zip(grid, values, strict=True))
            label = "+".join(f"{shown[key]}={_value_label(v)}" for key, v in point.items())
            name = f"{run}+{label}" if run else label
            if name in runs:
                raise ConfigError(
                    f"{path}:{lines.get('grid', 1)}: two of the grid's combinations are both named {name}: "
                    "make their values differ in letters or digits"
                )
            runs[name] = [*overrides, *(f"{key}={_override_value(v)}" for key, v in point.items())]
            if run:
                spec.setdefault("grid_of", {})[name] = run
            lines[f"runs.{name}"] = lines.get(f"runs.{run}", lines.get("grid", 1))
    return runs


def _sets(key: str, overrides: list[Any]) -> bool:
    """Whether one of ``overrides`` (``key=value`` texts) sets ``key``."""
    return any(str(o).startswith(f"{key}=") for o in overrides)


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


def seed_runs(spec: dict[str, Any]) -> dict[str, tuple[str, int | None]]:
    """Each run the sweep trains, by its folder name: the sweep file's run and the seed it trains with
    (``<run>_s<seed>`` for each of ``seeds``; the run itself and None without them)."""
    seeds = spec.get("seeds")
    if seeds is None:
        return {name: (name, None) for name in spec["runs"]}
    return {f"{name}_s{seed}": (name, seed) for name in spec["runs"] for seed in seeds}


def sweep_configs(path: str | Path, spec: dict[str, Any], common: list[str], out: Path) -> dict[str, Config]:
    """Each run's config (the base config, ``common`` overrides, the run's own, its seed, its output
    directory), by folder name (:func:`seed_runs`); an error names the sweep file, the run's line and the run."""
    configs = {}
    owned = f"train.output_dir is the sweep's: each run trains into {out}/<run name> (set the sweep file's output_dir instead)"
    seeded = "train.seed is the sweep's seeds: each run trains once per seed (remove the override, or the seeds)"
    by_grid = "is the grid's: the runs train with each of its values (remove the override, or the grid's key)"
    varied = [(key, f"{key} {by_grid}") for key in spec.get("grid", {})]
    for key, refusal in [("train.output_dir", owned), *([("train.seed", seeded)] if "seeds" in spec else []), *varied]:
        if _sets(key, spec.get("overrides", [])):
            raise ConfigError(f"{path}:{spec['lines'].get('overrides', 1)}: overrides: {refusal}")
        if _sets(key, common):
            raise ConfigError(f"{path}: an override on the command line: {refusal}")
        for name, overrides in spec["runs"].items():
            if key not in spec.get("grid", {}) and _sets(key, overrides):  # a grid key is set in every run: by the grid
                raise run_error(path, spec, name, ConfigError(refusal))
    runs = seed_runs(spec)
    clash = sorted(set(runs) & set(spec["runs"])) if "seeds" in spec else []
    if clash:  # a run named like another run's seed folder would share its directory
        raise run_error(path, spec, clash[0], ConfigError(f"{clash[0]} is also the folder of a run's seed; rename it"))
    for folder, (name, seed) in runs.items():
        own = [*spec["runs"][name], *([f"train.seed={seed}"] if seed is not None else [])]
        try:
            configs[folder] = load_config(spec["base"], [*common, *own, f"train.output_dir={out / folder}"])
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
    runs = seed_runs(spec)
    of_run = spec.get("grid_of", {})  # a grid's run -> the run of the file it was made from
    unknown = [name for name in only if name not in spec["runs"] and name not in runs and name not in of_run.values()]
    if unknown:
        raise ConfigError(f"{path}: no run named {', '.join(unknown)} (runs: {', '.join(spec['runs'])})")
    out = Path(output_dir or spec.get("output_dir", "runs/sweep"))
    common = [*spec.get("overrides", []), *extra_overrides]
    configs = sweep_configs(path, spec, common, out)
    selected = [name for name in configs if not only or {name, runs[name][0], of_run.get(runs[name][0])} & set(only)]
    finished = {name: read_train_summary(cfg.train.output_dir) for name, cfg in configs.items()}
    for name in configs:  # resuming lists every finished run of the file: each is checked
        if name in selected or resume:
            check_run_directory(name, configs[name], resume, finished[name] is not None)
    if spec.get("test_pairs"):  # a pairs file that cannot be read fails now, not after the first run trains
        read_preferences(spec["test_pairs"], origin="test_pairs")
    for name in selected:  # what training would refuse, for every run before the first one trains
        try:
            if not (resume and finished[name] is not None):
                check_run_config(configs[name])
            if spec.get("test"):  # each run is evaluated on it after training
                check_test_split(configs[name])
        except (ValueError, OSError) as err:
            raise run_error(path, spec, runs[name][0], err) from None
    previous = {r["run"]: r for r in _read_rows(out)} if resume else {}
    rows: dict[str, dict[str, Any]] = {}

    def table() -> list[dict[str, Any]]:
        return [rows[n] for n in configs if n in rows]

    for name, cfg in configs.items():
        run_dir = Path(cfg.train.output_dir)
        done = finished[name] if resume else None  # trained by an earlier invocation
        if name in previous and done is not None:
            rows[name] = previous[name]  # and evaluated by it
            if test_metrics_missing(rows[name], spec):  # test: true or test_pairs added since
                rows[name].update(metrics_on_test(run_dir, spec.get("test_pairs")))
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
            "overrides": spec["runs"][runs[name][0]],
            **({"sweep_run": runs[name][0], "seed": runs[name][1]} if runs[name][1] is not None else {}),
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
        if spec.get("test"):
            rows[name].update(metrics_on_test(run_dir, spec.get("test_pairs")))
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


def check_test_split(cfg: Config) -> None:
    """Refuse ``test: true`` for a run with no test data (``data.test``'s files, or TFDS), or whose
    ``data.test`` files are not there."""
    if not cfg.data.test and cfg.data.tfds is None:
        raise ConfigError("test: true, but data.test names no file")
    check_split_files(cfg.data, "test", "data.test")


def test_metrics_missing(row: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether a finished run's row lacks what the sweep file's ``test: true`` (and ``test_pairs``) add."""
    if not spec.get("test"):
        return False
    return "test_mae" not in row or (bool(spec.get("test_pairs")) and "test_pair_accuracy" not in row)


def metrics_on_test(run_dir: Path, pairs: str | None = None) -> dict[str, float]:
    """A run's row entries for ``test: true``: its best dev checkpoint evaluated on ``data.test`` (the
    report written to ``eval/test.*`` without bootstrap or plots), with ``pairs`` (``test_pairs``) also
    the overall accuracy on the judges' pairwise choices."""
    from omnidistill.eval.run_eval import evaluate_run

    report = evaluate_run(run_dir, split="test", bootstrap_samples=0, plots=False, pairs=pairs)
    overall = report["overall"]
    row = {"test_mae": overall["mae_dims"], "test_rmse": overall["rmse"], "test_pearson": overall["pearson"], "test_acc1": overall["acc1"]}
    if pairs:
        row["test_pair_accuracy"] = report["preferences"]["overall"]["accuracy"]
    return row


COLUMNS = (
    ("dev_mae", "dev MAE", 4),
    ("dev_rmse", "RMSE", 4),
    ("dev_pearson", "Pearson r", 3),
    ("dev_acc1", "Acc@±1", 3),
    ("dev_nll", "NLL", 3),
    ("dev_std_error_spearman", "Spearman(std, error)", 3),
)
"""The metrics of every row: key, table header, digits."""
TEST_COLUMNS = (
    ("test_mae", "test MAE", 4),
    ("test_rmse", "test RMSE", 4),
    ("test_pearson", "test Pearson r", 3),
    ("test_acc1", "test Acc@±1", 3),
)
"""The metrics of a row with ``test: true``."""
PAIR_COLUMNS = (("test_pair_accuracy", "test pairwise agreement", 3),)
"""The metric of a row with ``test_pairs``."""


def _columns(rows: list[dict[str, Any]]) -> tuple[tuple[str, str, int], ...]:
    tested = TEST_COLUMNS if any("test_mae" in r for r in rows) else ()
    return COLUMNS + tested + (PAIR_COLUMNS if any("test_pair_accuracy" in r for r in rows) else ())


def seed_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per sweep-file run trained with ``seeds``, in the rows' order: the seeds finished and each
    metric's mean and sample standard deviation (n - 1) over them, ``{"mean", "sd"}``. A seed whose
    value is missing or undefined is left out of that metric; ``sd`` is null below two values."""
    members: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if "seed" in row:
            members.setdefault(row["sweep_run"], []).append(row)
    out = []
    for name, seeded in members.items():
        row = {"run": name, "overrides": seeded[0]["overrides"], "seeds": [r["seed"] for r in seeded]}
        for key, _, _ in _columns(seeded):
            values = [r[key] for r in seeded if _finite(r.get(key))]
            row[key] = {"mean": statistics.fmean(values) if values else None, "sd": statistics.stdev(values) if len(values) > 1 else None}
        out.append(row)
    best = best_run(rows, out)
    for row in out if best is not None else ():
        if row["run"] != best["run"]:
            keys = [key for key in ("dev_mae", "test_mae") if key in row]
            row["vs_best"] = {key: paired_by_seed(members[row["run"]], members[best["run"]], key) for key in keys}
    return out


def paired_by_seed(runs: list[dict[str, Any]], best: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """One run's seeds against the best run's on ``key``, paired by seed (between runs that differ in a
    learning rate or a loss, a seed draws the same data order and initial weights, so the pairs'
    differences vary less than either run): the seeds both have a value for, the mean difference (this
    run − the best) and the two-sided p of a paired t-test on them (Student 1908;
    ``scipy.stats.ttest_rel``; None under two seeds, or when the differences do not vary)."""
    from scipy import stats

    theirs = {r["seed"]: r.get(key) for r in best}
    pairs = [(r[key], theirs[r["seed"]]) for r in runs if _finite(r.get(key)) and _finite(theirs.get(r["seed"]))]
    diffs = [a - b for a, b in pairs]
    p = None
    if len(diffs) > 1 and statistics.pstdev(diffs) > 0:
        p = float(stats.ttest_rel([a for a, _ in pairs], [b for _, b in pairs]).pvalue)
    return {"seeds": len(diffs), "diff": statistics.fmean(diffs) if diffs else None, "p": p}


def _finite(value: Any) -> bool:
    return value is not None and math.isfinite(value)


def _spread(cell: dict[str, float | None], digits: int) -> str:
    """``mean ± sd`` (``mean`` alone with one seed)."""
    return _maybe(cell["mean"], digits) + ("" if cell["sd"] is None else f" ± {_maybe(cell['sd'], digits)}")


def seed_markdown(summary: list[dict[str, Any]]) -> str:
    """The table of :func:`seed_summary`."""
    columns = _columns(summary)
    lines = ["| run | overrides | seeds | " + " | ".join(h for _, h, _ in columns) + " |", "|---|---|---|" + "---:|" * len(columns)]
    for r in summary:
        cells = " | ".join(_spread(r[key], digits) for key, _, digits in columns)
        lines.append(f"| {r['run']} | `{' '.join(r['overrides'])}` | {', '.join(map(str, r['seeds']))} | {cells} |")
    return "\n".join(lines) + "\n"


def best_run(rows: list[dict[str, Any]], seeded: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row with the lowest dev MAE, or with seeds (``seeded``: :func:`seed_summary` of ``rows``) the
    run with the lowest mean over its seeds; the first of equals, and None unless two or more have one."""
    mae = (lambda r: r["dev_mae"]["mean"]) if seeded else (lambda r: r.get("dev_mae"))
    scored = [r for r in (seeded or rows) if _finite(mae(r))]
    return min(scored, key=mae) if len(scored) > 1 else None


def _best_line(rows: list[dict[str, Any]], seeded: list[dict[str, Any]]) -> str:
    """``Best dev MAE: **run** (dev MAE value; test MAE value)``, for the table's end; empty without a best."""
    best = best_run(rows, seeded)
    if best is None:
        return ""
    cell = (lambda key: _spread(best[key], 4)) if seeded else (lambda key: _maybe(best[key], 4))
    cells = "; ".join(f"{split} MAE {cell(f'{split}_mae')}" for split in ("dev", "test") if f"{split}_mae" in best)
    line = f"\nBest {'mean dev MAE over seeds' if seeded else 'dev MAE'}: **{best['run']}** ({cells})"
    close = _within_a_deviation(best, seeded)
    if close:
        line += f". Within a standard deviation of it: {', '.join(close)}"
    tested = [(r["run"], r["vs_best"]["dev_mae"]) for r in seeded if r.get("vs_best", {}).get("dev_mae", {}).get("p") is not None]
    if tested:
        line += ". Paired by seed against it (dev MAE, t-test): "
        line += ", ".join(f"{run} {t['diff']:+.4f} (p {t['p']:.3f})" for run, t in tested)
    return line + "\n"


def _within_a_deviation(best: dict[str, Any], seeded: list[dict[str, Any]]) -> list[str]:
    """The other runs whose mean dev MAE is above the best's by at most the larger of the two runs'
    standard deviations over seeds: the seeds do not tell them apart from the best."""
    out = []
    for row in seeded:
        mean, sd = row["dev_mae"]["mean"], row["dev_mae"]["sd"]
        spread = max(sd or 0.0, best["dev_mae"]["sd"] or 0.0)
        if row["run"] != best["run"] and _finite(mean) and mean - best["dev_mae"]["mean"] <= spread:
            out.append(row["run"])
    return out


def summary_markdown(rows: list[dict[str, Any]], seeded: list[dict[str, Any]] | None = None) -> str:
    """The sweep's table: with seeds, the mean ± standard deviation over each run's seeds first, then
    every seed's row; then the run with the best dev MAE (:func:`best_run`). ``seeded``:
    :func:`seed_summary` of ``rows``, when the caller has it."""
    seeded = seed_summary(rows) if seeded is None else seeded
    if seeded:
        table = f"Mean ± sample standard deviation over seeds:\n\n{seed_markdown(seeded)}\nEach seed:\n\n{run_markdown(rows)}"
    else:
        table = run_markdown(rows)
    return table + _best_line(rows, seeded)


def run_markdown(rows: list[dict[str, Any]]) -> str:
    """One row per trained run."""
    columns = _columns(rows)
    head = " | ".join(h for _, h, _ in columns)
    lines = [f"| run | overrides | {head} | steps | wall (s) |", "|---|---|" + "---:|" * (len(columns) + 2)]
    for r in rows:
        cells = " | ".join(_maybe(r.get(key), digits) for key, _, digits in columns)
        lines.append(f"| {r['run']} | `{' '.join(r['overrides'])}` | {cells} | {r['steps']} | {_wall(r)} |")
    return "\n".join(lines) + "\n"


def write_summary(out: Path, rows: list[dict[str, Any]]) -> None:
    """``summary.json`` (one row per trained run), ``summary.md``, and with seeds ``summary_seeds.json``
    (:func:`seed_summary`)."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "summary.json", strict_json.dumps(rows, indent=2))
    seeded = seed_summary(rows)
    if seeded:
        atomic_write_text(out / "summary_seeds.json", strict_json.dumps(seeded, indent=2))
    atomic_write_text(out / "summary.md", summary_markdown(rows, seeded))
