"""Token cache: each split tokenized once, stored flat on disk, read back by index.

A cache holds, for N examples, one flat ``int32`` array of every example's token ids with ``N + 1``
offsets, the ``[N, 4]`` labels and label masks, and the ``[N, 4, 5]`` level distributions: exactly what :class:`RecordEncoder` returns for
each record, so batches built from it equal batches built by tokenizing on the fly. The arrays are
memory-mapped, so a training process holds no Python object per example.

A cache lives in ``<data.token_cache>/<fingerprint>/``. The fingerprint covers everything that
changes the tokens: the tokenizer's full definition, the input format, layout, truncation and
``max_length``, and every record's text fields, labels, label distributions and annotations. A changed input gives a new fingerprint
(a new cache); an unchanged one reuses the cache across epochs and runs. A cache is written into a
temporary folder and renamed into place at the end, so an interrupted build leaves nothing that is
ever read.

The records are read in passes (one to fingerprint, one more to build), never held whole: a
training process that reads its split from the cache holds the memory-mapped arrays and no Python
object per record. ``meta.json`` records the count of inputs truncated to ``max_length`` (exact, or
over the seeded sample of 20,000 that :func:`omnidistill.data.tokenize.count_truncated` would take).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from omnidistill.data.level_dist import distribution_matrix
from omnidistill.data.schema import Record
from omnidistill.data.tokenize import TRUNCATION_SAMPLE, RecordEncoder, label_matrix, sample_positions, truncation_estimate
from omnidistill.dimensions import NUM_DIMENSIONS, NUM_LEVELS

FORMAT_VERSION = 4
"""In every fingerprint; 4: a record without a task has no task line (``given_task``)."""
CHUNK = 2048
"""Records tokenized per batched tokenizer call."""
_ARRAYS = ("tokens", "offsets", "labels", "label_mask", "label_dist")


@dataclasses.dataclass(frozen=True)
class TokenCache(Sequence):
    """Random-access encoded examples: ``cache[i]`` is ``RecordEncoder(records[i])``."""

    tokens: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray
    label_mask: np.ndarray
    label_dist: np.ndarray
    directory: Path | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:  # type: ignore[override]
        start, end = self.offsets[i], self.offsets[i + 1]
        return {
            "input_ids": self.tokens[start:end],
            "labels": self.labels[i],
            "label_mask": self.label_mask[i],
            "label_dist": self.label_dist[i],
        }

    @property
    def truncation(self) -> dict[str, Any]:
        """Inputs truncated to ``max_length`` when cached: ``truncated``, ``of``, ``sampled`` (as
        :func:`omnidistill.data.tokenize.count_truncated` reports them)."""
        if self.directory is None:
            raise ValueError("an in-memory token cache has no build record")
        return json.loads((self.directory / "meta.json").read_text())["truncation"]

    @property
    def lengths(self) -> np.ndarray:
        """Token count of every example (read without touching the tokens)."""
        return np.diff(np.asarray(self.offsets))

    @classmethod
    def open(cls, directory: str | Path) -> TokenCache:
        """A finished cache folder, memory-mapped."""
        directory = Path(directory)
        # plain ndarray views of the memory maps: slicing them costs far less than slicing np.memmap objects
        arrays = {name: np.load(directory / f"{name}.npy", mmap_mode="r").view(np.ndarray) for name in _ARRAYS}
        return cls(**arrays, directory=directory)


def _tokenizer_definition(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.to_str()
    return json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)


def _settings(encoder: RecordEncoder) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "max_length": encoder.max_length,
        "truncation": encoder.truncation,
        "layout": dataclasses.asdict(encoder.layout),
        "specials": [encoder.pad_id, getattr(encoder.tokenizer, "all_special_ids", None)],
    }


def fingerprint(records: Iterable[Record], encoder: RecordEncoder) -> tuple[str, int]:
    """Hex digest of everything that determines the cached arrays, and the number of records (one pass)."""
    h = hashlib.sha256()
    h.update(json.dumps(_settings(encoder), sort_keys=True, default=str).encode())
    h.update(_tokenizer_definition(encoder.tokenizer).encode())
    count = 0
    for r in records:
        fields = (r.task, r.question, r.source, r.reference, r.candidate, r.context, r.title, r.labels, r.label_dist, r.annotations)
        h.update(json.dumps(fields, ensure_ascii=False, default=str).encode())
        h.update(b"\n")
        count += 1
    return h.hexdigest()[:32], count


def _chunks(records: Iterable[Record]) -> Iterator[list[Record]]:
    it = iter(records)
    while part := list(islice(it, CHUNK)):
        yield part


def build(records: Iterable[Record], encoder: RecordEncoder, directory: str | Path, *, total: int, progress: bool = False) -> TokenCache:
    """Tokenize ``records`` (one pass over ``total`` of them, as :func:`fingerprint` counted) into a new
    cache at ``directory``, written atomically."""
    from tqdm import tqdm

    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    sample = set(sample_positions(total, TRUNCATION_SAMPLE, seed=0).tolist())  # whose untruncated length is measured
    sampled: list[Record] = []
    try:
        lengths, tokens, labels, label_mask, label_dist = [], [], [], [], []  # one array per chunk of CHUNK records
        count = 0
        with tqdm(total=total, desc="tokenize", unit="ex", disable=not progress, dynamic_ncols=True) as bar:
            for part in _chunks(records):
                ids = encoder.token_ids_many(part)
                lengths.append(np.fromiter(map(len, ids), np.int64, len(ids)))
                tokens.append(np.concatenate(ids).astype(np.int32))
                part_labels, part_mask = label_matrix(part)
                labels.append(part_labels)
                label_mask.append(part_mask)
                label_dist.append(distribution_matrix(part))
                sampled += [r for i, r in enumerate(part, start=count) if i in sample]
                count += len(part)
                bar.update(len(part))
        if count != total:
            raise ValueError(f"{count} records were read for the token cache where {total} were counted: did the input change?")
        offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))]) if lengths else np.zeros(1, np.int64)
        arrays = (
            np.concatenate(tokens) if tokens else np.zeros(0, np.int32),
            offsets.astype(np.int64),
            np.concatenate(labels) if labels else np.zeros((0, NUM_DIMENSIONS), np.float32),
            np.concatenate(label_mask) if label_mask else np.zeros((0, NUM_DIMENSIONS), np.float32),
            np.concatenate(label_dist) if label_dist else np.zeros((0, NUM_DIMENSIONS, NUM_LEVELS), np.float32),
        )
        for name, array in zip(_ARRAYS, arrays, strict=True):
            np.save(staging / f"{name}.npy", array)
        truncation = truncation_estimate(encoder, sampled, count)
        meta = {"examples": count, "tokens": int(offsets[-1]), "version": FORMAT_VERSION, "truncation": truncation}
        (staging / "meta.json").write_text(json.dumps(meta))
        try:
            os.replace(staging, directory)
        except OSError:  # another process finished the same cache first: use that one
            if not (directory / "meta.json").exists():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return TokenCache.open(directory)


def cached_examples(
    records: Iterable[Record], encoder: RecordEncoder, root: str | Path, *, split: str = "data", progress: bool = False
) -> tuple[TokenCache, bool]:
    """The cache of ``records`` under ``root``: reused when its fingerprint exists, else built.
    ``records`` is read in passes (a list, or a re-iterable stream such as
    :class:`omnidistill.data.sources.RecordStream`). Returns the cache and whether it was built now."""
    digest, count = fingerprint(records, encoder)
    directory = Path(root) / f"{split}-{digest}"
    if (directory / "meta.json").exists():
        return TokenCache.open(directory), False
    return build(records, encoder, directory, total=count, progress=progress), True
