"""grain pipelines: shuffle -> tokenize -> batch (bucketed padding, or packed rows) -> process slice.

Every process builds the same global batch order from the same seed and keeps only its own rows, so
padding lengths agree across processes and the global batch is identical for any process count.
From a token cache (:mod:`omnidistill.data.token_cache`), bucketed batches read only the process's
own rows: the padded length comes from the cached lengths of the whole global batch.

Packed training rows (``data.pack_length > 0``) hold several examples each, placed by first-fit
packing; a row carries ``segment_ids`` (1..K per example, 0 = padding) and K example slots of labels.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from functools import partial

import grain
import numpy as np

from omnidistill.data.packing import first_fit
from omnidistill.data.process_share import process_rows
from omnidistill.data.schema import Record
from omnidistill.data.token_cache import TokenCache
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.dimensions import NUM_DIMENSIONS, NUM_LEVELS


def bucket_length(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``length`` (the length itself above the largest bucket)."""
    for b in sorted(buckets):
        if length <= b:
            return b
    return length


def collate_inputs(
    examples: Sequence[dict[str, np.ndarray]], *, pad_id: int, buckets: Sequence[int], batch_size: int
) -> dict[str, np.ndarray]:
    """Pad token ids to the batch's bucket; pad the batch to ``batch_size`` rows (example_mask=0,
    index=-1). What scoring reads: ``input_ids``, ``attention_mask``, ``example_mask``, ``index``."""
    seq = bucket_length(max(len(e["input_ids"]) for e in examples), buckets)
    ids = np.full((batch_size, seq), pad_id, np.int32)
    attn = np.zeros((batch_size, seq), np.int32)
    example_mask = np.zeros((batch_size,), np.float32)
    index = np.full((batch_size,), -1, np.int32)
    for row, e in enumerate(examples):
        n = len(e["input_ids"])
        ids[row, :n] = e["input_ids"]
        attn[row, :n] = 1
        example_mask[row] = 1.0
        index[row] = e.get("index", -1)
    return {"input_ids": ids, "attention_mask": attn, "example_mask": example_mask, "index": index}


def collate(examples: Sequence[dict[str, np.ndarray]], *, pad_id: int, buckets: Sequence[int], batch_size: int) -> dict[str, np.ndarray]:
    """:func:`collate_inputs` plus the labels, label masks and level distributions (zeros in padding rows)."""
    batch = collate_inputs(examples, pad_id=pad_id, buckets=buckets, batch_size=batch_size)
    labels = np.zeros((batch_size, NUM_DIMENSIONS), np.float32)
    label_mask = np.zeros((batch_size, NUM_DIMENSIONS), np.float32)
    label_dist = np.zeros((batch_size, NUM_DIMENSIONS, NUM_LEVELS), np.float32)
    for row, e in enumerate(examples):
        labels[row] = e["labels"]
        label_mask[row] = e["label_mask"]
        label_dist[row] = e["label_dist"]
    return {**batch, "labels": labels, "label_mask": label_mask, "label_dist": label_dist}


