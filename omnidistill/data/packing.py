"""Packed training rows planned from the token cache's lengths, read per process.

Each epoch is a seeded permutation of the cached examples, cut into windows of ``window`` examples;
within a window, examples go first-fit decreasing (longest first) into ``length``-token rows of at
most ``max_segments`` examples, and the window's rows follow in a seeded random order. The plan
needs only the cached lengths (4 bytes per example), so it is cheap and the same in every process;
a process then reads the tokens of its own rows of a global batch only. Rows are addressed by number
(a grain ``MapDataset``), so the iterator state saved with checkpoints resumes exactly. Unlike grain's
streaming packer, rows never mix two epochs.
"""

from __future__ import annotations

import sys
import threading

import grain
import numpy as np

from omnidistill.data.process_share import process_rows
from omnidistill.data.token_cache import TokenCache
from omnidistill.dimensions import NUM_DIMENSIONS, NUM_LEVELS


def first_fit(lengths: np.ndarray, capacity: int, max_segments: int) -> list[list[int]]:
    """Rows of positions into ``lengths``: each item goes, in order, into the first row with room
    for its tokens and a free slot, or opens a new row."""
    free = np.zeros(len(lengths), np.int64)
    slots = np.zeros(len(lengths), np.int64)
    rows: list[list[int]] = []
    for pos, n in enumerate(lengths.tolist()):
        open_rows = len(rows)
        fits = np.flatnonzero((free[:open_rows] >= n) & (slots[:open_rows] < max_segments))
        row = int(fits[0]) if len(fits) else open_rows
        if row == open_rows:
            rows.append([])
            free[row] = capacity
        free[row] -= n
        slots[row] += 1
        rows[row].append(pos)
    return rows


class PackingPlan:
    """Which cached examples make up each packed row, epoch after epoch (computed when first needed).

    A pure function of the lengths, ``seed`` and the epoch: grain reads rows from several threads at
    once, so epochs are planned under a lock (two threads planning at once would append epochs out
    of order, and the rows, the padding and an exact resume would then depend on thread timing).
    """

    def __init__(self, lengths: np.ndarray, *, length: int, max_segments: int, seed: int, window: int):
        if int(lengths.max(initial=0)) > length:
            raise ValueError(f"an example of {int(lengths.max())} tokens does not fit a packed row of {length}")
        self.lengths, self.length, self.max_segments, self.seed, self.window = lengths, length, max_segments, seed, window
        self._epochs: list[list[np.ndarray]] = []
        self._starts = [0]  # first row number of each planned epoch
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Picklable for grain worker processes: the lock is not carried, each copy makes its own."""
        return {key: value for key, value in self.__dict__.items() if key != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _plan_epoch(self, epoch: int) -> list[np.ndarray]:
        """First-fit decreasing within each window of the epoch's permutation (longest example first:
        on the sample at 32-example windows, 6.6% padding against plain first-fit's 10.4%), then the
        window's rows in a seeded random order, so that a batch's rows are not sorted by length."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.lengths))
        rows = []
        for start in range(0, len(order), self.window):
            members = order[start : start + self.window]
            members = members[np.argsort(-self.lengths[members], kind="stable")]
            window_rows = [members[r] for r in first_fit(self.lengths[members], self.length, self.max_segments)]
            rows += [window_rows[i] for i in rng.permutation(len(window_rows))]
        return rows

    def row(self, number: int) -> np.ndarray:
        """Cached example indices of packed row ``number``."""
        with self._lock:
            while number >= self._starts[-1]:
                self._epochs.append(self._plan_epoch(len(self._epochs)))
                self._starts.append(self._starts[-1] + len(self._epochs[-1]))
            epoch = int(np.searchsorted(self._starts, number, side="right")) - 1
            return self._epochs[epoch][number - self._starts[epoch]]


def packed_row_from_cache(cache: TokenCache, members: np.ndarray, length: int, max_segments: int, pad_id: int) -> dict[str, np.ndarray]:
    """One training row: the members' tokens back to back, ``segment_ids`` 1..K, per-slot labels."""
    ids = np.full(length, pad_id, np.int32)
    segment_ids = np.zeros(length, np.int32)
    labels = np.zeros((max_segments, NUM_DIMENSIONS), np.float32)
    label_mask = np.zeros((max_segments, NUM_DIMENSIONS), np.float32)
    label_dist = np.zeros((max_segments, NUM_DIMENSIONS, NUM_LEVELS), np.float32)
    index = np.full(max_segments, -1, np.int32)
    at = 0
    for slot, i in enumerate(members.tolist()):
        example = cache[i]
        n = len(example["input_ids"])
        ids[at : at + n] = example["input_ids"]
        segment_ids[at : at + n] = slot + 1
        labels[slot], label_mask[slot], label_dist[slot], index[slot] = example["labels"], example["label_mask"], example["label_dist"], i
        at += n
    return {
        "input_ids": ids,
        "segment_ids": segment_ids,
        "attention_mask": (segment_ids > 0).astype(np.int32),
        "labels": labels,
        "label_mask": label_mask,
        "label_dist": label_dist,
        "example_mask": (index >= 0).astype(np.float32),
        "index": index,
    }


class PackedBatches(grain.MapDataset):
    """Endless global batches of packed rows; element ``b`` is this process's share of batch ``b``."""

    def __init__(
        self,
        cache: TokenCache,
        *,
        global_batch: int,
        seed: int,
        length: int,
        max_segments: int,
        pad_id: int,
        window: int,
        process_index: int = 0,
        process_count: int = 1,
    ):
        super().__init__()
        self.cache, self.length, self.max_segments, self.pad_id = cache, length, max_segments, pad_id
        self.plan = PackingPlan(np.asarray(cache.lengths, np.int32), length=length, max_segments=max_segments, seed=seed, window=window)
        self.global_batch, self.rows = global_batch, process_rows(global_batch, process_index, process_count)

    def __len__(self) -> int:
        return sys.maxsize

    def __getitem__(self, batch: int) -> dict[str, np.ndarray]:  # type: ignore[override]
        numbers = range(batch * self.global_batch + self.rows.start, batch * self.global_batch + self.rows.stop)
        rows = [packed_row_from_cache(self.cache, self.plan.row(r), self.length, self.max_segments, self.pad_id) for r in numbers]
        return {key: np.stack([row[key] for row in rows]) for key in rows[0]}

    def __str__(self) -> str:
        return f"PackedBatches(length={self.length}, max_segments={self.max_segments}, global_batch={self.global_batch})"
