"""Regression metrics on the 1-5 scale with per-cell masks (missing gold dimensions are ignored).

Definitions (``pred``, ``gold``, ``mask`` are [N, 4]; a *cell* is one (item, dimension) with mask 1):
- ``mae``/``rmse``/``pearson``/``acc1`` pool all valid cells; Acc@±1 = share of cells with |pred-gold| <= 1.
- ``mae_dims`` = mean of the four per-dimension MAEs (OmniScore's dev-selection criterion).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from omnidistill.dimensions import DIMENSIONS


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r; NaN when either side is constant or there are fewer than 2 points."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size < 2:
        return float("nan")
    xc, yc = x - x.mean(), y - y.mean()
    denom = np.sqrt((xc**2).sum() * (yc**2).sum())
    return float((xc * yc).sum() / denom) if denom > 0 else float("nan")


def cell_metrics(pred: np.ndarray, gold: np.ndarray, epsilon: float | None = None) -> dict[str, float]:
    """MAE, RMSE, Pearson, Spearman, Kendall tau_b and Acc@±1 of flat vectors of valid cells; with
    ``epsilon``, also the tie-calibrated pairwise accuracy ``pairwise_acc`` at that tie threshold."""
    from omnidistill.eval.ranking import pair_counts, spearman

    nan = float("nan")
    if pred.size == 0:
        return {"mae": nan, "rmse": nan, "pearson": nan, "spearman": nan, "kendall": nan, "acc1": nan, "n": 0}
    err = pred.astype(np.float64) - gold.astype(np.float64)
    out = {
        "mae": float(np.mean(np.abs(err))),
        "rmse": float(np.sqrt(np.mean(err**2))),
        "pearson": pearson(pred, gold),
        "spearman": spearman(pred, gold),
        "kendall": pair_counts(gold, pred, 0.0).tau_b if pred.size > 1 else nan,
        "acc1": float(np.mean(np.abs(err) <= 1.0 + 1e-9)),
        "n": int(pred.size),
    }
    if epsilon is not None:
        out["pairwise_acc"] = pair_counts(gold, pred, epsilon).acc_eq if pred.size > 1 else nan
    return out


def regression_metrics(pred: np.ndarray, gold: np.ndarray, mask: np.ndarray, epsilon: dict[str, float] | None = None) -> dict:
    """Overall (pooled cells) and per-dimension metrics, plus ``mae_dims``. ``epsilon`` maps each
    dimension to its pairwise-accuracy tie threshold (pairwise accuracy is per dimension only)."""
    pred, gold, mask = np.asarray(pred), np.asarray(gold), np.asarray(mask).astype(bool)
    out = cell_metrics(pred[mask], gold[mask])
    out["items"] = int(mask.any(axis=1).sum())
    per_dim = {}
    for d, name in enumerate(DIMENSIONS):
        eps = None if epsilon is None else epsilon[name]
        per_dim[name] = cell_metrics(pred[mask[:, d], d], gold[mask[:, d], d], eps)
    out["dimensions"] = per_dim
    maes = [m["mae"] for m in per_dim.values() if m["n"]]
    out["mae_dims"] = float(np.mean(maes)) if maes else float("nan")
    return out


def grouped_metrics(
    pred: np.ndarray, gold: np.ndarray, mask: np.ndarray, groups: Sequence[str], epsilon: dict[str, float] | None = None
) -> dict[str, dict]:
    """``regression_metrics`` for each distinct value of ``groups`` (one label per item)."""
    groups = np.asarray(groups)
    return {
        str(g): regression_metrics(pred[groups == g], gold[groups == g], mask[groups == g], epsilon) for g in sorted(set(groups.tolist()))
    }


def weighted_group_mae(per_group: dict[str, dict]) -> float:
    """Test-size-weighted MAE over groups: sum_g items_g * MAE_g / sum_g items_g (the paper's L-MAE)."""
    items = np.array([m["items"] for m in per_group.values()], np.float64)
    maes = np.array([m["mae"] for m in per_group.values()], np.float64)
    keep = items > 0
    return float((items[keep] * maes[keep]).sum() / items[keep].sum()) if keep.any() else float("nan")
