"""Input-pipeline throughput on one process: tokenizing on the fly against reading the token cache.

The shipped sample is replicated to ``--records`` examples (the paper's 564k training set by default)
and written to a JSONL file. Prints one JSON line per measurement and a Markdown table:

    python tools/bench_pipeline.py                      # 564k records, configs/tiny.yaml's tokenizer and buckets
    python tools/bench_pipeline.py --records 100000 --batches 500

Figures are host-side only (no model): real (non-padding) tokens per second and examples per second
of the batches a training process receives, the time ``omnidistill prepare`` takes for the file,
and memory: the peak resident set of this process (which holds the records for the on-the-fly
rows), and of a fresh training-side process that opens the split through the cache
(``training_records``, which streams the file to check the fingerprint) and reads ``--reader-batches``
(500) batches, at ``--records`` and at a tenth of them. That process's own memory (``RssAnon``: heap, no file pages)
is flat in the number of records; its peak resident set also counts the cache pages it touched,
which the kernel can drop.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

import grain

from omnidistill.config import load_config
from omnidistill.data.pipeline import PackSpec, packed_train_dataset, train_dataset
from omnidistill.data.sources import RecordStream, read_records
from omnidistill.data.token_cache import cached_examples
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.train.prepare import run_tokenizer

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample" / "train.jsonl"

READER = """
import json, resource, sys, time
from itertools import islice
from omnidistill.config import load_config
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.train.prepare import run_tokenizer
from omnidistill.train.setup import training_batches, training_records
cfg = load_config(sys.argv[2], sys.argv[3:])
encoder = RecordEncoder.from_config(run_tokenizer(cfg), cfg.data)
start = time.perf_counter()
cache, _ = training_records(cfg, encoder)
opened = time.perf_counter() - start
for _ in islice(training_batches(cfg, cache, encoder), int(sys.argv[1])):
    pass
# /proc, not ru_maxrss: on Linux a child's ru_maxrss starts from its parent's resident set at fork.
# VmHWM: peak resident set; RssAnon: the process's own (heap) memory, without the cache's file pages
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
gb = {key: round(int(status[key].split()[0]) / 2**20, 3) for key in ("VmHWM", "RssAnon", "RssFile")}
print(json.dumps({"examples": len(cache), "open_s": round(opened, 2), **gb}))
"""


def replicate(path: Path, n: int) -> Path:
    """The shipped sample's records cycled to ``n`` lines (each with its own id), written to ``path``."""
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({**rows[i % len(rows)], "id": f"r{i}"}, ensure_ascii=False) + "\n")
    return path


def throughput(batches, count: int) -> dict[str, float]:
    """Examples/s and real tokens/s over ``count`` batches, after one warm-up batch."""
    it = iter(batches)
    next(it)
    examples = tokens = 0
    start = time.perf_counter()
    for batch in islice(it, count):
        examples += int(batch["example_mask"].sum())
        tokens += int(batch["attention_mask"].sum())
    seconds = time.perf_counter() - start
    return {"examples_per_s": round(examples / seconds), "tokens_per_s": round(tokens / seconds), "seconds": round(seconds, 2)}


def peak_rss_gb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def cache_reader(config: str, overrides: list[str], batches: int) -> dict:
    """A fresh process opening the training split through the cache and reading ``batches`` batches."""
    done = subprocess.run([sys.executable, "-c", READER, str(batches), config, *overrides], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "tiny.yaml"))
    parser.add_argument("--records", type=int, default=564_000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batches", type=int, default=2000, help="batches timed per bucketed measurement")
    parser.add_argument("--packed-batches", type=int, default=300)
    parser.add_argument("--pack-length", type=int, default=512)
    parser.add_argument("--reader-batches", type=int, default=500, help="batches each cache reader process reads")
    parser.add_argument("--cache-dir", default=None, help="token cache folder (default: a temporary one)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="od-bench-pipeline-"))
    cache_dir = args.cache_dir or str(work / "cache")
    overrides = [f"data.max_length={min(512, args.pack_length)}", f"data.token_cache={cache_dir}", f"train.batch_size={args.batch}"]
    cfg = load_config(args.config, overrides)
    encoder = RecordEncoder.from_config(run_tokenizer(cfg), cfg.data)
    data = replicate(work / "train.jsonl", args.records)
    start = time.perf_counter()
    records = read_records(data)[0]
    rows = [{"what": "records in memory", "seconds": round(time.perf_counter() - start, 2), "peak_rss_gb": peak_rss_gb()}]

    start = time.perf_counter()
    cache, built = cached_examples(RecordStream(data), encoder, cache_dir, split="train", progress=True)
    what = "prepare (tokenize into the cache)" if built else "prepare (cache reused)"
    rows.append({"what": what, "seconds": round(time.perf_counter() - start, 2)})

    read = grain.ReadOptions(num_threads=cfg.data.read_threads, prefetch_buffer_size=cfg.data.prefetch_buffer)
    bucketed = dict(global_batch=args.batch, seed=0, buckets=cfg.data.length_buckets)
    for label, source in (("bucketed, tokenized on the fly", records), ("bucketed, from the cache", cache)):
        ds = train_dataset(source, encoder, **bucketed).to_iter_dataset(read)
        rows.append({"what": label, **throughput(ds, args.batches)})
    pack = dict(global_batch=args.batch, seed=0, pack=PackSpec(args.pack_length, cfg.data.pack_max_segments, cfg.data.pack_bins))
    for label, source in (("packed, tokenized on the fly", records), ("packed, from the cache", cache)):
        rows.append({"what": label, **throughput(packed_train_dataset(source, encoder, **pack, read_options=read), args.packed_batches)})
    rows.append({"what": "peak resident memory (this process, records held)", "peak_rss_gb": peak_rss_gb()})
    tenth = replicate(work / "tenth.jsonl", max(args.batch, args.records // 10))
    cached_examples(RecordStream(tenth), encoder, cache_dir, split="train")  # the reader finds both caches built
    for n, path in ((args.records, data), (max(args.batch, args.records // 10), tenth)):
        reader = cache_reader(args.config, [*overrides, f"data.train=[{path}]"], args.reader_batches)
        what = f"cache reader process, {n:,} records (open: stream + fingerprint)"
        rows.append({"what": what, "seconds": reader["open_s"], "peak_rss_gb": reader["VmHWM"], "anon_gb": reader["RssAnon"]})
    shutil.rmtree(work, ignore_errors=True)  # the replicated files, and the cache unless --cache-dir named one

    for row in rows:
        print(json.dumps(row))
    print(f"\n{args.records} records, batch {args.batch}, {cfg.data.read_threads} read threads\n")
    print("| what | examples/s | real tokens/s | seconds | peak RSS (GB) | own memory (GB) |\n|---|---:|---:|---:|---:|---:|")
    for row in rows:
        cells = [row.get(key, "") for key in ("examples_per_s", "tokens_per_s", "seconds", "peak_rss_gb", "anon_gb")]
        print(f"| {row['what']} | " + " | ".join(f"{c:,}" if isinstance(c, int) else str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
