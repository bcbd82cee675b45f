"""Memory and speed of ``omnidistill score`` on large files: the process's own memory stays flat in the
number of input lines, because the input is streamed in chunks and each chunk is written as it is
scored (omnidistill/score_file.py).

The shipped test split is replicated to each size in ``--lines`` (ids made unique) and scored by
``omnidistill score`` in a fresh process; its ``RssAnon`` (heap memory: no file pages) is sampled from
``/proc/PID/status`` every 0.1 s and the peak is reported (and the peak of its sum with its child
processes', the ``--input-workers``), with the wall time and items per second:

    python tools/bench_score_file.py --model runs/tiny-export                    # 100k and 1M lines
    python tools/bench_score_file.py --model runs/tiny-export --lines 2000 8000   # a quick look
    python tools/bench_score_file.py --model runs/tiny-export --format csv        # the same items as CSV
    python tools/bench_score_file.py --model runs/tiny-export --host-only --lines 20000  # score's host work alone
    python tools/bench_score_file.py --tokenizer assets/tiny-wordpiece --host-only --lines 100000  # no model needed
    python tools/bench_score_file.py --tokenizer assets/tiny-wordpiece --host-only --input-workers 0 2 4  # one run each

``--host-only`` measures what ``score`` does besides the model, in this process: ``score_file`` with
the model's own tokenizer and input settings, but a stand-in that returns fixed scores at once for the
model's forward pass (and its batching). Its items/s is the most ``score`` can reach on this host
whatever the device. Each part is also timed alone, one thread, in µs per item: reading and checking
the records, tokenizing them (``encode_inputs``, chunk by chunk), rendering each record's fields as
the head of its output line (``output_heads``), writing the lines and adding to the running means.
On a GPU, reading, writing and the means run under Python's lock and add up; tokenizing runs mostly
in the tokenizer's own threads. ``--input-workers N`` moves reading, checking,
tokenizing and the heads to N worker processes (``data/parallel_read.py``).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from omnidistill.dimensions import NUM_DIMENSIONS

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample" / "test.jsonl"


TEXT_FIELDS = ("id", "task", "lang", "question", "source", "reference", "candidate")


def replicate(path: Path, n: int) -> None:
    """The sample's test items cycled to ``n`` lines, each with its own id: JSONL, or CSV (its text
    fields and one column per label) when ``path`` ends in ``.csv``."""
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    with path.open("w", encoding="utf-8", newline="") as f:
        if path.suffix == ".csv":
            writer = csv.DictWriter(f, [*TEXT_FIELDS, *rows[0]["labels"]])
            writer.writeheader()
            for i in range(n):
                row = rows[i % len(rows)]
                writer.writerow({**{k: row[k] for k in TEXT_FIELDS if k in row}, **row["labels"], "id": f"item-{i}"})
            return
        for i in range(n):
            f.write(json.dumps({**rows[i % len(rows)], "id": f"item-{i}"}, ensure_ascii=False) + "\n")


def rss_anon_gb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 2**20
    except FileNotFoundError:
        return None
    return None


def children(pid: int) -> list[int]:
    """The process's child processes (``score --input-workers``' workers, and the resource tracker)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def measure(model: str, lines: int, workdir: Path, chunk: int, kind: str = "jsonl", workers: int | None = None) -> dict:
    data, out = workdir / f"in-{lines}.{kind}", workdir / f"out-{lines}-{workers}.jsonl"
    if not data.exists():  # one input per size, for every --input-workers value
        replicate(data, lines)
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "omnidistill", "score", "--model", model, "--input", str(data), "--output", str(out)]
    start = time.perf_counter()
    command += ["--chunk", str(chunk), *([] if workers is None else ["--input-workers", str(workers)])]
    # every run compiles its programs, as before the CLI kept them (omnidistill/compile_cache.py), so that runs compare alike
    env = {**os.environ, "OMNIDISTILL_COMPILE_CACHE": "off"}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    peak = peak_all = 0.0
    while proc.poll() is None:
        own = rss_anon_gb(proc.pid) or 0.0
        peak, peak_all = max(peak, own), max(peak_all, own + sum(rss_anon_gb(c) or 0.0 for c in children(proc.pid)))
        time.sleep(0.1)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"omnidistill score failed ({proc.returncode}): {' '.join(command)}")
    written = sum(1 for _ in out.open(encoding="utf-8"))
    return {
        "format": kind,
        "lines": lines,
        "input_workers": "auto" if workers is None else workers,
        "written": written,
        "peak_RssAnon_GB": round(peak, 3),
        "peak_RssAnon_with_workers_GB": round(peak_all, 3),
        "wall_s": round(seconds, 1),
        "items_per_s": round(lines / seconds),
    }


