"""Memory and speed of ``omnidistill score`` on large files: the process's own memory stays flat in the
number of input lines, because the input is streamed in chunks and each chunk is written as it is
scored (omnidistill/score_file.py).

The shipped test split is replicated to each size in ``--lines`` (ids made unique) and scored by
``omnidistill score`` in a fresh process; its ``RssAnon`` (heap memory: no file pages) is sampled from
``/proc/PID/status`` every 0.1 s and the peak is reported, with the wall time and items per second:

    python tools/bench_score_file.py --model runs/tiny-export                    # 100k and 1M lines
    python tools/bench_score_file.py --model runs/tiny-export --lines 2000 8000   # a quick look
    python tools/bench_score_file.py --model runs/tiny-export --format csv        # the same items as CSV
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def measure(model: str, lines: int, workdir: Path, chunk: int, kind: str = "jsonl") -> dict:
    data, out = workdir / f"in-{lines}.{kind}", workdir / f"out-{lines}.jsonl"
    replicate(data, lines)
    command = [sys.executable, "-m", "omnidistill", "score", "--model", model, "--input", str(data), "--output", str(out)]
    start = time.perf_counter()
    proc = subprocess.Popen([*command, "--chunk", str(chunk)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, rss_anon_gb(proc.pid) or 0.0)
        time.sleep(0.1)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"omnidistill score failed ({proc.returncode}): {' '.join(command)}")
    written = sum(1 for _ in out.open(encoding="utf-8"))
    return {
        "format": kind,
        "lines": lines,
        "written": written,
        "peak_RssAnon_GB": round(peak, 3),
        "wall_s": round(seconds, 1),
        "items_per_s": round(lines / seconds),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="run directory or exported folder to score with")
    parser.add_argument("--lines", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="the input file's format (default jsonl)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.lines:
            rows.append(measure(args.model, n, Path(tmp), args.chunk, args.format))
            print(json.dumps(rows[-1]), flush=True)
    print("| input | lines | peak RssAnon (GB) | wall (s) | items/s |\n|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['format']} | {r['lines']:,} | {r['peak_RssAnon_GB']} | {r['wall_s']} | {r['items_per_s']:,} |")


if __name__ == "__main__":
    main()
