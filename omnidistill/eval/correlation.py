"""Correlation coefficients of two score vectors: Pearson r and Spearman rho.

``pearson`` stays a few lines of numpy rather than ``scipy.stats.pearsonr`` because the reports need
NaN (not a warning and an exception path) when a side is constant or has fewer than two points.
``rankdata`` is numpy too (scipy's average ranks, its tests' oracle): importing ``scipy.stats`` cost
every training process about a second, for the dev evaluation's Spearman rho alone.
"""

from __future__ import annotations

import numpy as np


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r; NaN when either side is constant or there are fewer than 2 points."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size < 2:
        return float("nan")
    xc, yc = x - x.mean(), y - y.mean()
    denom = np.sqrt((xc**2).sum() * (yc**2).sum())
    return float((xc * yc).sum() / denom) if denom > 0 else float("nan")


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks starting at 1; ties get their average rank (``scipy.stats.rankdata(x, method="average")``,
    NaN everywhere when ``x`` holds a NaN, as scipy propagates it)."""
    x = np.asarray(x).ravel()
    if x.dtype.kind == "f" and np.isnan(x).any():
        return np.full(x.shape, np.nan)
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])  # first position of each distinct value
    ends = np.r_[starts[1:], x.size]  # one past its last
    average = (starts + 1 + ends) / 2.0  # the mean of ranks starts+1 .. ends
    ranks = np.empty(x.size, np.float64)
    ranks[order] = np.repeat(average, ends - starts)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rho: Pearson correlation of average ranks; NaN if either side is constant."""
    if len(x) < 2:
        return float("nan")
    return pearson(rankdata(x), rankdata(y))
