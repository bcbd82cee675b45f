"""Judge comparison: several prediction columns (student checkpoints, an LLM judge's labels) side by side."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from omnidistill.data.schema import DataError, Record
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.metrics import grouped_metrics, regression_metrics
from omnidistill.eval.report import gold_arrays


def load_predictions(path: str | Path, records: Sequence[Record]) -> np.ndarray:
    """[N, 4] scores aligned to ``records`` by ``id`` from a JSONL file whose lines hold ``id`` and either
    ``pred`` (omnidistill predictions) or ``labels`` (e.g. an LLM judge's labels); missing values are NaN."""
    path = Path(path)
    by_id: dict[str, list[float]] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            scores = obj.get("pred", obj.get("labels"))
            by_id[str(obj["id"])] = [np.nan if scores.get(d) is None else float(scores[d]) for d in DIMENSIONS]
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError, ValueError) as err:
            raise DataError(f"{path}:{lineno}: expected an object with 'id' and 'pred' or 'labels' ({err})") from None
    missing = [r.id for r in records if r.id not in by_id]
    if missing:
        raise DataError(f"{path}: no prediction for {len(missing)} item(s), e.g. {', '.join(missing[:3])}")
    return np.array([by_id[r.id] for r in records], np.float64)


def compare_judges(records: Sequence[Record], judges: dict[str, np.ndarray]) -> dict:
    """Headline metrics per judge, overall and by task / language (cells a judge did not score are skipped)."""
    gold, mask = gold_arrays(records)
    out = {}
    for name, pred in judges.items():
        m = mask & np.isfinite(pred)
        p = np.nan_to_num(pred)
        out[name] = {
            "overall": regression_metrics(p, gold, m),
            "by_task": grouped_metrics(p, gold, m, [r.task for r in records]),
            "by_lang": grouped_metrics(p, gold, m, [r.lang for r in records]),
        }
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
    for section, label in (("by_task", "task"), ("by_lang", "language")):
        groups = sorted({g for n in names for g in comparison[n][section]})
        lines += ["", f"MAE by {label}:", "", f"| {label} | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for g in groups:
            lines.append(
                f"| {g} | "
                + " | ".join(f"{comparison[n][section][g]['mae']:.3f}" if g in comparison[n][section] else "–" for n in names)
                + " |"
            )
    return "\n".join(lines) + "\n"
