"""grain pipelines: shuffle -> tokenize -> batch with per-batch bucketed padding -> process slice.

Every process builds the same global batch order from the same seed and keeps only its own rows, so
padding lengths agree across processes and the global batch is identical for any process count.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import grain
import numpy as np

from omnidistill.data.schema import Record
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.dimensions import NUM_DIMENSIONS


def bucket_length(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``length`` (the length itself above the largest bucket)."""
    for b in sorted(buckets):
        if length <= b:
            return b
    return length


def collate(examples: Sequence[dict[str, np.ndarray]], *, pad_id: int, buckets: Sequence[int], batch_size: int) -> dict[str, np.ndarray]:
    """Pad token ids to the batch's bucket; pad the batch to ``batch_size`` rows (example_mask=0)."""
    seq = bucket_length(max(len(e["input_ids"]) for e in examples), buckets)
    ids = np.full((batch_size, seq), pad_id, np.int32)
    attn = np.zeros((batch_size, seq), np.int32)
    labels = np.zeros((batch_size, NUM_DIMENSIONS), np.float32)
    label_mask = np.zeros((batch_size, NUM_DIMENSIONS), np.float32)
    example_mask = np.zeros((batch_size,), np.float32)
    index = np.full((batch_size,), -1, np.int32)
    for row, e in enumerate(examples):
        n = len(e["input_ids"])
        ids[row, :n] = e["input_ids"]
        attn[row, :n] = 1
        labels[row] = e["labels"]
        label_mask[row] = e["label_mask"]
        example_mask[row] = 1.0
        index[row] = e.get("index", -1)
    return {
        "input_ids": ids,
        "attention_mask": attn,
        "labels": labels,
        "label_mask": label_mask,
        "example_mask": example_mask,
        "index": index,
    }


def process_slice(batch: dict[str, np.ndarray], process_index: int, process_count: int) -> dict[str, np.ndarray]:
    """This process's contiguous share of a global batch."""
    rows = batch["input_ids"].shape[0]
    if rows % process_count:
        raise ValueError(f"global batch of {rows} rows does not split over {process_count} processes")
    per = rows // process_count
    return {k: v[process_index * per : (process_index + 1) * per] for k, v in batch.items()}


def _with_index(index: int, record: Record) -> tuple[int, Record]:
    return index, record


class _Encode(grain.transforms.Map):
    def __init__(self, encoder: RecordEncoder):
        self.encoder = encoder

    def map(self, item: tuple[int, Record]) -> dict[str, np.ndarray]:
        index, record = item
        out = self.encoder(record)
        out["index"] = np.int32(index)
        return out


def train_dataset(
    records: Sequence[Record],
    encoder: RecordEncoder,
    *,
    global_batch: int,
    seed: int,
    buckets: Sequence[int],
    process_index: int = 0,
    process_count: int = 1,
) -> grain.MapDataset:
    """Endless training batches; each epoch is a fresh permutation and sees every record once
    (a batch may straddle two epochs). Batch ``i`` depends only on ``seed`` and ``i``."""
    if len(records) < global_batch:
        raise ValueError(f"{len(records)} training records are fewer than one batch of {global_batch}")
    indexed = grain.MapDataset.source(records).map_with_index(_with_index)  # keeps lazy sources lazy
    ds = indexed.shuffle(seed=seed).repeat(None)
    ds = ds.map(_Encode(encoder))
    ds = ds.batch(
        global_batch, drop_remainder=True, batch_fn=partial(collate, pad_id=encoder.pad_id, buckets=tuple(buckets), batch_size=global_batch)
    )
    return ds.map(partial(process_slice, process_index=process_index, process_count=process_count))


def eval_dataset(
    records: Sequence[Record],
    encoder: RecordEncoder,
    *,
    global_batch: int,
    buckets: Sequence[int],
    process_index: int = 0,
    process_count: int = 1,
    sort_by_length: bool = True,
) -> grain.MapDataset:
    """One ordered pass; the last batch is padded with masked rows. ``index`` maps rows back to records."""
    order = list(range(len(records)))
    if sort_by_length:
        order.sort(
            key=lambda i: sum(len(f or "") for f in (records[i].question, records[i].source, records[i].reference, records[i].candidate))
        )
    ds = grain.MapDataset.source([(i, records[i]) for i in order]).map(_Encode(encoder))
    ds = ds.batch(
        global_batch,
        drop_remainder=False,
        batch_fn=partial(collate, pad_id=encoder.pad_id, buckets=tuple(buckets), batch_size=global_batch),
    )
    return ds.map(partial(process_slice, process_index=process_index, process_count=process_count))
