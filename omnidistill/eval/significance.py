"""Is one judge better than another on these items? Paired tests for ``eval --compare``.

Two tests, each on the cells both judges scored (and the humans labelled):

- **Paired bootstrap** over items (Koehn 2004's resampling, as COMET's ``comet-compare`` and
  SacreBLEU's ``--paired-bs`` use it): both judges' statistics on the same item resamples
  (:func:`~omnidistill.eval.bootstrap.resampled_headlines`), the difference's percentile interval,
  and a two-sided p-value from the resamples on either side of 0 (:func:`bootstrap_p`). It keeps an item's
  four cells together, so it holds for the pooled MAE and Pearson r, whose cells are not independent.
- **Williams' test** (Williams 1959, in the form Steiger 1980 gives) for two Pearson correlations with
  the gold that share it, per dimension, as Graham & Baldwin (EMNLP 2014) apply it to compare evaluation
  metrics against human judgements: with r12 = r(gold, A), r13 = r(gold, B), r23 = r(A, B) over n items,

      t = (r12 - r13) sqrt((n - 1)(1 + r23)) / sqrt(2 K (n - 1) / (n - 3) + ((r12 + r13) / 2)^2 (1 - r23)^3),
      K = 1 - r12^2 - r13^2 - r23^2 + 2 r12 r13 r23,

  with n - 3 degrees of freedom. It assumes the n items independent, so it is given per dimension
  only, not for the pooled cells.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import numpy as np
from scipy import stats

from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.bootstrap import percentile_interval, resampled_headlines
from omnidistill.eval.correlation import pearson

BOOTSTRAPPED = ("mae", "pearson")
"""Pooled statistics whose paired difference is bootstrapped (besides each dimension's MAE)."""


def williams_test(r12: float, r13: float, r23: float, n: int, alternative: str = "two-sided") -> tuple[float, float]:
    """(t, p) of Williams' test that r12 = r(X1, X2) and r13 = r(X1, X3) are equal (module docstring).

    ``alternative``: ``two-sided``, or ``greater`` (r12 > r13, one-sided, as Graham & Baldwin report it).
    NaN for fewer than 4 items or an undefined correlation; t 0 and p 1 for two judges linear in each other.
    """
    if alternative not in ("two-sided", "greater"):
        raise ValueError(f"alternative must be 'two-sided' or 'greater', got {alternative!r}")
    if n < 4 or not all(math.isfinite(r) for r in (r12, r13, r23)):
        return float("nan"), float("nan")
    k = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    denominator = 2 * k * (n - 1) / (n - 3) + ((r12 + r13) / 2) ** 2 * (1 - r23) ** 3
    if denominator <= 1e-12:  # r23 = 1 (then K = 0 too): A and B are linear in each other, so r12 = r13
        return 0.0, 1.0
    t = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)) / math.sqrt(denominator)
    p = stats.t.sf(abs(t), n - 3) * 2 if alternative == "two-sided" else stats.t.sf(t, n - 3)
    return float(t), float(min(p, 1.0))


def judge_differences(
    gold: np.ndarray, mask: np.ndarray, judges: Mapping[str, np.ndarray], *, samples: int = 1000, level: float = 0.95, seed: int = 0
) -> list[dict]:
    """Every pair of ``judges`` (in their order, ``a`` before ``b``): :func:`paired_difference`."""
    return [
        paired_difference(gold, mask, a, judges[a], b, judges[b], samples=samples, level=level, seed=seed)
        for a, b in itertools.combinations(judges, 2)
    ]


