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
    return percentile_interval(values, level)


def resample_counts(n_items: int, samples: int, seed: int = 0, chunk: int = 100):
    """Yield [chunk, n_items] matrices of how often each item is drawn in each resample.

    The draws are exactly those of :func:`bootstrap_ci` with the same seed (one
    ``integers(0, n, n)`` stream per resample, in order), so both give the same resamples.
    """
    rng = np.random.default_rng(seed)
    for start in range(0, samples, chunk):
        rows = min(chunk, samples - start)
        idx = rng.integers(0, n_items, (rows, n_items))
        flat = (np.arange(rows)[:, None] * n_items + idx).ravel()
        yield np.bincount(flat, minlength=rows * n_items).reshape(rows, n_items).astype(np.float64)


def percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """The central ``level`` percentile interval of the finite ``values`` (NaN, NaN if none is)."""
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    alpha = (1 - level) / 2
    return float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))


HEADLINE_KEYS = ("mae", "rmse", "pearson", "acc1", "mae_dims")
"""The statistics :func:`headline_intervals` gives an interval for (the report's ``ci95``)."""


def headline_intervals(
    pred: np.ndarray, gold: np.ndarray, mask: np.ndarray, *, samples: int = 1000, level: float = 0.95, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """Percentile intervals of pooled MAE, RMSE, Pearson r, Acc@±1 and ``mae_dims`` over item resamples."""
    if len(pred) < 2 or samples <= 0:
        return {k: (float("nan"), float("nan")) for k in HEADLINE_KEYS}
    values = resampled_headlines(pred, gold, mask, samples=samples, seed=seed)
    return {k: percentile_interval(values[k], level) for k in HEADLINE_KEYS}


def resampled_headlines(pred: np.ndarray, gold: np.ndarray, mask: np.ndarray, *, samples: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Each headline statistic on each of ``samples`` item resamples ([samples] arrays), and each
    dimension's MAE (``dim_mae``, [samples, 4]; NaN where a resample has no cell of it).

    Vectorised: each resample is a row of item counts, and every statistic is a ratio of count-weighted
    per-item sums (one matrix product per chunk of resamples), equal to recomputing the metric on the
    resampled items. The resamples depend only on the number of items, ``samples`` and ``seed``
    (:func:`resample_counts`), so two judges' statistics under the same arguments are paired.
    """
    pred, gold, mask = np.asarray(pred, np.float64), np.asarray(gold, np.float64), np.asarray(mask, bool)
    m = mask.astype(np.float64)
    err = np.where(mask, pred - gold, 0.0)
    p, g = np.where(mask, pred, 0.0), np.where(mask, gold, 0.0)
    per_item = np.stack(
        [m.sum(1), np.abs(err).sum(1), (err**2).sum(1), ((np.abs(err) <= 1 + 1e-9) & mask).sum(1), p.sum(1), g.sum(1), (p * p).sum(1),
         (g * g).sum(1), (p * g).sum(1)],
        axis=1,
    )  # fmt: skip
    per_dim = np.concatenate([m, np.abs(err)], axis=1)  # [N, 8]: cells and absolute errors per dimension
    values = {k: [] for k in (*HEADLINE_KEYS, "dim_mae")}
    for counts in resample_counts(len(pred), samples, seed):
        cells, abs_err, sq_err, within, sp, sg, spp, sgg, spg = (counts @ per_item).T
        with np.errstate(invalid="ignore", divide="ignore"):
            values["mae"].append(abs_err / cells)
            values["rmse"].append(np.sqrt(sq_err / cells))
            values["acc1"].append(within / cells)
            cov = cells * spg - sp * sg
            var = (cells * spp - sp**2) * (cells * sgg - sg**2)
            values["pearson"].append(np.where(var > 0, cov / np.sqrt(np.where(var > 0, var, 1.0)), np.nan))
            dims = counts @ per_dim
            dim_mae = np.where(dims[:, :4] > 0, dims[:, 4:] / dims[:, :4], np.nan)
            values["dim_mae"].append(dim_mae)
            values["mae_dims"].append(np.nanmean(dim_mae, axis=1))
    return {k: np.concatenate(v) for k, v in values.items()}
