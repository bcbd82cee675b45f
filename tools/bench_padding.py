"""Padding and host input throughput of the training pipeline, bucketed vs packed, on a config's
training data: python tools/bench_padding.py configs/tiny.yaml [--batches 200] [--pack-length 512]

One JSON line per layout: padding_fraction (padding tokens / processed tokens), examples/s and
tokens/s the host pipeline delivers (tokenization included, one process, no workers; read threads and prefetch from the config).
"""

from __future__ import annotations

import argparse
import json
import time

import grain

from omnidistill.config import load_config
from omnidistill.data.pipeline import PackSpec, packed_train_dataset, train_dataset
from omnidistill.data.splits import load_split
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.models.loader import load_tokenizer


def measure(batches, n: int) -> dict:
    it = iter(batches)
    next(it)  # warm-up
    real = total = examples = 0
    start = time.perf_counter()
    for _ in range(n):
        b = next(it)
        real += int(b["attention_mask"].sum())
        total += int(b["attention_mask"].size)
        examples += int(b["example_mask"].sum())
    dt = time.perf_counter() - start
    return dict(padding_fraction=round(1 - real / total, 4), examples_per_s=round(examples / dt), tokens_per_s=round(total / dt))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--pack-length", type=int, default=512)
    args = p.parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    records, _ = load_split(cfg.data, "train")
    encoder = RecordEncoder.from_config(load_tokenizer(cfg.model.tokenizer or cfg.model.init_from), cfg.data)
    batch, seed = cfg.train.batch_size, cfg.train.seed
    read = grain.ReadOptions(num_threads=cfg.data.read_threads, prefetch_buffer_size=cfg.data.prefetch_buffer)
    bucketed = train_dataset(records, encoder, global_batch=batch, seed=seed, buckets=cfg.data.length_buckets).to_iter_dataset(read)
    print(json.dumps(dict(layout="bucketed", buckets=cfg.data.length_buckets, batch=batch, **measure(bucketed, args.batches))), flush=True)
    fine = list(range(16, cfg.data.max_length + 16, 16))
    ds = train_dataset(records, encoder, global_batch=batch, seed=seed, buckets=fine).to_iter_dataset(read)
    print(json.dumps(dict(layout="bucketed-every-16", batch=batch, **measure(ds, args.batches))), flush=True)
    spec = PackSpec(args.pack_length, cfg.data.pack_max_segments, cfg.data.pack_bins)
    rows = max(1, batch * cfg.data.max_length // args.pack_length)
    packed = packed_train_dataset(records, encoder, global_batch=rows, seed=seed, pack=spec, read_options=read)
    print(json.dumps(dict(layout="packed", pack_length=args.pack_length, rows=rows, **measure(packed, args.batches))), flush=True)


if __name__ == "__main__":
    main()
