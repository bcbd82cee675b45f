"""Distributions over the Likert levels 1..5: what ``loss.name: distribution`` trains on, and the gold
side of the evaluation's NLL.

A record's training distribution per dimension is, in order of preference:

1. its ``label_dist`` (the teacher's distribution: log-probabilities, samples, or several judges);
2. else the empirical distribution of its ``annotations`` (several raters), each rating counted once;
3. else none: the dimension is masked out of the distribution loss (a zero row).

A rating between two levels (e.g. 3.5, the mean of two judges) puts its mass on its two neighbouring
levels in proportion to closeness (3.5 -> half on 3, half on 4), so that the distribution's expected
value is the rating itself; an integer rating is one-hot.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from omnidistill.data.schema import Record
from omnidistill.dimensions import NUM_DIMENSIONS, NUM_LEVELS

LEVELS = np.arange(1, NUM_LEVELS + 1, dtype=np.float64)


def level_split(value: float) -> np.ndarray:
    """A rating in [1, 5] -> [5] probabilities on its two neighbouring levels (one-hot when integer)."""
    return np.clip(1.0 - np.abs(value - LEVELS), 0.0, 1.0)


def empirical(ratings: Sequence[float]) -> np.ndarray:
    """The mean of :func:`level_split` over several ratings of one dimension ([5], sums to 1)."""
    return np.mean([level_split(r) for r in ratings], axis=0)


def record_distribution(record: Record) -> np.ndarray:
    """float32 [4, 5]: per dimension ``label_dist``, else the annotations' empirical distribution, else
    zeros (no distribution for that dimension)."""
    out = np.zeros((NUM_DIMENSIONS, NUM_LEVELS), np.float32)
    for d in range(NUM_DIMENSIONS):
        given = record.label_dist[d] if record.label_dist else None
        if given is not None:
            out[d] = given
            continue
        ratings = [a[d] for a in record.annotations if a[d] is not None]
        if ratings:
            out[d] = empirical(ratings)
    return out


def gold_distribution(record: Record) -> np.ndarray:
    """float64 [4, 5]: the gold labels as a distribution, for the NLL of evaluation: the annotations'
    empirical distribution when the record has annotations, else its ``labels`` split between
    neighbouring levels; NaN rows where the dimension has no label."""
    out = np.full((NUM_DIMENSIONS, NUM_LEVELS), np.nan)
    for d in range(NUM_DIMENSIONS):
        ratings = [a[d] for a in record.annotations if a[d] is not None]
        if ratings:
            out[d] = empirical(ratings)
        elif record.labels[d] is not None:
            out[d] = level_split(record.labels[d])
    return out


def distribution_matrix(records: Sequence[Record]) -> np.ndarray:
    """:func:`record_distribution` of many records: float32 [N, 4, 5]."""
    if not records:
        return np.zeros((0, NUM_DIMENSIONS, NUM_LEVELS), np.float32)
    return np.stack([record_distribution(r) for r in records])


def expected_level(dist: np.ndarray) -> np.ndarray:
    """Expected level of distributions over 1..5 (last axis)."""
    return np.sum(dist * LEVELS, axis=-1)


def level_std(dist: np.ndarray) -> np.ndarray:
    """Standard deviation of distributions over 1..5 (last axis)."""
    mean = expected_level(dist)
    return np.sqrt(np.maximum(np.sum(dist * (LEVELS - mean[..., None]) ** 2, axis=-1), 0.0))