def inference_examples(ids: Sequence[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Each item's ``input_ids`` and ``index`` (its position in ``ids``) for scoring; no labels, which
    scoring does not read."""
    return [{"input_ids": x, "index": np.int32(i)} for i, x in enumerate(ids)]


def process_slice(batch: dict[str, np.ndarray], process_index: int, process_count: int) -> dict[str, np.ndarray]:
    """This process's contiguous share of a global batch: of each array's leading axis, which is the
    batch's rows (or, for ``token_index``, its groups, one per batch shard, whose rows are contiguous)."""
    return {k: v[process_rows(v.shape[0], process_index, process_count)] for k, v in batch.items()}


def _with_record_index(count: int, index: int, record: Record) -> tuple[int, Record]:
    # grain hands map_with_index the index in the (repeated) stream; the record's index is its remainder
    return index % count, record


def _indexed_records(records: Sequence[Record]) -> grain.MapDataset:
    """(record index, record) pairs; keeps lazy sources lazy."""
    return grain.MapDataset.source(records).map_with_index(partial(_with_record_index, len(records)))


class EncodeRecord(grain.transforms.Map):
    """(record index, record) -> the encoder's arrays, with ``index``."""

    def __init__(self, encoder: RecordEncoder):
        self.encoder = encoder

    def map(self, item: tuple[int, Record]) -> dict[str, np.ndarray]:
        index, record = item
        out = self.encoder(record)
        out["index"] = np.int32(index)
        return out


def train_dataset(
    records: Sequence[Record] | TokenCache,
    encoder: RecordEncoder,
    *,
    global_batch: int,
    seed: int,
    buckets: Sequence[int],
    process_index: int = 0,
    process_count: int = 1,
) -> grain.MapDataset:
    """Endless training batches; each epoch is a fresh permutation and sees every record once
    (a batch may straddle two epochs). Batch ``i`` depends only on ``seed`` and ``i``. ``records``
    may be the split's :class:`TokenCache`: the batches are the same, without tokenizing."""
    if len(records) < global_batch:
        raise ValueError(f"{len(records)} training records are fewer than one batch of {global_batch}")
    if isinstance(records, TokenCache):
        return _cached_train_dataset(records, encoder.pad_id, global_batch, seed, buckets, process_index, process_count)
    ds = _indexed_records(records).shuffle(seed=seed).repeat(None)
    ds = ds.map(EncodeRecord(encoder))
    ds = ds.batch(
        global_batch, drop_remainder=True, batch_fn=partial(collate, pad_id=encoder.pad_id, buckets=tuple(buckets), batch_size=global_batch)
    )
    return ds.map(partial(process_slice, process_index=process_index, process_count=process_count))


class _OwnRows(grain.transforms.Map):
    """A global batch of record indices -> this process's rows only, padded to the bucket of the whole
    global batch (decided from the cached lengths, which every process reads without tokens)."""

    def __init__(self, cache: TokenCache, pad_id: int, buckets: Sequence[int], global_batch: int, process_index: int, process_count: int):
        self.rows = process_rows(global_batch, process_index, process_count)
        self.cache, self.pad_id, self.buckets = cache, pad_id, tuple(buckets)
        self.lengths = np.asarray(cache.lengths, np.int32)  # 4 bytes per example, read once
        self.per = self.rows.stop - self.rows.start

    def map(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The rows :func:`collate` would give for this process's share, filled straight from the arrays."""
        seq = bucket_length(int(self.lengths[indices].max()), self.buckets)
        own = np.asarray(indices[self.rows], np.int64)
        ids = np.full((self.per, seq), self.pad_id, np.int32)
        attention = np.zeros((self.per, seq), np.int32)
        offsets, tokens = self.cache.offsets, self.cache.tokens
        for row, i in enumerate(own.tolist()):
            start, end = offsets[i], offsets[i + 1]
            ids[row, : end - start] = tokens[start:end]
            attention[row, : end - start] = 1
        return {
            "input_ids": ids,
            "attention_mask": attention,
            "labels": np.asarray(self.cache.labels[own], np.float32),
            "label_mask": np.asarray(self.cache.label_mask[own], np.float32),
            "label_dist": np.asarray(self.cache.label_dist[own], np.float32),
            "example_mask": np.ones((self.per,), np.float32),
            "index": own.astype(np.int32),
        }


def _cached_train_dataset(
    cache: TokenCache, pad_id: int, global_batch: int, seed: int, buckets: Sequence[int], process_index: int, process_count: int
) -> grain.MapDataset:
    """:func:`train_dataset` over a token cache: the same permutation and global batches, but each
    process reads and collates only its own rows (per-process input cost independent of the process count)."""
    indices = ShuffledBatchIndices(len(cache), seed=seed, global_batch=global_batch)
    return indices.map(_OwnRows(cache, pad_id, buckets, global_batch, process_index, process_count))


class ShuffledBatchIndices(grain.MapDataset):
    """Element ``b``: the record indices of global batch ``b``, exactly those of
    ``MapDataset.source(range(count)).shuffle(seed).repeat(None).batch(global_batch)`` (the order
    :func:`train_dataset` tokenizes in), computed with one call per batch instead of grain's
    per-element lookups through four dataset layers, which cost more than reading the rows."""

    def __init__(self, count: int, *, seed: int, global_batch: int):
        super().__init__()
        if count < 1 or global_batch < 1:
            raise ValueError(f"need records ({count}) and a batch size ({global_batch}) of at least 1")
        if not 0 <= seed < 2**32:
            raise ValueError(f"the shuffle seed must lie in [0, 2**32), got {seed}")
        self.count, self.seed, self.global_batch = count, seed, global_batch

    def __len__(self) -> int:
        return sys.maxsize // self.global_batch

    def __getitem__(self, batch):  # type: ignore[override]
        if isinstance(batch, slice):
            return self.slice(batch)
        out = np.empty(self.global_batch, np.int64)
        for row, position in enumerate(range(batch * self.global_batch, (batch + 1) * self.global_batch)):
            epoch, within = divmod(position, self.count)
            # grain's ShuffleMapDataset: a fresh permutation per epoch, seeded seed + epoch, 4 rounds
            out[row] = grain.experimental.index_shuffle(within, max_index=self.count - 1, seed=(self.seed + epoch) % 2**32, rounds=4)
        return out

    def __str__(self) -> str:
        return f"ShuffledBatchIndices(count={self.count}, global_batch={self.global_batch})"


def eval_dataset(
    ids: Sequence[np.ndarray],
    *,
    pad_id: int,
    global_batch: int,
    buckets: Sequence[int],
    process_index: int = 0,
    process_count: int = 1,
    sort_by_length: bool = True,
) -> grain.MapDataset:
    """One ordered pass; one batch is padded with masked rows. ``index`` maps rows back to records.

    With ``sort_by_length`` the examples are ordered by their token count (not characters, which
    differ by script), so that each batch pads to the smallest bucket it can, and the one partial
    batch holds the shortest examples (its padding rows then cost least); otherwise it is the last.
    """
    examples = inference_examples(ids)
    if sort_by_length:
        examples.sort(key=lambda e: len(e["input_ids"]))
    first = len(examples) % global_batch if sort_by_length else 0
    starts = ([0] if first else []) + list(range(first, len(examples), global_batch))
    groups = [examples[a : a + (first if a == 0 and first else global_batch)] for a in starts]
    collate_group = partial(collate_inputs, pad_id=pad_id, buckets=tuple(buckets), batch_size=global_batch)
    ds = grain.MapDataset.source(groups).map(collate_group)
    return ds.map(partial(process_slice, process_index=process_index, process_count=process_count))


@dataclasses.dataclass(frozen=True)
class InferencePacking:
    """Packed inference rows: several items per row, each attending only to itself (``segment_ids``)."""

    length: int
    """Tokens per row; an item longer than this goes into the padded batches."""
    rows: int
    """Rows per batch."""
    max_segments: int
    """Items per row at most (the model pools this many slots per row)."""


def collate_packed(
    rows: Sequence[Sequence[dict[str, np.ndarray]]], *, pad_id: int, packing: InferencePacking, batch_size: int
) -> dict[str, np.ndarray]:
    """Rows of examples back to back (``segment_ids`` 1..K, 0 = padding); ``index`` [rows, K] maps each
    slot to its record (-1: empty slot or padding row)."""
    ids = np.full((batch_size, packing.length), pad_id, np.int32)
    segment_ids = np.zeros((batch_size, packing.length), np.int32)
    index = np.full((batch_size, packing.max_segments), -1, np.int32)
    for row, members in enumerate(rows):
        at = 0
        for slot, e in enumerate(members):
            n = len(e["input_ids"])
            ids[row, at : at + n] = e["input_ids"]
            segment_ids[row, at : at + n] = slot + 1
            index[row, slot] = e["index"]
            at += n
    return {"input_ids": ids, "attention_mask": (segment_ids > 0).astype(np.int32), "segment_ids": segment_ids, "index": index}


def _collate_inference(group: tuple[str, list], *, pad_id: int, buckets: Sequence[int], batch_size: int, packing: InferencePacking | None):
    kind, members = group
    if kind == "packed":
        return collate_packed(members, pad_id=pad_id, packing=packing, batch_size=packing.rows)
    batch = collate_inputs(members, pad_id=pad_id, buckets=buckets, batch_size=batch_size)
    return {k: batch[k] for k in ("input_ids", "attention_mask", "index")}


def packed_eval_dataset(
    ids: Sequence[np.ndarray],
    *,
    pad_id: int,
    global_batch: int,
    buckets: Sequence[int],
    packing: InferencePacking,
    process_index: int = 0,
    process_count: int = 1,
) -> grain.MapDataset:
    """:func:`eval_dataset` with packed rows: the items that fit a row go, longest first, into the first
    row with room (first-fit decreasing, at most ``packing.max_segments`` per row), ``packing.rows`` rows
    a batch; longer items follow in padded batches of ``global_batch``, sorted by token count. Each
    item keeps its own positions and attends only to itself, so its score is the padded path's."""
    examples = inference_examples(ids)
    fits = sorted((e for e in examples if len(e["input_ids"]) <= packing.length), key=lambda e: -len(e["input_ids"]))
    long = sorted((e for e in examples if len(e["input_ids"]) > packing.length), key=lambda e: len(e["input_ids"]))
    lengths = np.asarray([len(e["input_ids"]) for e in fits], np.int64)
    rows = [[fits[i] for i in row] for row in first_fit(lengths, packing.length, packing.max_segments)]
    groups = [("packed", rows[a : a + packing.rows]) for a in range(0, len(rows), packing.rows)]
    groups += [("padded", long[a : a + global_batch]) for a in range(0, len(long), global_batch)]
    collate_group = partial(_collate_inference, pad_id=pad_id, buckets=tuple(buckets), batch_size=global_batch, packing=packing)
    ds = grain.MapDataset.source(groups).map(collate_group)
    return ds.map(partial(process_slice, process_index=process_index, process_count=process_count))


@dataclasses.dataclass(frozen=True)
class PackSpec:
    """How training examples are packed into rows."""

    length: int
    """Tokens per row."""
    max_segments: int = 16
    """Example slots per row."""
    bins: int = 64
    """Rows filled at once (first-fit)."""


def _packing_input(example: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One example as the packer's sequences: its tokens, and one-element label/index sequences."""
    return {
        "input_ids": example["input_ids"],
        "labels": example["labels"][None],
        "label_mask": example["label_mask"][None],
        "label_dist": example["label_dist"][None],
        "index": np.asarray(example["index"], np.int32).reshape(1),
    }


def packed_row(packed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The packer's output -> a training row: ``segment_ids`` and per-slot labels, masks, indices."""
    segment_ids = packed["input_ids_segment_ids"].astype(np.int32)
    used = packed["labels_segment_ids"] > 0
    return {
        "input_ids": packed["input_ids"].astype(np.int32),
        "segment_ids": segment_ids,
        "attention_mask": (segment_ids > 0).astype(np.int32),
        "labels": packed["labels"].astype(np.float32),
        "label_mask": packed["label_mask"].astype(np.float32),
        "label_dist": packed["label_dist"].astype(np.float32),
        "example_mask": used.astype(np.float32),
        "index": np.where(packed["index_segment_ids"] > 0, packed["index"], -1).astype(np.int32),
    }


def packed_train_dataset(
    records: Sequence[Record] | TokenCache,
    encoder: RecordEncoder,
    *,
    global_batch: int,
    seed: int,
    pack: PackSpec,
    read_options: grain.ReadOptions | None = None,
    process_index: int = 0,
    process_count: int = 1,
) -> grain.IterDataset:
    """Endless batches of packed rows: the shuffled, tokenized stream of :func:`train_dataset`,
    first-fit packed into ``pack.length``-token rows of at most ``pack.max_segments`` examples.

    Deterministic from ``seed``, and resumable from its iterator state (grain checkpoints the packer).
    Rows of one packing round may mix the end of one epoch with the start of the next. From a token
    cache, rows are planned from the cached lengths instead (:mod:`omnidistill.data.packing`: first-fit
    within windows of ``bins * max_segments`` examples of each epoch) and each process builds only its own.
    """
    if encoder.max_length > pack.length:
        raise ValueError(f"data.pack_length={pack.length} is shorter than data.max_length={encoder.max_length}")
    if pack.max_segments < 1 or pack.bins < 1:
        raise ValueError(f"data.pack_max_segments={pack.max_segments} and data.pack_bins={pack.bins} must be at least 1")
    if len(records) == 0:
        raise ValueError("no training records to pack")
    if isinstance(records, TokenCache):  # planned from the cached lengths; each process builds its own rows
        from omnidistill.data.packing import PackedBatches

        window = pack.bins * pack.max_segments
        batches = PackedBatches(
            records,
            global_batch=global_batch,
            seed=seed,
            length=pack.length,
            max_segments=pack.max_segments,
            pad_id=encoder.pad_id,
            window=window,
            process_index=process_index,
            process_count=process_count,
        )
        return batches.to_iter_dataset(read_options)
    examples = _indexed_records(records).shuffle(seed=seed).repeat(None).map(EncodeRecord(encoder)).map(_packing_input)
    slots = pack.max_segments
    lengths = {"input_ids": pack.length, "labels": slots, "label_mask": slots, "label_dist": slots, "index": slots}
    padding = {"input_ids": encoder.pad_id, "labels": 0.0, "label_mask": 0.0, "label_dist": 0.0, "index": -1}
    rows = grain.experimental.FirstFitPackIterDataset(
        examples.to_iter_dataset(read_options),
        length_struct=lengths,
        num_packing_bins=pack.bins,
        seed=seed,
        shuffle_bins=True,
        padding_struct=padding,
        max_sequences_per_bin=pack.max_segments,
    )
    batches = rows.map(packed_row).batch(global_batch, drop_remainder=True)
    return batches.map(partial(process_slice, process_index=process_index, process_count=process_count))


def with_workers(ds: grain.IterDataset, workers: int) -> grain.IterDataset:
    """``ds`` produced by ``workers`` grain worker processes (in-process when 0).

    Each worker builds every ``workers``-th element; the interleaved order is deterministic for a
    given count and the iterator state (saved with checkpoints) covers every worker.
    """
    if workers <= 0:
        return ds
    from absl import flags

    if not flags.FLAGS.is_parsed():  # grain's workers read absl flags; we define none on the command line
        flags.FLAGS.mark_as_parsed()
    return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
