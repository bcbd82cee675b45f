"""Correlation coefficients of two score vectors: Pearson r and Spearman rho (ranks from scipy).

``pearson`` stays a few lines of numpy rather than ``scipy.stats.pearsonr`` because the reports need
NaN (not a warning and an exception path) when a side is constant or has fewer than two points.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata as _scipy_rankdata


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r; NaN when either side is constant or there are fewer than 2 points."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size < 2:
        return float("nan")
    xc, yc = x - x.mean(), y - y.mean()
    denom = np.sqrt((xc**2).sum() * (yc**2).sum())
    return float((xc * yc).sum() / denom) if denom > 0 else float("nan")


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks starting at 1; ties get their average rank."""
    return _scipy_rankdata(np.asarray(x), method="average").astype(np.float64)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rho: Pearson correlation of average ranks; NaN if either side is constant."""
    if len(x) < 2:
        return float("nan")
    return pearson(rankdata(x), rankdata(y))
