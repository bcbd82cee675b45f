"""Evaluation reports: overall / per-dimension / per-task / per-language metrics as JSON and Markdown."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.metrics import grouped_metrics, regression_metrics, weighted_group_mae


def gold_arrays(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    gold = np.array([[0.0 if v is None else v for v in r.labels] for r in records], np.float32)
    mask = np.array([[v is not None for v in r.labels] for r in records], bool)
    return gold, mask


def build_report(records: Sequence[Record], pred: np.ndarray) -> dict:
    """All metrics of predictions ``pred`` [N, 4] against the records' labels."""
    gold, mask = gold_arrays(records)
    per_lang = grouped_metrics(pred, gold, mask, [r.lang for r in records])
    return {
        "overall": regression_metrics(pred, gold, mask),
        "by_task": grouped_metrics(pred, gold, mask, [r.task for r in records]),
        "by_lang": per_lang,
        "lang_mae_weighted": weighted_group_mae(per_lang),
    }


def _fmt(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _row(name: str, m: dict) -> str:
    cells = [name, str(m.get("items", "")), *(_fmt(m[k]) for k in ("mae", "rmse", "pearson", "acc1"))]
    return "| " + " | ".join(cells) + " |"


def report_markdown(report: dict, title: str = "Evaluation") -> str:
    """A readable Markdown rendering of :func:`build_report`'s output."""
    head = "| | items | MAE | RMSE | Pearson r | Acc@±1 |\n|---|---:|---:|---:|---:|---:|"
    ov = report["overall"]
    lines = [f"## {title}", "", head, _row("**overall**", ov)]
    for dim in DIMENSIONS:
        lines.append(_row(dim, {**ov["dimensions"][dim], "items": ov["dimensions"][dim]["n"]}))
    lines += [
        "",
        f"MAE averaged over dimensions: {_fmt(ov['mae_dims'])}; test-size-weighted language MAE: {_fmt(report['lang_mae_weighted'])}",
        "",
    ]
    for section, label in (("by_task", "task"), ("by_lang", "language")):
        lines += [f"### By {label}", "", head.replace("| |", f"| {label} |", 1)]
        lines += [_row(name, m) for name, m in report[section].items()]
        lines.append("")
    return "\n".join(lines)


def write_report(report: dict, out_dir: str | Path, name: str = "report", title: str = "Evaluation") -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    md_path.write_text(report_markdown(report, title), encoding="utf-8")
    return json_path, md_path
