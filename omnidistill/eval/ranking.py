"""Rank metrics: Kendall tau_b and tie-calibrated pairwise accuracy (Deutsch et al. 2023).

Pair counts for human scores ``h`` and metric scores ``m`` over all item pairs:
C concordant, D discordant, T_h tied in human only, T_m tied in metric only (|m_i - m_j| <= eps),
T_hm tied in both. ``acc_eq = (C + T_hm) / (C + D + T_h + T_m + T_hm)``.

- :func:`pair_counts` computes the five counts for one ``eps`` exactly in O(n log n) time (sort by
  metric, windows of metric ties by binary search, C and D from per-level suffix counts when the
  human scores take at most 64 distinct values, as Likert means do, else a Fenwick tree). This is
  hand-written rather than ``scipy.stats.kendalltau`` because that has no tie threshold and gives
  only tau, not the five counts that acc_eq and the eps sweep need.
- :func:`calibrate_epsilon` picks ``eps`` maximising ``acc_eq`` over ``{0} U {all |m_i - m_j|}`` with
  one sweep over the sorted pair differences: raising ``eps`` past a pair's |dm| turns a human-tied
  pair into T_hm (+1), a concordant pair into T_m (-1) and a discordant pair into T_m (0), so the best
  ``eps`` is the maximum of a prefix sum. The pairs are built in row chunks (9 bytes each); above
  ``max_pairs`` a uniform sample of pairs is swept instead (``sampled=True`` in the result), and the
  reported accuracy is always recomputed exactly with :func:`pair_counts`.
"""

from __future__ import annotations

import dataclasses

import numpy as np


class _Fenwick:
    def __init__(self, n: int):
        self.tree = np.zeros(n + 1, np.int64)

    def add(self, i: int) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += 1
            i += i & -i

    def prefix(self, i: int) -> int:
        """Number of inserted positions < i."""
        total = 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return int(total)


@dataclasses.dataclass(frozen=True)
class PairCounts:
    concordant: int
    discordant: int
    ties_human: int
    ties_metric: int
    ties_both: int

    @property
    def pairs(self) -> int:
        return self.concordant + self.discordant + self.ties_human + self.ties_metric + self.ties_both

    @property
    def acc_eq(self) -> float:
        return (self.concordant + self.ties_both) / self.pairs if self.pairs else float("nan")

    @property
    def tau_b(self) -> float:
        c, d = self.concordant, self.discordant
        denom = np.sqrt(float(c + d + self.ties_human) * float(c + d + self.ties_metric))
        return (c - d) / denom if denom > 0 else float("nan")


def _window_ends(values: np.ndarray, eps: float) -> np.ndarray:
    """For sorted ``values``: end[i] = first j > i with values[j] - values[i] > eps.

    Binary search on ``values + eps``, then corrected where float rounding of the sum disagrees with
    the pair definition (the test is the difference itself, as in the brute-force count).
    """
    n = len(values)
    idx = np.arange(n)
    ends = np.maximum(np.searchsorted(values, values + eps, side="right"), idx + 1)
    while True:  # too far: the last pair inside the window is not a tie
        over = (ends > idx + 1) & (values[np.maximum(ends - 1, 0)] - values > eps)
        if not over.any():
            break
        ends[over] -= 1
    while True:  # too short: the first pair after the window is a tie
        under = (ends < n) & (values[np.minimum(ends, n - 1)] - values <= eps)
        if not under.any():
            break
        ends[under] += 1
    return ends


def _window_pairs(values: np.ndarray, eps: float) -> int:
    """Number of pairs with |v_i - v_j| <= eps (values sorted ascending)."""
    return int(np.sum(_window_ends(values, eps) - np.arange(len(values)) - 1))


def _check_finite(values: np.ndarray, what: str) -> None:
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise ValueError(f"{what} scores must be finite: position {bad} is {values[bad]!r}")


def _above_below(ranks: np.ndarray, ends: np.ndarray, levels: int) -> tuple[int, int]:
    """Pairs (i, j >= ends[i]) with a higher / lower human rank at j, from per-level suffix counts."""
    n = len(ranks)
    onehot = np.zeros((n + 1, levels), np.int64)
    onehot[np.arange(n), ranks] = 1
    suffix = np.cumsum(onehot[::-1], axis=0)[::-1]  # suffix[k, l] = #{j >= k: rank_j = l}; row n is 0
    below_levels = np.concatenate([np.zeros((n + 1, 1), np.int64), np.cumsum(suffix, axis=1)], axis=1)
    total = below_levels[ends, levels]
    below = below_levels[ends, ranks]
    above = total - below_levels[ends, ranks + 1]
    return int(above.sum()), int(below.sum())


