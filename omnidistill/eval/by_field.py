"""Metrics per value of a field (``eval --group-by system``) and how well the values' mean scores agree.

Each value of the field gets the report's per-task metrics (:func:`regression_metrics`) plus its mean
prediction and mean label per dimension, both over the labelled cells. Across the values, the mean
predictions are correlated with the mean labels per dimension (Pearson r and Kendall tau_b): the
group-level agreement that metric meta-evaluation calls system-level when the field names systems.
The OmniScore paper reports item-level metrics only (per task and language, §5); the group level is
this library's addition. Items without the field (:data:`~omnidistill.data.own_fields.MISSING`) get
their own row but are not a value in the group level, which needs at least
:data:`MIN_GROUPS` values with labels in a dimension (NaN otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from omnidistill.data.own_fields import MISSING
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.correlation import pearson
from omnidistill.eval.metrics import regression_metrics
from omnidistill.eval.ranking import pair_counts

MIN_GROUPS = 3
"""Fewer values than this have no group-level correlation (two points always correlate at ±1)."""


def _masked_mean(values: np.ndarray, mask: np.ndarray) -> float:
    return float(values[mask].mean()) if mask.any() else float("nan")


def field_report(
    pred: np.ndarray, gold: np.ndarray, mask: np.ndarray, values: Sequence[str], epsilon: dict[str, float] | None = None
) -> dict:
    """``{"groups": {value: metrics + mean_pred + mean_label}, "group_level": {dimension: {groups,
    pearson, kendall}}}`` for one field whose value per item is ``values``."""
    values = np.asarray(values, dtype=object)
    groups: dict[str, dict] = {}
    for value in sorted(set(values.tolist())):
        rows = values == value
        p, g, m = pred[rows], gold[rows], mask[rows]
        metrics = regression_metrics(p, g, m, epsilon)
        metrics["mean_pred"] = {dim: _masked_mean(p[:, d], m[:, d]) for d, dim in enumerate(DIMENSIONS)}
        metrics["mean_label"] = {dim: _masked_mean(g[:, d], m[:, d]) for d, dim in enumerate(DIMENSIONS)}
        groups[value] = metrics
    level = {}
    for dim in DIMENSIONS:
        labelled = [m for v, m in groups.items() if v != MISSING and m["dimensions"][dim]["n"]]
        label_means = np.array([m["mean_label"][dim] for m in labelled], np.float64)
        pred_means = np.array([m["mean_pred"][dim] for m in labelled], np.float64)
        enough = len(labelled) >= MIN_GROUPS
        level[dim] = {
            "groups": len(labelled),
            "pearson": pearson(pred_means, label_means) if enough else float("nan"),
            "kendall": pair_counts(label_means, pred_means, 0.0).tau_b if enough else float("nan"),
        }
    return {"groups": groups, "group_level": level}
