"""The teacher's pairwise choices as training input (``data.pairs``): each step's batch of pairs.

``omnidistill label --pairwise`` (or any judge) says which of two candidates for one input is better.
Training reads those choices beside the point labels: every step takes ``train.pair_batch_size`` pairs,
each a [2, S] block of token ids with the judge's winner first, and the train step adds a
Bradley-Terry loss on them (:func:`omnidistill.losses.bradley_terry`).

The paired candidates are found by ``id`` in ``data.pair_items`` (default: the training files) and
tokenized once, when training starts; a step's pairs are then numpy gathers. Pair batch ``t`` depends
only on the seed and ``t`` (a fresh permutation of the pairs per pass, as the records'), and every
process builds the same global batch, pads it to the bucket of its longest candidate, and keeps its
own pairs. The loop reads batch ``step`` at each step, so a resumed run continues the same sequence
with nothing saved in its checkpoint.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

import grain
import numpy as np

from omnidistill.config import DataConfig
from omnidistill.data.pipeline import ShuffledBatchIndices, bucket_length
from omnidistill.data.preference_file import read_preferences
from omnidistill.data.process_share import process_rows
from omnidistill.data.schema import DataError
from omnidistill.data.sources import RecordStream, refuse_duplicate_ids
from omnidistill.data.tokenize import RecordEncoder


@dataclasses.dataclass(frozen=True)
class TrainingPairs:
    """The judged pairs a run trains on: each pair's two candidates as indices into ``tokens``."""

    tokens: list[np.ndarray]
    """Token ids of each paired candidate (once, however many pairs it is in)."""
    winners: np.ndarray
    losers: np.ndarray
    ties: int
    """Pairs the judges tied on (winner null): left out."""
    unknown: int
    """Pairs naming an id that ``data.pair_items`` lacks, skipped under ``data.skip_invalid``."""

    def __len__(self) -> int:
        return len(self.winners)

    def counts(self) -> dict[str, int]:
        return {"used": len(self), "tied": self.ties, "unknown_ids": self.unknown}


def pair_item_files(data: DataConfig) -> list[str]:
    """The files the paired candidates are looked up in: ``data.pair_items``, else ``data.train``."""
    files = list(data.pair_items or data.train)
    if not files:
        raise DataError("data.pairs: no file to find the paired candidates in: set data.pair_items (data.train names no file)")
    return files


def load_training_pairs(data: DataConfig, encoder: RecordEncoder) -> TrainingPairs:
    """Read ``data.pairs``, find both candidates of each judged pair by id and tokenize them.

    One read of the files in the usual case. A pair naming an id the files lack is a
    :class:`DataError` with the pairs file's line and field, or with ``data.skip_invalid`` skipped and
    counted; a paired id the files repeat is refused with both lines (a join on it would pick one of
    the records), while repeats among the other records are the files' own (training counts them)."""
    every = read_preferences(data.pairs, origin="data.pairs")
    judged = [p for p in every if p.winner is not None]
    ties = len(every) - len(judged)
    files = pair_item_files(data)
    origin = "data.pair_items" if data.pair_items else "data.train"
    wanted = {i for p in judged for i in (p.id_a, p.id_b)}
    stream = RecordStream(files, skip_invalid=data.skip_invalid, require_labels=False, keep=frozenset(data.keep_fields))
    records = [r for r in stream if r.id in wanted]
    position = {r.id: n for n, r in enumerate(records)}
    if len(position) < len(records):  # a paired id twice: a second read names both lines (other repeats are the files' own)
        repeated = {r.id for n, r in enumerate(records) if position[r.id] != n}
        refuse_duplicate_ids(files, f"data.pairs joins its pairs to {origin} by id", among=repeated)
        raise DataError(
            f"{origin}: the paired ids {sorted(repeated)[:3]} appear more than once; ids must be unique where data.pairs joins them"
        )
    winners, losers, unknown = [], [], 0
    for p in judged:
        missing = [(field, i) for field, i in (("id_a", p.id_a), ("id_b", p.id_b)) if i not in position]
        if missing:
            if data.skip_invalid:
                unknown += 1
                continue
            field, i = missing[0]
            raise DataError(f"{data.pairs}:{p.line}: {field} {i!r} is not the id of a record in {origin} ({', '.join(files)})")
        loser = p.id_b if p.winner == p.id_a else p.id_a
        winners.append(position[p.winner])
        losers.append(position[loser])
    if not winners:
        raise DataError(f"{data.pairs}: no pair with a winner to train on ({ties} tied, {unknown} with an unknown id)")
    return TrainingPairs(encoder.token_ids_many(records), np.asarray(winners, np.int64), np.asarray(losers, np.int64), ties, unknown)


class PreferenceBatches(grain.MapDataset):
    """Element ``t``: this process's share of pair batch ``t``, ``pair_input_ids`` and
    ``pair_attention_mask`` of shape [pairs / processes, 2, S] (winner, loser), padded to the bucket
    of the global batch's longest candidate."""

    def __init__(
        self,
        pairs: TrainingPairs,
        *,
        pad_id: int,
        buckets: Sequence[int],
        global_pairs: int,
        seed: int,
        process_index: int = 0,
        process_count: int = 1,
    ):
        super().__init__()
        if len(pairs) < global_pairs:
            raise ValueError(f"{len(pairs)} judged pairs are fewer than one step's train.pair_batch_size={global_pairs}")
        self.pairs, self.pad_id, self.buckets = pairs, pad_id, tuple(buckets)
        self.order = ShuffledBatchIndices(len(pairs), seed=seed, global_batch=global_pairs)
        self.rows = process_rows(global_pairs, process_index, process_count)
        self.lengths = np.array([len(t) for t in pairs.tokens], np.int64)

    def __len__(self) -> int:
        return sys.maxsize // self.order.global_batch

    def __getitem__(self, step):  # type: ignore[override]
        if isinstance(step, slice):
            return self.slice(step)
        chosen = self.order[step]
        members = np.stack([self.pairs.winners[chosen], self.pairs.losers[chosen]], axis=1)  # [P, 2]
        length = bucket_length(int(self.lengths[members].max()), self.buckets)
        own = members[self.rows]
        ids = np.full((*own.shape, length), self.pad_id, np.int32)
        attention = np.zeros((*own.shape, length), np.int32)
        for (p, side), item in np.ndenumerate(own):
            tokens = self.pairs.tokens[item]
            ids[p, side, : len(tokens)] = tokens
            attention[p, side, : len(tokens)] = 1
        return {"pair_input_ids": ids, "pair_attention_mask": attention}

    def __str__(self) -> str:
        return f"PreferenceBatches(pairs={len(self.pairs)}, global_pairs={self.order.global_batch})"
