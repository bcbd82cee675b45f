"""Evaluation reports: every metric overall / per dimension / per task / per language, agreement with
the human annotators, cross-lingual consistency and confidence intervals; JSON and Markdown."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from omnidistill import strict_json
from omnidistill.data.own_fields import MISSING, group_value
from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.agreement import category_counts, fleiss_kappa, mean_rwg, rater_pair_table, rwg_table
from omnidistill.eval.bootstrap import headline_intervals
from omnidistill.eval.by_field import MIN_GROUPS, field_report
from omnidistill.eval.consistency import cross_lingual_consistency
from omnidistill.eval.metrics import check_scores, grouped_metrics, macro_mae, regression_metrics, weighted_group_mae
from omnidistill.eval.preferences import preference_markdown
from omnidistill.eval.ranking import calibrate_epsilon
from omnidistill.eval.uncertainty import uncertainty_markdown

HEADLINE = ("mae", "rmse", "pearson", "acc1")


def gold_arrays(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    gold = np.array([[0.0 if v is None else v for v in r.labels] for r in records], np.float32)
    mask = np.array([[v is not None for v in r.labels] for r in records], bool)
    return gold, mask


def train_mean_labels(records: Sequence[Record]) -> np.ndarray:
    """Mean label of each dimension over ``records`` (missing labels left out): the constant baseline."""
    gold, mask = gold_arrays(records)
    counts = mask.sum(axis=0)
    if not counts.all():
        missing = [d for d, n in zip(DIMENSIONS, counts, strict=True) if not n]
        raise ValueError(f"no training label for {', '.join(missing)}: no mean baseline")
    return (gold * mask).sum(axis=0) / counts


def mean_baseline(records: Sequence[Record], means: np.ndarray, model_mae_dims: float) -> dict:
    """MAE of predicting ``means`` (the training labels' means) for every item, next to the model's."""
    gold, mask = gold_arrays(records)
    pred = np.broadcast_to(np.asarray(means, np.float64), gold.shape)
    per_dim = {d: float(np.abs(pred[mask[:, i], i] - gold[mask[:, i], i]).mean()) for i, d in enumerate(DIMENSIONS) if mask[:, i].any()}
    mae = float(np.mean(list(per_dim.values())))
    return {
        "train_means": dict(zip(DIMENSIONS, map(float, means), strict=True)),
        "mae_dims": mae,
        "mae_by_dim": per_dim,
        "model_improvement": (mae - model_mae_dims) / mae if mae > 0 else float("nan"),
    }


def headline_cis(pred: np.ndarray, gold: np.ndarray, mask: np.ndarray, samples: int, seed: int = 0) -> dict:
    """95% bootstrap intervals (items resampled) of overall MAE, RMSE, Pearson, Acc@±1 and mae_dims."""
    return headline_intervals(pred, gold, mask, samples=samples, seed=seed)


def annotator_agreement(records: Sequence[Record], pred: np.ndarray, null: str) -> dict | None:
    """Annotators among themselves vs the student against each annotator (items with >= 2 annotations)."""
    rated = [(i, r) for i, r in enumerate(records) if len(r.annotations) >= 2]
    if not rated:
        return None
    k = min(len(r.annotations) for _, r in rated)
    ann = np.array([[[np.nan if v is None else v for v in a] for a in r.annotations[:k]] for _, r in rated])  # [N, k, 4]
    student = pred[[i for i, _ in rated]]
    out = {"items": len(rated), "annotators": k, "null": null}
    out["rwg_annotators"] = mean_rwg(list(ann), null)
    out["rwg_by_task"] = rwg_table(ann, [r.task for _, r in rated], null)
    out["rwg_student_and_annotators"] = mean_rwg([np.vstack([a, s[None]]) for a, s in zip(ann, student, strict=True)], null)
    out["fleiss_kappa_annotators"] = {}
    for d, dim in enumerate(DIMENSIONS):
        cells = ann[:, :, d]
        keep = ~np.isnan(cells).any(axis=1)
        out["fleiss_kappa_annotators"][dim] = fleiss_kappa(category_counts(cells[keep])) if keep.any() else float("nan")
    raters = {f"annotator_{j + 1}": np.nan_to_num(ann[:, j, :]) for j in range(k)}
    raters["student"] = student
    mask = ~np.isnan(ann).any(axis=1)
    pairs = rater_pair_table(raters, mask)
    out["pairs"] = pairs
    human = [p for p in pairs if "student" not in (p["a"], p["b"])]
    with_student = [p for p in pairs if "student" in (p["a"], p["b"])]
    for name, rows in (("annotator_vs_annotator", human), ("student_vs_annotator", with_student)):
        out[name] = {key: float(np.mean([r[key] for r in rows])) for key in ("cohen_kappa", "quadratic_kappa", "mae", "acc1")}
    return out


def fit_epsilon(gold: np.ndarray, pred: np.ndarray, mask: np.ndarray, max_pairs: int = 20_000_000) -> tuple[dict, dict]:
    """Per-dimension tie thresholds for pairwise accuracy and their calibration details."""
    epsilon, calib = {}, {}
    for d, dim in enumerate(DIMENSIONS):
        c = calibrate_epsilon(gold[mask[:, d], d], pred[mask[:, d], d], max_pairs=max_pairs)
        epsilon[dim], calib[dim] = c.epsilon, {"epsilon": c.epsilon, "tie_fraction": c.tie_fraction_metric, "sampled": c.sampled}
    return epsilon, calib


def build_report(
    records: Sequence[Record],
    pred: np.ndarray,
    *,
    bootstrap_samples: int = 0,
    null: str = "uniform",
    max_pairs: int = 20_000_000,
    epsilon: dict[str, float] | None = None,
    lang_weights: dict[str, float] | None = None,
    group_by: Sequence[str] = (),
) -> dict:
    """All metrics of predictions ``pred`` [N, 4] against the records' labels.

    Pairwise accuracy uses one tie threshold per dimension, fitted on all items of that dimension
    and applied unchanged per task and per language (``epsilon`` in the report); pass ``epsilon`` to
    reuse thresholds fitted earlier (training fits them on the first dev evaluation only).
    ``lang_weights`` are the L-MAE weights (default: evaluated items per language). ``group_by``:
    fields whose values get metrics of their own (``by_field``, :func:`field_report`). Non-finite or
    out-of-range predictions are an error naming the item and dimension.
    """
    gold, mask = gold_arrays(records)
    pred = np.asarray(pred, np.float64)
    ids = [r.id for r in records]
    check_scores(pred, "predictions", ids)
    check_scores(gold, "gold labels", ids, mask)
    if epsilon is None:
        epsilon, calib = fit_epsilon(gold, pred, mask, max_pairs)
    else:
        calib = {dim: {"epsilon": epsilon[dim], "reused": True} for dim in DIMENSIONS}
    per_lang = grouped_metrics(pred, gold, mask, [r.lang for r in records], epsilon)
    per_task = grouped_metrics(pred, gold, mask, [r.task for r in records], epsilon)
    report = {
        "overall": regression_metrics(pred, gold, mask, epsilon),
        "by_task": per_task,
        "by_lang": per_lang,
        "lang_mae_weighted": weighted_group_mae(per_lang, lang_weights),
        "lang_mae_weights": "file" if lang_weights is not None else "evaluated items per language",
        "task_macro_mae": macro_mae(per_task),
        "tie_calibration": calib,
    }
    if group_by:
        report["by_field"] = {name: field_report(pred, gold, mask, [group_value(r, name) for r in records], epsilon) for name in group_by}
    if bootstrap_samples:
        report["ci95"] = headline_cis(pred, gold, mask, bootstrap_samples)
    agreement = annotator_agreement(records, pred, null)
    if agreement is not None:
        report["agreement"] = agreement
    consistency = cross_lingual_consistency(records, pred)
    if consistency is not None:
        report["cross_lingual"] = consistency
    return report


def _fmt(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _row(name: str, m: dict, pa: bool = False) -> str:
    keys = ("mae", "rmse", "pearson", "spearman", "kendall", "acc1") + (("pairwise_acc",) if pa else ())
    cells = [name, str(m.get("items", m.get("n", ""))), *(_fmt(m.get(k)) for k in keys)]
    return "| " + " | ".join(cells) + " |"


def _head(first: str, pa: bool = False) -> str:
    cols = ["MAE", "RMSE", "Pearson r", "Spearman", "Kendall τb", "Acc@±1"] + (["pairwise acc"] if pa else [])
    return f"| {first} | items | " + " | ".join(cols) + " |\n|---|---:|" + "---:|" * len(cols)


def _rwg_table_markdown(table: dict, title: str) -> list[str]:
    lines = [f"#### {title}", "", "| group | items | " + " | ".join(DIMENSIONS) + " | overall |", "|---|---:|" + "---:|" * 5]
    for name, row in table.items():
        lines.append(f"| {name} | {row['items']} | " + " | ".join(_fmt(row[d]) for d in DIMENSIONS) + f" | {_fmt(row['overall'])} |")
    return [*lines, ""]


def _field_markdown(name: str, field: dict) -> list[str]:
    """``by_field``'s section for one field: its metrics table, the mean prediction against the mean
    label per value, and the group-level correlation of those means."""
    groups = field["groups"]
    lines = [f"### By {name}", "", _head(name), *(_row(value, m) for value, m in groups.items()), ""]
    lines += [
        f"Mean prediction / mean label per {name} (labelled cells):",
        "",
        f"| {name} | " + " | ".join(DIMENSIONS) + " |",
        "|---|" + "---:|" * len(DIMENSIONS),
    ]
    for value, m in groups.items():
        cells = (f"{_fmt(m['mean_pred'][d])} / {_fmt(m['mean_label'][d])}" for d in DIMENSIONS)
        lines.append(f"| {value} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Group level: each {name} value's mean prediction against its mean label, correlated over the values "
        f"(at least {MIN_GROUPS} with labels; {MISSING} left out):",
        "",
        "| dimension | values | Pearson r | Kendall τb |",
        "|---|---:|---:|---:|",
        *(f"| {d} | {v['groups']} | {_fmt(v['pearson'])} | {_fmt(v['kendall'])} |" for d, v in field["group_level"].items()),
        "",
    ]
    return lines


def _finite(x: float | None) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def _cross_lingual_markdown(cl: dict) -> list[str]:
    """The cross-lingual section: its κ table, or one sentence when no κ could be computed."""
    ref = cl["reference_lang"]
    title = f"### Cross-lingual consistency ({cl['groups']} parallel groups, {len(cl['languages'])} languages)"
    kappas = [v for v in cl["fleiss_kappa"].values()]
    kappas += [row[d] for row in cl.get("cohen_kappa_vs_reference", {}).values() for d in DIMENSIONS]
    if not any(_finite(k) for k in kappas):
        pairs = [v["groups"] for v in cl["deviation_from_reference"].values()]
        most = f"at most {max(pairs)} parallel item(s) per language against {ref}" if pairs else f"no item parallel to {ref}"
        return [
            title,
            "",
            f"Too little parallel data for these statistics: {cl['parallel_items']} parallel item(s), {most}, "
            f"{cl['complete_groups']} group(s) in every language; Cohen's and Fleiss' κ are undefined on so few items.",
            "",
        ]
    fleiss = ", ".join(f"{d} {_fmt(v)}" for d, v in cl["fleiss_kappa"].items()) or "– (no group covers every language)"
    lines = [title, "", f"Fleiss κ across languages: {fleiss}", ""]
    lines += [
        f"| language | parallel items | mean |Δ| vs {ref} | " + " | ".join(f"Cohen κ vs {ref}: {d}" for d in DIMENSIONS) + " |",
        "|---|---:|---:|" + "---:|" * len(DIMENSIONS),
    ]
    for lang, v in cl["deviation_from_reference"].items():
        kappa = cl.get("cohen_kappa_vs_reference", {}).get(lang, {})
        lines.append(f"| {lang} | {v['groups']} | {_fmt(v['mean_abs'])} | " + " | ".join(_fmt(kappa.get(d)) for d in DIMENSIONS) + " |")
    return [*lines, ""]


def report_markdown(report: dict, title: str = "Evaluation") -> str:
    """A readable Markdown rendering of :func:`build_report`'s output."""
    ov = report["overall"]
    lines = [f"## {title}", "", _head("", pa=True), _row("**overall**", ov)]
    for dim in DIMENSIONS:
        lines.append(_row(dim, ov["dimensions"][dim], pa=True))
    lines += [
        "",
        f"MAE averaged over dimensions: {_fmt(ov['mae_dims'])}; L-MAE (language MAEs weighted by "
        f"{report.get('lang_mae_weights', 'evaluated items')}): {_fmt(report['lang_mae_weighted'])}; "
        f"task-macro MAE (mean of the task MAEs): {_fmt(report.get('task_macro_mae'))}",
    ]
    if "baseline" in report:
        base = report["baseline"]
        lines += [
            "",
            f"Baseline, the training labels' mean for every item: MAE {_fmt(base['mae_dims'])}; this model is "
            f"{100 * base['model_improvement']:.1f}% lower.",
        ]
    if "tie_calibration" in report:
        eps = ", ".join(f"{d} {_fmt(c['epsilon'])}" for d, c in report["tie_calibration"].items())
        lines.append(f"Pairwise accuracy tie thresholds ε (fitted per dimension on all items): {eps}")
    if "ci95" in report:
        ci = report["ci95"]
        lines.append("95% bootstrap intervals: " + "; ".join(f"{k} [{_fmt(lo)}, {_fmt(hi)}]" for k, (lo, hi) in ci.items()))
    lines.append("")
    for section, label in (("by_task", "task"), ("by_lang", "language")):
        lines += [f"### By {label}", "", _head(label)]
        lines += [_row(name, m) for name, m in report[section].items()]
        lines.append("")
    for name, field in report.get("by_field", {}).items():
        lines += _field_markdown(name, field)
    if "agreement" in report:
        ag = report["agreement"]
        lines += [
            f"### Agreement with the human annotators ({ag['items']} items, {ag['annotators']} annotators, null: {ag['null']})",
            "",
            "| raters | Cohen κ | quadratic κ | MAE | Acc@±1 |",
            "|---|---:|---:|---:|---:|",
        ]
        for name in ("annotator_vs_annotator", "student_vs_annotator"):
            m = ag[name]
            vals = " | ".join(_fmt(m[k]) for k in ("cohen_kappa", "quadratic_kappa", "mae", "acc1"))
            lines.append(f"| {name.replace('_', ' ')} | {vals} |")
        lines += [
            "",
            f"r*wg(j): annotators {_fmt(ag['rwg_annotators']['rwg_star'])}, "
            f"annotators + student {_fmt(ag['rwg_student_and_annotators']['rwg_star'])}; "
            f"rwg(j): {_fmt(ag['rwg_annotators']['rwg_j'])} / {_fmt(ag['rwg_student_and_annotators']['rwg_j'])} "
            f"(truncated to [0, 1]; items without enough ratings: {ag['rwg_annotators'].get('nan_items', 0)})",
            "",
        ]
        if "rwg_by_task" in ag:
            lines += _rwg_table_markdown(ag["rwg_by_task"], "Annotator agreement r_wg by task (as OmniScore Table 2)")
    if "preferences" in report:
        prefs = report["preferences"]
        lines += [f"### Agreement with the judges' pairwise choices ({prefs['file']})", "", preference_markdown(prefs)]
    if "uncertainty" in report:
        lines += uncertainty_markdown(report["uncertainty"])
    if "cross_lingual" in report:
        lines += _cross_lingual_markdown(report["cross_lingual"])
    meta = report.get("meta", {})
    if meta.get("skipped_records") or meta.get("truncated_inputs"):
        lines.append(
            f"Inputs: {meta.get('skipped_records', 0)} invalid record(s) skipped; "
            f"{meta.get('truncated_inputs', 0)} input(s) truncated to the model's max length."
        )
    if "meta" in report and "seconds_per_1000" in report["meta"]:
        meta = report["meta"]
        cost = f", ${meta['usd_per_1000']:.4f} per 1,000 at ${meta['usd_per_hour']:.2f}/h" if "usd_per_1000" in meta else ""
        lines.append(f"Throughput: {meta['seconds_per_1000']:.3f} s per 1,000 items on {meta.get('device', '?')}{cost}.")
    return "\n".join(lines)


def write_report(report: dict, out_dir: str | Path, name: str = "report", title: str = "Evaluation") -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(strict_json.dumps(report, indent=2), encoding="utf-8")
    md_path.write_text(report_markdown(report, title), encoding="utf-8")
    return json_path, md_path