def paired_difference(
    gold: np.ndarray,
    mask: np.ndarray,
    name_a: str,
    pred_a: np.ndarray,
    name_b: str,
    pred_b: np.ndarray,
    *,
    samples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> dict:
    """Judge ``a`` against judge ``b`` on the cells both scored (``[N, 4]`` arrays, NaN = not scored).

    ``pooled``: for MAE and Pearson r over all those cells, ``a``'s value, ``b``'s, ``a − b``, its
    ``ci`` and ``p`` from the paired bootstrap (``samples`` 0: no interval or p). ``dimensions``: per
    dimension the same for MAE, and Williams' test of the two Pearson correlations (``r_a``, ``r_b``,
    ``r_ab``, ``items``, ``t``, ``p``; two-sided).
    """
    both = np.asarray(mask, bool) & np.isfinite(pred_a) & np.isfinite(pred_b)
    a, b, g = (np.where(both, x, 0.0).astype(np.float64) for x in (pred_a, pred_b, gold))
    rows = both.any(axis=1)  # items with no common cell take no part, also not in the resamples
    a, b, g, both = a[rows], b[rows], g[rows], both[rows]
    out = {"a": name_a, "b": name_b, "items": int(rows.sum()), "cells": int(both.sum()), "bootstrap_samples": samples}
    boot = samples > 0 and len(g) >= 2
    if boot:
        ra = resampled_headlines(a, g, both, samples=samples, seed=seed)
        rb = resampled_headlines(b, g, both, samples=samples, seed=seed)
    pooled = {}
    for key in BOOTSTRAPPED:
        va, vb = _pooled(key, a[both], g[both]), _pooled(key, b[both], g[both])
        pooled[key] = _difference(va, vb, (ra[key] - rb[key]) if boot else None, level)
    out["pooled"] = pooled
    dims = {}
    for d, name in enumerate(DIMENSIONS):
        on = both[:, d]
        ga, aa, ba = g[on, d], a[on, d], b[on, d]
        resampled = (ra["dim_mae"][:, d] - rb["dim_mae"][:, d]) if boot else None
        mae = _difference(_pooled("mae", aa, ga), _pooled("mae", ba, ga), resampled, level)
        r_a, r_b, r_ab = pearson(ga, aa), pearson(ga, ba), pearson(aa, ba)
        t, p = williams_test(r_a, r_b, r_ab, int(on.sum()))
        dims[name] = {"mae": mae, "pearson": {"r_a": r_a, "r_b": r_b, "r_ab": r_ab, "items": int(on.sum()), "t": t, "p": p}}
    out["dimensions"] = dims
    return out


def _pooled(key: str, pred: np.ndarray, gold: np.ndarray) -> float:
    if pred.size == 0:
        return float("nan")
    return float(np.mean(np.abs(pred - gold))) if key == "mae" else pearson(gold, pred)


def bootstrap_p(resampled: np.ndarray) -> float:
    """Two-sided p that a difference is 0, from its ``B`` finite resampled values:
    ``min(1, 2 (min(#{d ≤ 0}, #{d ≥ 0}) + 1) / (B + 1))``. The +1s, a Monte Carlo test's (Davison &
    Hinkley 1997, ch. 4), keep a finite number of resamples from giving p = 0: the least p that ``B``
    resamples can show is 2 / (B + 1)."""
    finite = resampled[np.isfinite(resampled)]
    if finite.size == 0:
        return float("nan")
    tail = min(int(np.sum(finite <= 0)), int(np.sum(finite >= 0)))
    return float(min(1.0, 2 * (tail + 1) / (finite.size + 1)))


def _difference(value_a: float, value_b: float, resampled: np.ndarray | None, level: float) -> dict:
    """``a``, ``b``, ``diff`` = a − b, and from the resampled differences its percentile ``ci`` and
    :func:`bootstrap_p`."""
    out = {"a": value_a, "b": value_b, "diff": value_a - value_b, "ci": [float("nan"), float("nan")], "p": float("nan")}
    if resampled is not None:
        out["ci"], out["p"] = list(percentile_interval(resampled, level)), bootstrap_p(resampled)
    return out


def differences_markdown(differences: list[dict], level: float = 0.95) -> str:
    """The pairs' pooled differences, then each dimension's, as Markdown tables."""
    if not differences:
        return ""
    samples = differences[0]["bootstrap_samples"]
    boot = f"{round(level * 100)}% intervals and p from a paired bootstrap over items ({samples} resamples)" if samples else "no bootstrap"
    lines = [
        "## Differences between judges",
        "",
        f"On the cells both judges scored; {boot}; Williams' p (two-sided) compares the two judges' Pearson r with the gold, "
        "which share it.",
        "",
        "| a − b | items | MAE a | MAE b | ΔMAE [interval] | p | Pearson a | Pearson b | Δr [interval] | p |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|---:|",
    ]
    for diff in differences:
        m, r = diff["pooled"]["mae"], diff["pooled"]["pearson"]
        lines.append(f"| {diff['a']} − {diff['b']} | {diff['items']} | {_row(m)} | {_row(r)} |")
    lines += ["", "By dimension:", "", "| a − b | dimension | ΔMAE [interval] | p | r a | r b | r(a, b) | items | Williams t | p |"]
    lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for diff in differences:
        for name, dim in diff["dimensions"].items():
            m, w = dim["mae"], dim["pearson"]
            lines.append(
                f"| {diff['a']} − {diff['b']} | {name} | {_estimate(m)} | {_p(m['p'])} | {_num(w['r_a'])} | "
                f"{_num(w['r_b'])} | {_num(w['r_ab'])} | {w['items']} | {_num(w['t'], 2)} | {_p(w['p'])} |"
            )
    return "\n".join(lines) + "\n"


def _row(stat: dict) -> str:
    return f"{_num(stat['a'])} | {_num(stat['b'])} | {_estimate(stat)} | {_p(stat['p'])}"


def _estimate(stat: dict) -> str:
    """The difference, and its interval when there is one."""
    return " ".join(filter(None, (_signed(stat["diff"]), _ci(stat["ci"]))))


def _num(value: float, digits: int = 3) -> str:
    return "–" if not math.isfinite(value) else f"{value:.{digits}f}"


def _signed(value: float) -> str:
    return "–" if not math.isfinite(value) else f"{value:+.3f}"


def _ci(ci: list[float]) -> str:
    return "" if not all(math.isfinite(c) for c in ci) else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


def _p(p: float) -> str:
    return "–" if not math.isfinite(p) else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"
