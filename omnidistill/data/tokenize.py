"""Turn a record into token ids: the tokenizer's own encoding of the input text, then truncation.

The ids are exactly ``tokenizer(text)["input_ids"]`` for the text of :mod:`omnidistill.data.input_text`
(one call, special tokens added by the tokenizer), so plain ``transformers`` and the ``omniscore``
package reproduce them for every tokenizer kind (WordPiece, byte-level BPE, SentencePiece).
Over-long inputs (``data.truncation``):

- ``right``: ``tokenizer(text, truncation=True, max_length=...)``, what the consumers do;
- ``context_first``: the tokens of the source-side fields are cut first (longest field first, each
  keeping its first tokens); the candidate keeps at least half the budget. Special tokens, prefixes
  and separators are never cut. Needs a fast tokenizer (character offsets).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from omnidistill.config import DataConfig
from omnidistill.data.input_text import TextLayout, format_record
from omnidistill.data.level_dist import record_distribution
from omnidistill.data.schema import Record
from omnidistill.dimensions import NUM_DIMENSIONS


def allocate(lengths: list[int], budget: int) -> list[int]:
    """Truncated lengths that fit ``budget``: context (all but the last) is cut longest-first."""
    lengths = list(lengths)
    if sum(lengths) <= budget:
        return lengths
    cand_keep = min(lengths[-1], max(budget // 2, budget - sum(lengths[:-1])))
    lengths[-1] = cand_keep
    context_budget = budget - cand_keep
    while sum(lengths[:-1]) > context_budget:
        i = int(np.argmax(lengths[:-1]))
        excess = sum(lengths[:-1]) - context_budget
        others = sorted(lengths[:-1], reverse=True)
        second = others[1] if len(others) > 1 else 0
        lengths[i] -= max(1, min(excess, lengths[i] - second))
    return lengths


def field_of_tokens(offsets: list[tuple[int, int]], spans: tuple[tuple[int, int], ...]) -> np.ndarray:
    """For each token, the index of the field span it overlaps, or -1 (special tokens, prefixes, separators)."""
    owner = np.full(len(offsets), -1, dtype=np.int64)
    for t, (start, end) in enumerate(offsets):
        if end <= start:
            continue
        for f, (s0, s1) in enumerate(spans):
            if start < s1 and end > s0:
                owner[t] = f
                break
    return owner


@dataclasses.dataclass(frozen=True)
class EncodedInputs:
    """Token ids of many records, with what truncation did to them (:meth:`RecordEncoder.encode_inputs`)."""

    ids: list[np.ndarray]
    """Each record's ``input_ids`` after truncation."""
    full_lengths: list[int]
    """Each record's token count before truncation."""
    truncated: int
    """How many records were over ``max_length`` and cut."""


IDS_ONLY = {"return_token_type_ids": False, "return_attention_mask": False, "verbose": False}
"""Keywords of a batched tokenizer call whose ``input_ids`` alone are used: the same ids, without the
per-item lists of token types and attention mask that transformers would build and drop (about a
tenth of the call for 4,096 MiniLM inputs: docs/benchmarks.md)."""


