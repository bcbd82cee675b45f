"""Inter-rater agreement on the 1-5 scale: r_wg(j), Fleiss' kappa, Cohen's kappa, rater-pair tables.

- ``rwg_j``: for one item rated by several raters on J dimensions (the J "items" of the scale),
  ``s2`` = mean over dimensions of the raters' variance (``ddof`` 1 by default), and with the null
  variance ``sigma2`` (2 = uniform null on a 5-point scale, 4 = maximum disagreement)
  r*_wg(j) = 1 - s2 / sigma2 (Lindell's form, used by OmniScore) and the James et al. (1984) form
  r_wg(j) = J (1 - s2/sigma2) / (J (1 - s2/sigma2) + s2/sigma2).
- ``fleiss_kappa``: subjects x categories count matrix; categories are rounded scores 1..5.
- ``cohen_kappa``: two raters, rounded scores, unweighted or quadratic-weighted.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np

NULL_VARIANCE = {"uniform": 2.0, "max_disagreement": 4.0}
LEVELS = np.arange(1, 6)


def round_scores(x: np.ndarray) -> np.ndarray:
    """Round to the nearest level 1..5 (halves round up, as a judge would)."""
    return np.clip(np.floor(np.asarray(x, np.float64) + 0.5), 1, 5).astype(int)


def rwg_j(ratings: np.ndarray, null: str = "uniform", ddof: int = 1) -> dict[str, float]:
    """``ratings`` [raters, J] for one item -> {'rwg_star': ..., 'rwg_j': ...}."""
    sigma2 = NULL_VARIANCE[null]
    ratings = np.asarray(ratings, np.float64)
    if ratings.shape[0] <= ddof:
        return {"rwg_star": float("nan"), "rwg_j": float("nan")}
    s2 = float(np.nanmean(np.nanvar(ratings, axis=0, ddof=ddof)))
    j = ratings.shape[1]
    ratio = s2 / sigma2
    star = 1.0 - ratio
    denom = j * (1.0 - ratio) + ratio
    return {"rwg_star": star, "rwg_j": j * (1.0 - ratio) / denom if denom != 0 else float("nan")}


def mean_rwg(items: Sequence[np.ndarray], null: str = "uniform", ddof: int = 1) -> dict[str, float]:
    """Average r*_wg(j) and r_wg(j) over items (each [raters, J])."""
    values = [rwg_j(r, null, ddof) for r in items if np.asarray(r).shape[0] > ddof]
    if not values:
        return {"rwg_star": float("nan"), "rwg_j": float("nan"), "items": 0}
    return {
        "rwg_star": float(np.mean([v["rwg_star"] for v in values])),
        "rwg_j": float(np.nanmean([v["rwg_j"] for v in values])),
        "items": len(values),
    }


def fleiss_kappa(counts: np.ndarray) -> float:
    """Fleiss' kappa of a [subjects, categories] matrix where every row sums to the same n raters."""
    counts = np.asarray(counts, np.float64)
    n = counts.sum(axis=1)
    if len(counts) == 0 or not np.allclose(n, n[0]) or n[0] < 2:
        return float("nan")
    n = n[0]
    p_i = (np.sum(counts**2, axis=1) - n) / (n * (n - 1))
    p_j = counts.sum(axis=0) / counts.sum()
    pe = float(np.sum(p_j**2))
    return float((p_i.mean() - pe) / (1 - pe)) if pe < 1 else float("nan")


def category_counts(ratings: np.ndarray) -> np.ndarray:
    """[subjects, raters] scores -> [subjects, 5] counts of rounded levels."""
    r = round_scores(ratings)
    return np.stack([(r == level).sum(axis=1) for level in LEVELS], axis=1)


def cohen_kappa(a: np.ndarray, b: np.ndarray, weights: str | None = None) -> float:
    """Cohen's kappa of two raters' rounded scores; ``weights='quadratic'`` for the weighted form."""
    ra, rb = round_scores(a) - 1, round_scores(b) - 1
    k = len(LEVELS)
    observed = np.zeros((k, k))
    np.add.at(observed, (ra, rb), 1)
    observed /= observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    if weights == "quadratic":
        idx = np.arange(k)
        w = (idx[:, None] - idx[None, :]) ** 2 / (k - 1) ** 2
    else:
        w = 1.0 - np.eye(k)
    denom = float(np.sum(w * expected))
    return 1.0 - float(np.sum(w * observed)) / denom if denom > 0 else float("nan")


def rater_pair_table(raters: dict[str, np.ndarray], mask: np.ndarray) -> list[dict]:
    """Pairwise agreement (Cohen kappa, quadratic kappa, MAE, Acc@±1) between named raters.

    ``raters`` maps a name to [N, 4] scores; ``mask`` [N, 4] selects cells every rater has.
    """
    rows = []
    for (na, a), (nb, b) in combinations(raters.items(), 2):
        x, y = a[mask], b[mask]
        rows.append(
            {
                "a": na,
                "b": nb,
                "cells": int(mask.sum()),
                "cohen_kappa": cohen_kappa(x, y),
                "quadratic_kappa": cohen_kappa(x, y, "quadratic"),
                "mae": float(np.mean(np.abs(x - y))),
                "acc1": float(np.mean(np.abs(x - y) <= 1 + 1e-9)),
            }
        )
    return rows
