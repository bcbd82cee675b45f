"""Judge comparison: several prediction columns (student checkpoints, an LLM judge's labels) side by side."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from omnidistill.data.own_fields import group_value
from omnidistill.data.preference_file import Preference
from omnidistill.data.schema import DataError, Record, identifier, label_vector
from omnidistill.data.sources import iter_objects
from omnidistill.eval.agreement import mean_rwg, rwg_table
from omnidistill.eval.metrics import grouped_metrics, regression_metrics
from omnidistill.eval.preferences import accuracy_text, agreement_over
from omnidistill.eval.report import gold_arrays


def load_predictions(path: str | Path, records: Sequence[Record]) -> np.ndarray:
    """[N, 4] scores aligned to ``records`` by ``id`` from a file whose records hold ``id`` and either
    ``pred`` (omnidistill predictions) or ``labels`` (e.g. an LLM judge's labels, as ``omnidistill label``
    writes them): JSONL, or CSV or Parquet with label columns, read as data files are
    (:func:`iter_objects`: lines end at "\\n" only, so a text holding U+2028 stays one line). A
    dimension that is absent or null is not scored (NaN); strings, booleans, NaN and values outside
    [1, 5] are errors naming the file, line and field, and so is an id given twice."""
    by_id: dict[str, list[float]] = {}
    seen_at: dict[str, str] = {}
    for where, obj in iter_objects(path):
        if isinstance(obj, DataError):
            raise obj
        ident = identifier(obj, "id", where) if isinstance(obj, dict) else None
        if ident is None:
            raise DataError(f"{where}: expected an object with 'id' and 'pred' or 'labels'")
        field = "pred" if "pred" in obj else "labels"
        scores = label_vector(obj.get(field), where, field)  # the schema's own label checks
        at = where.rpartition(":")[2]  # "4" of a JSONL or CSV line, "row 3" of a Parquet row
        if ident in by_id:
            raise DataError(f"{where}: id {ident!r} repeats {seen_at[ident]}: predictions are joined to items by id")
        by_id[ident], seen_at[ident] = [np.nan if v is None else v for v in scores], f"line {at}" if at.isdigit() else at
    missing = [r.id for r in records if r.id not in by_id]
    if missing:
        raise DataError(f"{path}: no prediction for {len(missing)} item(s), e.g. {', '.join(missing[:3])}")
    return np.array([by_id[r.id] for r in records], np.float64)


def compare_judges(
    records: Sequence[Record],
    judges: dict[str, np.ndarray],
    null: str = "max_disagreement",
    group_by: Sequence[str] = (),
    preferences: list[Preference] | None = None,
) -> dict:
    """Headline metrics per judge, overall and by task / language (and by each ``group_by`` field, in
    ``by_field``), and the judge's agreement with the
    human label as r*_wg(j) (OmniScore §2.2: teacher vs human, 0.90 for GPT-4.1): per item, the judge
    and the human gold are the two raters. Cells a judge did not score are counted in ``unscored_cells``
    and left out, never filled in. With ``preferences`` (``label --pairwise``), each judge's agreement
    with those pairwise choices too (:func:`~omnidistill.eval.preferences.preference_agreement`)."""
    gold, mask = gold_arrays(records)
    gold_nan = np.where(mask, gold, np.nan)
    tasks = [r.task for r in records]
    out = {}
    for name, pred in judges.items():
        m = mask & np.isfinite(pred)
        p = np.nan_to_num(pred)
        raters = np.stack([gold_nan, np.where(m, pred, np.nan)], axis=1)  # [N, 2, 4]
        out[name] = {
            "overall": regression_metrics(p, gold, m),
            "by_task": grouped_metrics(p, gold, m, tasks),
            "by_lang": grouped_metrics(p, gold, m, [r.lang for r in records]),
            "unscored_cells": int((mask & ~np.isfinite(pred)).sum()),
            "rwg_vs_human": {"null": null, **mean_rwg(list(raters), null)},
            "rwg_vs_human_by_task": rwg_table(raters, tasks, null),
        }
        if group_by:
            out[name]["by_field"] = {f: grouped_metrics(p, gold, m, [group_value(r, f) for r in records]) for f in group_by}
        if preferences is not None:
            out[name]["preferences"] = agreement_over(preferences, records, pred)
    return out


def comparison_markdown(comparison: dict) -> str:
    names = list(comparison)
    lines = ["## Judges side by side", "", "| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for key, label in (
        ("mae", "MAE"),
        ("rmse", "RMSE"),
        ("pearson", "Pearson r"),
        ("spearman", "Spearman"),
        ("kendall", "Kendall τb"),
        ("acc1", "Acc@±1"),
    ):
        lines.append(f"| {label} | " + " | ".join(f"{comparison[n]['overall'][key]:.3f}" for n in names) + " |")
    lines.append("| r*wg(j) vs human | " + " | ".join(f"{comparison[n]['rwg_vs_human']['rwg_star']:.3f}" for n in names) + " |")
    lines.append("| unscored cells | " + " | ".join(str(comparison[n]["unscored_cells"]) for n in names) + " |")
    if "preferences" in comparison[names[0]]:  # accuracy (pairs) on the pairwise choices, overall
        cells = [comparison[n]["preferences"]["overall"] for n in names]
        lines.append("| pairwise choices agreed (pairs) | " + " | ".join(f"{accuracy_text(c)} ({c['pairs']})" for c in cells) + " |")
    sections = [(label, {n: comparison[n][key] for n in names}) for key, label in (("by_task", "task"), ("by_lang", "language"))]
    for field in comparison[names[0]].get("by_field", {}):
        sections.append((field, {n: comparison[n]["by_field"][field] for n in names}))
    for label, per_judge in sections:
        groups = sorted({g for n in names for g in per_judge[n]})
        lines += ["", f"MAE by {label}:", "", f"| {label} | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for g in groups:
            lines.append(f"| {g} | " + " | ".join(f"{per_judge[n][g]['mae']:.3f}" if g in per_judge[n] else "–" for n in names) + " |")
    return "\n".join(lines) + "\n"