@dataclasses.dataclass
class FixedScores:
    """A scorer whose predictions are 3.0 on every dimension, made at once, with a real model's
    ``encoder`` (tokenizer and input settings): ``score_file`` then does all its host work (reading,
    tokenizing, writing, means) and nothing else."""

    encoder: Any
    source: str

    @classmethod
    def of(cls, model: str | None, tokenizer: str | None) -> FixedScores:
        """With a loaded model's encoder, or a tokenizer folder's with the default ``data`` settings."""
        if model:
            from omnidistill.scorer import Scorer

            scorer = Scorer.load(model)
            return cls(scorer.encoder, scorer.source)
        from omnidistill.config import DataConfig
        from omnidistill.data.tokenize import RecordEncoder
        from omnidistill.models.loader import load_tokenizer

        return cls(RecordEncoder.from_config(load_tokenizer(tokenizer), DataConfig()), str(tokenizer))

    def fingerprint(self) -> str:
        return "fixed scores"

    def warn_truncated(self, count: int) -> None:
        pass

    def predict(self, records: list, *, encoded: Any = None, **_: Any) -> Any:
        from omnidistill.scorer import Prediction

        return Prediction(np.full((len(records), NUM_DIMENSIONS), 3.0, np.float32), truncated=encoded.truncated if encoded else 0)


def microseconds_per_item(seconds: float, items: int) -> float:
    return round(1e6 * seconds / items, 1)


def host_only(scorer: FixedScores, lines: int, workdir: Path, chunk: int, kind: str = "jsonl", workers: int = 0) -> dict:
    """``score``'s host work on ``lines`` replicated sample items, the model replaced by
    :class:`FixedScores` (module docstring): items/s of the whole, and µs per item of each part."""
    from omnidistill.data.sources import RecordStream
    from omnidistill.score_file import GroupMeans, output_heads, score_file, score_lines

    data, out = workdir / f"in-{lines}.{kind}", workdir / f"host-{lines}.jsonl"
    replicate(data, lines)
    out.unlink(missing_ok=True)
    start = time.perf_counter()
    score_file(scorer, [data], out, chunk=chunk, input_workers=workers)
    seconds = time.perf_counter() - start
    parts = {}
    start = time.perf_counter()
    records = list(RecordStream([data], require_labels=False))
    parts["read"] = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(0, len(records), chunk):
        scorer.encoder.encode_inputs(records[i : i + chunk])
    parts["tokenize"] = time.perf_counter() - start
    scores = np.full((len(records), NUM_DIMENSIONS), 3.0, np.float32)
    start = time.perf_counter()
    for i in range(0, len(records), chunk):
        output_heads(records[i : i + chunk])
    parts["heads"] = time.perf_counter() - start
    heads = output_heads(records)
    start = time.perf_counter()
    for i in range(0, len(records), chunk):
        score_lines(heads[i : i + chunk], scores[i : i + chunk])
    parts["write"] = time.perf_counter() - start
    start = time.perf_counter()
    means = GroupMeans()
    for i in range(0, len(records), chunk):
        means.add_chunk(records[i : i + chunk], scores[i : i + chunk])
    parts["means"] = time.perf_counter() - start
    return {
        "mode": "host-only",
        "format": kind,
        "lines": lines,
        "input_workers": workers,
        "written": sum(1 for _ in out.open(encoding="utf-8")),
        "wall_s": round(seconds, 2),
        "items_per_s": round(lines / seconds),
        **{f"{name}_us_per_item": microseconds_per_item(t, len(records)) for name, t in parts.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="run directory or exported folder to score with")
    parser.add_argument("--lines", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="the input file's format (default jsonl)")
    parser.add_argument("--host-only", action="store_true", help="score's host work alone, the model replaced by fixed scores")
    parser.add_argument("--tokenizer", help="with --host-only instead of --model: a tokenizer folder, the default data settings")
    parser.add_argument(
        "--input-workers",
        type=int,
        nargs="+",
        metavar="N",
        help="score --input-workers for each run, one run per value (default: score's own default; 0 with --host-only)",
    )
    args = parser.parse_args(argv)
    if not (args.model or (args.host_only and args.tokenizer)):
        parser.error("give --model (or, with --host-only, --tokenizer)")
    rows = []
    scorer = FixedScores.of(args.model, args.tokenizer) if args.host_only else None
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.lines:
            for workers in args.input_workers or [0 if args.host_only else None]:
                if scorer is not None:
                    rows.append(host_only(scorer, n, Path(tmp), args.chunk, args.format, workers))
                else:
                    rows.append(measure(args.model, n, Path(tmp), args.chunk, args.format, workers))
                print(json.dumps(rows[-1]), flush=True)
    if args.host_only:
        return
    print("| input | lines | input workers | peak RssAnon (GB) | with its workers | wall (s) | items/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['format']} | {r['lines']:,} | {r['input_workers']} | {r['peak_RssAnon_GB']} | {r['peak_RssAnon_with_workers_GB']} "
            f"| {r['wall_s']} | {r['items_per_s']:,} |"
        )


if __name__ == "__main__":
    main()
