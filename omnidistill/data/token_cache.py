"""Token cache: each split tokenized once, stored flat on disk, read back by index.

A cache holds, for N examples, one flat ``int32`` array of every example's token ids with ``N + 1``
offsets, and the ``[N, 4]`` labels and label masks: exactly what :class:`RecordEncoder` returns for
each record, so batches built from it equal batches built by tokenizing on the fly. The arrays are
memory-mapped, so a training process holds no Python object per example.

A cache lives in ``<data.token_cache>/<fingerprint>/``. The fingerprint covers everything that
changes the tokens: the tokenizer's full definition, the input format, layout, truncation and
``max_length``, and every record's text fields and labels. A changed input gives a new fingerprint
(a new cache); an unchanged one reuses the cache across epochs and runs. A cache is written into a
temporary folder and renamed into place at the end, so an interrupted build leaves nothing that is
ever read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from omnidistill.data.schema import Record
from omnidistill.data.tokenize import RecordEncoder, label_arrays
from omnidistill.dimensions import NUM_DIMENSIONS

FORMAT_VERSION = 1
CHUNK = 2048
"""Records tokenized per batched tokenizer call."""
_ARRAYS = ("tokens", "offsets", "labels", "label_mask")


@dataclasses.dataclass(frozen=True)
class TokenCache(Sequence):
    """Random-access encoded examples: ``cache[i]`` is ``RecordEncoder(records[i])``."""

    tokens: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray
    label_mask: np.ndarray
    directory: Path | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:  # type: ignore[override]
        start, end = self.offsets[i], self.offsets[i + 1]
        return {"input_ids": self.tokens[start:end], "labels": self.labels[i], "label_mask": self.label_mask[i]}

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


def fingerprint(records: Sequence[Record], encoder: RecordEncoder) -> str:
    """Hex digest of everything that determines the cached arrays."""
    h = hashlib.sha256()
    settings = {
        "version": FORMAT_VERSION,
        "max_length": encoder.max_length,
        "truncation": encoder.truncation,
        "layout": dataclasses.asdict(encoder.layout),
        "specials": [encoder.pad_id, getattr(encoder.tokenizer, "all_special_ids", None)],
    }
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    h.update(_tokenizer_definition(encoder.tokenizer).encode())
    for r in records:
        fields = (r.task, r.question, r.source, r.reference, r.candidate, r.context, r.title, r.labels)
        h.update(json.dumps(fields, ensure_ascii=False, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()[:32]


def build(records: Sequence[Record], encoder: RecordEncoder, directory: str | Path, *, progress: bool = False) -> TokenCache:
    """Tokenize ``records`` into a new cache at ``directory`` (written atomically)."""
    from tqdm import tqdm

    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        offsets = np.zeros(len(records) + 1, np.int64)
        labels = np.zeros((len(records), NUM_DIMENSIONS), np.float32)
        label_mask = np.zeros((len(records), NUM_DIMENSIONS), np.float32)
        chunks = []
        with tqdm(total=len(records), desc="tokenize", unit="ex", disable=not progress, dynamic_ncols=True) as bar:
            for start in range(0, len(records), CHUNK):
                part = [records[i] for i in range(start, min(start + CHUNK, len(records)))]
                for i, (record, ids) in enumerate(zip(part, encoder.token_ids_many(part), strict=True), start=start):
                    chunks.append(ids)
                    offsets[i + 1] = offsets[i] + len(ids)
                    labels[i], label_mask[i] = label_arrays(record)
                bar.update(len(part))
        tokens = np.concatenate(chunks).astype(np.int32) if chunks else np.zeros(0, np.int32)
        for name, array in zip(_ARRAYS, (tokens, offsets, labels, label_mask), strict=True):
            np.save(staging / f"{name}.npy", array)
        (staging / "meta.json").write_text(json.dumps({"examples": len(records), "tokens": len(tokens), "version": FORMAT_VERSION}))
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
    records: Sequence[Record], encoder: RecordEncoder, root: str | Path, *, split: str = "data", progress: bool = False
) -> tuple[TokenCache, bool]:
    """The cache of ``records`` under ``root``: reused when its fingerprint exists, else built.
    Returns the cache and whether it was built now."""
    directory = Path(root) / f"{split}-{fingerprint(records, encoder)}"
    if (directory / "meta.json").exists():
        return TokenCache.open(directory), False
    return build(records, encoder, directory, progress=progress), True
