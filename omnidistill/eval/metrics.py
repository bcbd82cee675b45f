"""Regression metrics on the 1-5 scale with per-cell masks (missing gold dimensions are ignored).

Definitions (``pred``, ``gold``, ``mask`` are [N, 4]; a *cell* is one (item, dimension) with mask 1):
- ``mae``/``rmse``/``pearson``/``acc1`` pool all valid cells; Acc@±1 = share of cells with |pred-gold| <= 1.
- ``mae_dims`` = mean of the four per-dimension MAEs (OmniScore's dev-selection criterion).
- L-MAE (OmniScore Table 9, "test-size-weighted language-wise MAE"): ``sum_l w_l MAE_l / sum_l w_l``.
  With ``w_l`` = the evaluated items of language ``l`` this equals the pooled MAE whenever every item
  has all four labels; the paper's weights are its Table 14 counts (they sum to 16,175, not to the
  8,617 test items), so the weights can come from a file (:func:`load_group_weights`).
- Task-macro MAE (Table 7/13 "Avg"): the unweighted mean of the per-task MAEs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from omnidistill.config import ConfigError, load_yaml
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.correlation import pearson, spearman
from omnidistill.eval.ranking import pair_counts


def cell_metrics(pred: np.ndarray, gold: np.ndarray, epsilon: float | None = None) -> dict[str, float]:
    """MAE, RMSE, Pearson, Spearman, Kendall tau_b and Acc@±1 of flat vectors of valid cells; with
    ``epsilon``, also the tie-calibrated pairwise accuracy ``pairwise_acc`` at that tie threshold."""
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


def weighted_mae(maes: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """``sum_g w_g MAE_g / sum_g w_g`` over the groups of ``maes`` (groups with a NaN MAE are left out).

    Every group of ``maes`` needs a weight; a missing one is an error, not a silent zero.
    """
    missing = sorted(set(maes) - set(weights))
    if missing:
        raise ValueError(f"no weight for group(s) {', '.join(missing)} (weights given for {', '.join(sorted(weights))})")
    pairs = [(float(weights[g]), float(m)) for g, m in maes.items() if not math.isnan(m)]
    total = sum(w for w, _ in pairs)
    return sum(w * m for w, m in pairs) / total if total > 0 else float("nan")


def weighted_group_mae(per_group: dict[str, dict], weights: Mapping[str, float] | None = None) -> float:
    """L-MAE over ``grouped_metrics`` output: weights from ``weights`` or, by default, each group's items."""
    maes = {g: m["mae"] for g, m in per_group.items() if m["items"] > 0}
    return weighted_mae(maes, weights if weights is not None else {g: per_group[g]["items"] for g in maes})


def macro_mae(per_group: dict[str, dict]) -> float:
    """Unweighted mean of the groups' MAEs (OmniScore Table 7's "Avg" over tasks)."""
    maes = [m["mae"] for m in per_group.values() if m["items"] > 0 and not math.isnan(m["mae"])]
    return float(np.mean(maes)) if maes else float("nan")


def load_group_weights(path: str | Path) -> dict[str, float]:
    """Group weights (e.g. language -> test items) from a JSON or YAML mapping; values must be >= 0 numbers."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else load_yaml(text, path)
    except (OSError, json.JSONDecodeError, ConfigError) as err:
        raise ValueError(f"{path}: cannot read group weights ({err})") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: expected a mapping of group name to weight")
    out = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{path}: weight of {key!r} must be a non-negative number, got {value!r}")
        out[str(key)] = float(value)
    return out


def check_scores(values: np.ndarray, what: str, ids: Sequence[str] | None = None, mask: np.ndarray | None = None) -> None:
    """Raise ``ValueError`` naming the item and dimension of the first non-finite or out-of-[1, 5] score.

    ``values`` is [N, 4]; cells where ``mask`` is False are not checked (missing labels).
    """
    values = np.asarray(values, np.float64)
    check = np.ones(values.shape, bool) if mask is None else np.asarray(mask, bool)
    bad = check & ~(np.isfinite(values) & (values >= 1.0 - 1e-6) & (values <= 5.0 + 1e-6))
    if bad.any():
        i, d = map(int, np.argwhere(bad)[0])
        item = ids[i] if ids is not None else f"row {i}"
        raise ValueError(
            f"{what}: item {item}, {DIMENSIONS[d]} = {values[i, d]!r} is not a number in [1, 5] ({int(bad.sum())} such cell(s))"
        )