class RecordEncoder:
    """Tokenizes records into ``input_ids`` (unpadded) plus labels, label masks and level distributions
    (:func:`omnidistill.data.level_dist.record_distribution`)."""

    def __init__(self, tokenizer: Any, max_length: int, layout: TextLayout | None = None, truncation: str = "context_first"):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.sep_token = tokenizer.sep_token or tokenizer.eos_token
        self.layout = layout or TextLayout(separator=f" {self.sep_token} ")
        if truncation not in ("context_first", "right"):
            raise ValueError(f"data.truncation must be context_first or right, not {truncation!r}")
        if truncation == "context_first" and not getattr(tokenizer, "is_fast", False):
            raise ValueError("data.truncation=context_first needs a fast tokenizer (character offsets); use data.truncation=right")
        self.truncation = truncation
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    @classmethod
    def from_config(cls, tokenizer: Any, data: DataConfig) -> RecordEncoder:
        """The encoder of a run's ``data`` section (input format, layout, max_length, truncation)."""
        layout = TextLayout.from_config(data, tokenizer.sep_token or tokenizer.eos_token)
        return cls(tokenizer, data.max_length, layout, data.truncation)

    def text(self, record: Record) -> str:
        """The input text of ``record`` (what a plain ``transformers`` user passes to the tokenizer)."""
        return format_record(record, self.layout).text

    def full_lengths(self, records: list[Record]) -> list[int]:
        """Token counts before truncation."""
        texts = [self.text(r) for r in records]
        return [len(ids) for ids in self.tokenizer(texts, **IDS_ONLY)["input_ids"]] if texts else []

    def token_ids_many(self, records: Sequence[Record]) -> list[np.ndarray]:
        """:meth:`token_ids` of many records, with one batched tokenizer call (fast tokenizers spread it
        over the cores); only inputs over ``max_length`` under ``context_first`` are redone one by one."""
        if self.truncation == "right" and records:
            batch = self.tokenizer([self.text(r) for r in records], truncation=True, max_length=self.max_length, **IDS_ONLY)
            return [np.asarray(ids, dtype=np.int32) for ids in batch["input_ids"]]
        return self.encode_inputs(records).ids

    def encode_inputs(self, records: Sequence[Record]) -> EncodedInputs:
        """:meth:`token_ids` of many records and their lengths before truncation (what scoring needs:
        the ids, and how many inputs were cut), from one batched call over the untruncated texts; only
        the inputs over ``max_length`` are encoded again (``right``: one batched call with the
        tokenizer's own truncation; ``context_first``: one by one)."""
        texts = [self.text(r) for r in records]
        full = self.tokenizer(texts, **IDS_ONLY)["input_ids"] if texts else []
        ids = [np.asarray(x, dtype=np.int32) for x in full]
        long = [i for i, x in enumerate(full) if len(x) > self.max_length]
        if long and self.truncation == "right":
            cut = self.tokenizer([texts[i] for i in long], truncation=True, max_length=self.max_length, **IDS_ONLY)["input_ids"]
            for i, x in zip(long, cut, strict=True):
                ids[i] = np.asarray(x, dtype=np.int32)
        else:
            for i in long:
                ids[i] = self.token_ids(records[i])
        return EncodedInputs(ids, [len(x) for x in full], len(long))

    def token_ids(self, record: Record) -> np.ndarray:
        formatted = format_record(record, self.layout)
        if self.truncation == "right":
            ids = self.tokenizer(formatted.text, truncation=True, max_length=self.max_length)["input_ids"]
            return np.asarray(ids, dtype=np.int32)
        enc = self.tokenizer(formatted.text, return_offsets_mapping=True, verbose=False)
        ids = np.asarray(enc["input_ids"], dtype=np.int32)
        if len(ids) <= self.max_length:
            return ids
        owner = field_of_tokens(enc["offset_mapping"], formatted.spans)
        lengths = [int(np.sum(owner == f)) for f in range(len(formatted.spans))]
        budget = self.max_length - int(np.sum(owner < 0))
        if budget < len(lengths):
            raise ValueError(f"max_length={self.max_length} is too small for {len(lengths)} fields and their separators")
        keep = allocate(lengths, budget)
        rank = np.zeros(len(ids), dtype=np.int64)  # position of each token within its field
        for f in range(len(lengths)):
            members = owner == f
            rank[members] = np.arange(int(np.sum(members)))
        kept = (owner < 0) | (rank < np.asarray([*keep, 0])[owner])
        return ids[kept]

    def __call__(self, record: Record) -> dict[str, np.ndarray]:
        labels, mask = label_arrays(record)
        return {"input_ids": self.token_ids(record), "labels": labels, "label_mask": mask, "label_dist": record_distribution(record)}


def label_arrays(record: Record) -> tuple[np.ndarray, np.ndarray]:
    """The record's labels (0 where missing) and label mask, float32 [4] each."""
    labels = np.array([0.0 if v is None else v for v in record.labels], dtype=np.float32)
    mask = np.array([v is not None for v in record.labels], dtype=np.float32)
    assert labels.shape == (NUM_DIMENSIONS,)
    return labels, mask


def label_matrix(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`label_arrays` of many records at once: float32 [N, 4] labels (0 where missing) and mask."""
    values = np.array([[np.nan if v is None else v for v in r.labels] for r in records], dtype=np.float32).reshape(-1, NUM_DIMENSIONS)
    missing = np.isnan(values)
    return np.where(missing, np.float32(0), values), (~missing).astype(np.float32)


TRUNCATION_SAMPLE = 20_000
"""Training records whose untruncated length is measured to estimate how many inputs are truncated."""


def count_truncated(
    encoder: RecordEncoder, records: list[Record], *, sample: int | None = None, seed: int = 0, lengths: list[int] | None = None
) -> dict[str, Any]:
    """How many inputs exceed ``max_length`` and are truncated when encoded.

    Exact over all ``records`` (pass their ``full_lengths`` as ``lengths`` if already computed), or,
    when ``sample`` is smaller than their number, over a seeded uniform sample (``sampled: true``; the
    count is then scaled to the whole set).
    """
    picks = sample_positions(len(records), sample, seed)
    if len(picks) < len(records):
        lengths = None
    return truncation_estimate(encoder, [records[int(i)] for i in picks], len(records), lengths)


def sample_positions(total: int, sample: int | None, seed: int) -> np.ndarray:
    """Sorted positions of a seeded uniform sample of ``sample`` out of ``total`` (all of them when
    ``sample`` is None or not smaller)."""
    if sample is None or total <= sample:
        return np.arange(total)
    return np.sort(np.random.default_rng(seed).choice(total, size=sample, replace=False))


def truncation_estimate(encoder: RecordEncoder, sample: Sequence[Record], total: int, lengths: list[int] | None = None) -> dict[str, Any]:
    """Truncated inputs among ``total``, counted on ``sample`` of them and scaled (exact when the
    sample is all of them); ``lengths``: the sample's ``full_lengths`` if already computed."""
    if lengths is None:
        lengths = encoder.full_lengths(list(sample))
    truncated = sum(n > encoder.max_length for n in lengths)
    return {"truncated": round(truncated * total / max(len(sample), 1)), "of": total, "sampled": len(sample) < total}