def _above_below_fenwick(ranks: np.ndarray, ms: np.ndarray, eps: float) -> tuple[int, int]:
    n = len(ranks)
    fen = _Fenwick(int(ranks.max()) + 1 if n else 1)
    conc = disc = 0
    j = n  # items order[j:] have m > current threshold and are inserted
    for i in range(n - 1, -1, -1):
        while j > i + 1 and ms[j - 1] - ms[i] > eps:
            j -= 1
            fen.add(int(ranks[j]))
        inserted = n - j
        below = fen.prefix(int(ranks[i]))
        equal = fen.prefix(int(ranks[i]) + 1) - below
        conc += inserted - below - equal
        disc += below
    return conc, disc


def pair_counts(human: np.ndarray, metric: np.ndarray, eps: float = 0.0) -> PairCounts:
    """Exact C, D, T_h, T_m, T_hm for one ``eps``; non-finite scores are an error (not ranked)."""
    h, m = np.asarray(human, np.float64), np.asarray(metric, np.float64)
    _check_finite(h, "human")
    _check_finite(m, "metric")
    n = len(h)
    total = n * (n - 1) // 2
    order = np.argsort(m, kind="mergesort")
    hs, ms = h[order], m[order]
    levels, ranks = np.unique(hs, return_inverse=True)
    ends = _window_ends(ms, eps)
    metric_tied = int(np.sum(ends - np.arange(n) - 1))
    both = sum(_window_pairs(ms[ranks == r], eps) for r in range(len(levels)))
    counts = np.bincount(ranks, minlength=len(levels))
    human_tied = int(np.sum(counts * (counts - 1) // 2))
    # C and D among pairs with m_j > m_i + eps (so not metric-tied), i before j in sorted order.
    if len(levels) <= 64:
        conc, disc = _above_below(ranks, ends, len(levels))
    else:
        conc, disc = _above_below_fenwick(ranks, ms, eps)
    ties_h_only = human_tied - both
    ties_m_only = metric_tied - both
    if conc + disc + ties_h_only + ties_m_only + both != total:
        raise RuntimeError(f"pair counts do not add up to {total} pairs (internal error)")
    return PairCounts(conc, disc, ties_h_only, ties_m_only, both)


def kendall_tau_b(human: np.ndarray, metric: np.ndarray) -> float:
    """Kendall tau_b (exact ties, eps = 0)."""
    return pair_counts(human, metric, 0.0).tau_b


@dataclasses.dataclass(frozen=True)
class Calibration:
    epsilon: float
    acc_eq: float
    tie_fraction_metric: float
    sampled: bool


def _pair_arrays(h: np.ndarray, m: np.ndarray, max_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """|dm| (float32) and sweep weights (+1 human tie, -1 concordant, 0 discordant) of all (or sampled) pairs."""
    n = len(h)
    total = n * (n - 1) // 2
    if total <= max_pairs:
        dists, weights = [], []
        for i in range(n - 1):
            dh = h[i + 1 :] - h[i]
            dm = m[i + 1 :] - m[i]
            dists.append(np.abs(dm))
            weights.append(np.where(dh == 0, 1, np.where(np.sign(dh) == np.sign(dm), -1, 0)).astype(np.int8))
        return np.concatenate(dists), np.concatenate(weights), False
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, max_pairs)
    j = rng.integers(0, n, max_pairs)
    keep = i != j
    dh, dm = h[j[keep]] - h[i[keep]], m[j[keep]] - m[i[keep]]
    w = np.where(dh == 0, 1, np.where(np.sign(dh) == np.sign(dm), -1, 0)).astype(np.int8)
    return np.abs(dm), w, True


def calibrate_epsilon(human: np.ndarray, metric: np.ndarray, *, max_pairs: int = 20_000_000, seed: int = 0) -> Calibration:
    """The tie threshold that maximises acc_eq, by one sweep over sorted pair differences."""
    h, m = np.asarray(human, np.float64), np.asarray(metric, np.float64)
    _check_finite(h, "human")
    _check_finite(m, "metric")
    if len(h) < 2:
        return Calibration(0.0, float("nan"), float("nan"), False)
    dist, weight, sampled = _pair_arrays(h, m, max_pairs, seed)
    order = np.argsort(dist, kind="stable")
    d_sorted, gains = dist[order], np.cumsum(weight[order], dtype=np.int64)
    last_of_run = np.concatenate([d_sorted[1:] != d_sorted[:-1], [True]])  # eps covers equal distances together
    candidates, scores = d_sorted[last_of_run], gains[last_of_run]
    if candidates[0] > 0:  # eps = 0 ties no pair: gain 0
        candidates, scores = np.concatenate([[0.0], candidates]), np.concatenate([[0], scores])
    eps = float(candidates[int(np.argmax(scores))])  # first maximum: the smallest best eps
    counts = pair_counts(h, m, eps)
    return Calibration(eps, counts.acc_eq, (counts.ties_metric + counts.ties_both) / counts.pairs, sampled)
