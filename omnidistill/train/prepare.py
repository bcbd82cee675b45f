"""``omnidistill prepare``: build the token caches of a config's splits before training."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from omnidistill.config import Config, ConfigError
from omnidistill.data.own_fields import check_keep_fields
from omnidistill.data.splits import check_split_files, stream_split
from omnidistill.data.token_cache import cached_examples
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.models.loader import load_tokenizer
from omnidistill.runs.run_dir import is_run_directory


def run_tokenizer(cfg: Config) -> Any:
    """The tokenizer a run of ``cfg`` uses (``model.tokenizer``, else ``model.init_from``'s)."""
    name = cfg.model.tokenizer or cfg.model.init_from
    if name is None:
        raise ConfigError("model.tokenizer (or model.init_from) must name a tokenizer")
    if not cfg.model.tokenizer and is_run_directory(name):
        name = str(Path(name) / "tokenizer")
    return load_tokenizer(str(name))


def prepare_caches(cfg: Config, splits: tuple[str, ...] = ("train", "dev", "test")) -> list[dict[str, Any]]:
    """Build (or find) the token cache of every split ``cfg`` names under ``data.token_cache``; one row
    per split: examples, tokens, folder, whether it was built now, seconds."""
    if not cfg.data.token_cache:
        raise ConfigError("data.token_cache: name the cache folder, e.g. data.token_cache=.cache/tokens")
    check_keep_fields(cfg.data.keep_fields, "data.keep_fields")
    for split in splits:  # every file before any split's cache is built
        check_split_files(cfg.data, split, f"data.{split}")
    encoder = RecordEncoder.from_config(run_tokenizer(cfg), cfg.data)
    rows = []
    for split in splits:
        records = stream_split(cfg.data, split)  # streamed through, never held
        if not records:  # the split is absent (a RecordStream always names files)
            continue
        start = time.perf_counter()
        cache, built = cached_examples(records, encoder, cfg.data.token_cache, split=split, progress=True)
        rows.append(
            {
                "split": split,
                "examples": len(cache),
                "skipped": getattr(records, "skipped", 0),
                "tokens": int(cache.offsets[-1]),
                "folder": str(cache.directory),
                "built": built,
                "seconds": round(time.perf_counter() - start, 2),
            }
        )
    return rows
