"""Combine several judgments of one item (several judges, or several samples of one judge)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from omnidistill.dimensions import DIMENSIONS, SCORE_MAX, SCORE_MIN

METHODS = ("mean", "median", "majority")


NEUTRAL = (SCORE_MIN + SCORE_MAX) / 2


def majority_with_fallback(values: Sequence[float]) -> float:
    """The value a strict majority gave (e.g. 2 of 3), else the scale's neutral midpoint (3 on 1-5).

    Paper 002 (L84): keep the score that at least two of three raters gave; when all differ, use the
    neutral score of the scale.
    """
    counts = Counter(values)
    value, count = counts.most_common(1)[0]
    return float(value) if count * 2 > len(values) else NEUTRAL


def aggregate(judgments: Sequence[dict[str, float]], method: str = "mean") -> dict[str, float]:
    """One label per dimension from valid judgments ({dimension: score})."""
    if method not in METHODS:
        raise ValueError(f"unknown aggregation {method!r} (available: {', '.join(METHODS)})")
    if not judgments:
        raise ValueError("nothing to aggregate")
    out = {}
    for dim in DIMENSIONS:
        values = [j[dim] for j in judgments if j.get(dim) is not None]
        if not values:
            continue
        if method == "mean":
            out[dim] = float(np.mean(values))
        elif method == "median":
            out[dim] = float(np.median(values))
        else:
            out[dim] = majority_with_fallback(values)
    return out
