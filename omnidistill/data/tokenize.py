"""Turn a record into model inputs: fields joined by the tokenizer's separator, then truncated.

Input text = [CLS] context [SEP] question [SEP] title [SEP] source [SEP] reference [SEP] candidate [SEP]
with only the fields present (no task id: OmniScore §3 gives the student none; ``dataset``,
``src_lang`` and ``tgt_lang`` are teacher-prompt metadata), which is what ``tokenizer(f" {sep} ".join(fields))`` produces. Over-long inputs
lose context tokens first (longest field first); the candidate keeps at least half the budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from omnidistill.data.schema import TEXT_FIELDS, Record
from omnidistill.dimensions import NUM_DIMENSIONS


def record_fields(record: Record) -> list[str]:
    """The texts that form the model input, in order (context fields present, then the candidate)."""
    return [getattr(record, f) for f in TEXT_FIELDS if getattr(record, f)] + [record.candidate]


def join_fields(fields: list[str], sep_token: str) -> str:
    """The plain-text form of the input, for use with a Hugging Face tokenizer directly."""
    return f" {sep_token} ".join(fields)


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


class RecordEncoder:
    """Tokenizes records into ``input_ids`` (unpadded) plus labels and label masks."""

    def __init__(self, tokenizer: Any, max_length: int):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        self.sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        if self.cls_id is None or self.sep_id is None:
            raise ValueError("tokenizer has no [CLS]/<s> or [SEP]/</s> token")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.sep_token = tokenizer.sep_token or tokenizer.eos_token

    def content_budget(self, n_fields: int) -> int:
        """Tokens left for ``n_fields`` texts once [CLS] and one [SEP] per field are placed."""
        return self.max_length - 1 - n_fields

    def token_ids(self, record: Record) -> np.ndarray:
        fields = record_fields(record)
        pieces = self.tokenizer(fields, add_special_tokens=False)["input_ids"]
        budget = self.content_budget(len(pieces))
        if budget < len(pieces):
            raise ValueError(f"max_length={self.max_length} is too small for {len(pieces)} fields")
        lengths = allocate([len(p) for p in pieces], budget)
        ids = [self.cls_id]
        for piece, n in zip(pieces, lengths, strict=True):
            ids.extend(piece[:n])
            ids.append(self.sep_id)
        return np.asarray(ids, dtype=np.int32)

    def __call__(self, record: Record) -> dict[str, np.ndarray]:
        labels = np.array([0.0 if v is None else v for v in record.labels], dtype=np.float32)
        mask = np.array([v is not None for v in record.labels], dtype=np.float32)
        assert labels.shape == (NUM_DIMENSIONS,)
        return {"input_ids": self.token_ids(record), "labels": labels, "label_mask": mask}


def count_truncated(encoder: RecordEncoder, records: list[Record], *, sample: int | None = None, seed: int = 0) -> dict[str, Any]:
    """How many inputs exceed ``max_length`` and are truncated (context first) when encoded.

    Exact over all ``records``, or, when ``sample`` is smaller than their number, over a seeded
    uniform sample (``sampled: true``; the count is then scaled to the whole set).
    """
    picks = np.arange(len(records))
    if sample is not None and len(records) > sample:
        picks = np.sort(np.random.default_rng(seed).choice(len(records), size=sample, replace=False))
    fields = [record_fields(records[int(i)]) for i in picks]
    flat = [text for f in fields for text in f]
    lengths = [len(ids) for ids in encoder.tokenizer(flat, add_special_tokens=False)["input_ids"]] if flat else []
    truncated, pos = 0, 0
    for f in fields:
        n = len(f)
        truncated += int(sum(lengths[pos : pos + n]) > encoder.content_budget(n))
        pos += n
    scale = len(records) / max(len(picks), 1)
    return {"truncated": round(truncated * scale), "of": len(records), "sampled": len(picks) < len(records)}
