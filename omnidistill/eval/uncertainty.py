"""How good a model's doubt is: for heads with a distribution over levels 1..5 (``classification``,
``ordinal``), the evaluation adds

- ``nll``: the negative log-likelihood of the gold labels under the predicted distribution, per cell
  ``-sum_c q_c log p_c`` where ``q`` is the gold label as a distribution (the annotations' empirical
  distribution when the item has annotations, else its label split between neighbouring levels; see
  :func:`omnidistill.data.level_dist.gold_distribution`); probabilities are floored at 1e-12;
- ``spearman``: the rank correlation between the predicted standard deviation and the observed
  absolute error |score - gold| (positive: the model doubts where it errs);
- ``calibration``: the cells in ten equal-count bins of predicted standard deviation (confidence
  deciles, most confident first), each with its mean standard deviation, the absolute error the
  model expects (``sum_c p_c |c - score|``), the observed mean absolute error, and Acc@±1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from omnidistill.data.level_dist import LEVELS, gold_distribution, level_std
from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.correlation import spearman

BINS = 10
FLOOR = 1e-12


def cell_nll(level_probs: np.ndarray, gold_dist: np.ndarray) -> np.ndarray:
    """``-sum_c q_c log p_c`` per cell ([..., 5] inputs -> [...]); NaN where ``gold_dist`` is NaN."""
    return -np.sum(gold_dist * np.log(np.maximum(level_probs.astype(np.float64), FLOOR)), axis=-1)


def calibration_bins(std: np.ndarray, expected_err: np.ndarray, err: np.ndarray, bins: int = BINS) -> list[dict]:
    """Cells in ``bins`` equal-count bins of predicted std (ascending), with their summaries."""
    order = np.argsort(std, kind="stable")
    out = []
    for part in np.array_split(order, bins):
        if part.size == 0:
            continue
        out.append(
            {
                "cells": int(part.size),
                "std_low": float(std[part].min()),
                "std_high": float(std[part].max()),
                "std": float(std[part].mean()),
                "expected_abs_error": float(expected_err[part].mean()),
                "abs_error": float(err[part].mean()),
                "acc1": float(np.mean(err[part] <= 1.0 + 1e-9)),
            }
        )
    return out


def uncertainty_report(records: Sequence[Record], scores: np.ndarray, level_probs: np.ndarray) -> dict:
    """``nll``, ``spearman`` (overall and per dimension) and ``calibration`` bins over the labelled cells."""
    gold = np.stack([gold_distribution(r) for r in records])  # [N, 4, 5], NaN rows where unlabelled
    labels = np.array([[np.nan if v is None else v for v in r.labels] for r in records], np.float64)
    mask = ~np.isnan(labels)
    scores = scores.astype(np.float64)
    std = level_std(level_probs.astype(np.float64))
    expected_err = np.sum(level_probs * np.abs(LEVELS - scores[..., None]), axis=-1)
    err = np.abs(scores - labels)
    nll = cell_nll(level_probs, gold)

    def summary(cells: np.ndarray) -> dict:
        return {
            "nll": float(np.mean(nll[cells])),
            "spearman": spearman(std[cells], err[cells]) if cells.sum() > 1 else float("nan"),
            "std": float(np.mean(std[cells])),
            "n": int(cells.sum()),
        }

    report = {**summary(mask), "dimensions": {}}
    for d, dim in enumerate(DIMENSIONS):
        only = np.zeros_like(mask)
        only[:, d] = mask[:, d]
        report["dimensions"][dim] = summary(only)
    report["calibration"] = calibration_bins(std[mask], expected_err[mask], err[mask])
    return report


def uncertainty_markdown(report: dict) -> list[str]:
    """The report's uncertainty section (Markdown lines)."""
    lines = [
        "### Uncertainty (the predicted distribution over levels 1..5)",
        "",
        "| | NLL of gold | Spearman(std, abs error) | mean std | cells |",
        "|---|---:|---:|---:|---:|",
    ]
    rows = [("**overall**", report), *report["dimensions"].items()]
    lines += [f"| {name} | {m['nll']:.3f} | {m['spearman']:.3f} | {m['std']:.3f} | {m['n']} |" for name, m in rows]
    lines += [
        "",
        "Calibration: cells in equal-count bins of predicted std, most confident first.",
        "",
        "| bin | std range | mean std | expected abs error | observed abs error | Acc@±1 | cells |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for i, b in enumerate(report["calibration"], start=1):
        lines.append(
            f"| {i} | {b['std_low']:.3f}–{b['std_high']:.3f} | {b['std']:.3f} | {b['expected_abs_error']:.3f} | "
            f"{b['abs_error']:.3f} | {b['acc1']:.3f} | {b['cells']} |"
        )
    lines.append("")
    return lines
