"""Percentile bootstrap confidence intervals over items (resampling items, keeping their cells)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def bootstrap_ci(
    stat: Callable[[np.ndarray], float], n_items: int, *, samples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """(low, high) of ``stat(indices)`` over ``samples`` resamples of item indices."""
    if n_items < 2 or samples <= 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    values = np.array([stat(rng.integers(0, n_items, n_items)) for _ in range(samples)], np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    alpha = (1 - level) / 2
    return float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))
