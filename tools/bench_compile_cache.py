"""Wall time of one ``omnidistill`` command with the compilation cache off, cold and warm.

    python tools/bench_compile_cache.py -- score --model /tmp/minilm --input data/sample/test.jsonl --output {out}
    python tools/bench_compile_cache.py --repeat 3 -- eval runs/tiny --no-plots
    python tools/bench_compile_cache.py -- train configs/tiny.yaml train.output_dir={out}
    python tools/bench_compile_cache.py --bert-case mbert --repeat 1 -- score --model {model} --input data/sample/test.jsonl --output {out}

The command runs in fresh processes (imports, model load and compiles included, as a user runs it):
once with the cache in a new folder (``cold``: every program compiled and written), then ``--repeat``
times each with the cache off and warm, alternated, so that a noisy host slows both alike. ``{out}``
in the command becomes a path that does not exist yet, new for every run (an output file or a run
folder). Prints one JSON line per run and a last one with the medians, the cache's entries and size,
and whether the warm runs' ``{out}`` files equal the one of a run without the cache. ``--bert-case
NAME`` first builds a random 4-label ``BertForSequenceClassification`` at the shapes of that BERT case
of ``tools/bench_cases.py`` (``mbert``, ``bert-large(mxbai)``), with the vocabulary of
``assets/tiny-wordpiece`` (nothing is downloaded; the embedding is smaller, the layers are the
case's), and ``{model}`` names its folder: a GPU machine's compile times at real shapes.
(omnidistill/compile_cache.py; docs/benchmarks.md, "Compilation cache".)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bert_classifier(case: str, folder: Path, **sizes: int) -> Path:
    """A random (seeded) 4-label BertForSequenceClassification at ``case``'s shapes (``sizes`` replace
    some), with the shipped tiny WordPiece tokenizer, saved in ``folder``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    sys.path.insert(0, str(ROOT / "tools"))
    from bench_cases import CASES

    family, shapes = CASES[case]
    if family != "bert":
        raise SystemExit(f"--bert-case {case}: a {family} case, not a BERT one")
    tokenizer = AutoTokenizer.from_pretrained(ROOT / "assets" / "tiny-wordpiece")
    torch.manual_seed(0)
    config = BertConfig(**{**shapes, **sizes, "vocab_size": len(tokenizer)}, num_labels=4, problem_type="multi_label_classification")
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run(command: list[str], out: Path, cache: Path | None, model: Path | None = None) -> float:
    """Seconds of ``omnidistill COMMAND`` in a new process, with the cache in ``cache`` (None: off)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["OMNIDISTILL_COMPILE_CACHE"] = str(cache) if cache else "off"
    argv = [sys.executable, "-m", "omnidistill", *(part.replace("{out}", str(out)).replace("{model}", str(model)) for part in command)]
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(argv)}\n{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="runs of each of off and warm, alternated (default: %(default)s)")
    p.add_argument("--bert-case", metavar="NAME", help="build a random BERT classifier at this case's shapes; {model} names it")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the omnidistill command after --, with {out} for a new output path")
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the omnidistill command after --")
    with tempfile.TemporaryDirectory() as tmp:
        cache, outs = Path(tmp) / "cache", Path(tmp) / "outs"
        outs.mkdir()
        model = bert_classifier(args.bert_case, Path(tmp) / "model") if args.bert_case else None
        times: dict[str, list[float]] = {"off": [], "warm": []}
        cold = run(command, outs / "cold", cache, model)
        print(json.dumps({"mode": "cold", "s": round(cold, 2)}), flush=True)
        for i in range(args.repeat):
            for mode in ("off", "warm"):
                seconds = run(command, outs / f"{mode}-{i}", cache if mode == "warm" else None, model)
                times[mode].append(seconds)
                print(json.dumps({"mode": mode, "s": round(seconds, 2)}), flush=True)
        entries = [f for f in cache.rglob("*-cache") if f.is_file()]
        same = None
        if (outs / "off-0").is_file():
            same = all((outs / f"warm-{i}").read_bytes() == (outs / "off-0").read_bytes() for i in range(args.repeat))
        off, warm = statistics.median(times["off"]), statistics.median(times["warm"])
        summary = {
            "command": " ".join(command),
            "bert_case": args.bert_case,
            "cold_s": round(cold, 2),
            "off_s": round(off, 2),
            "warm_s": round(warm, 2),
            "off_over_warm": round(off / warm, 2),
            "entries": len(entries),
            "cache_MB": round(sum(f.stat().st_size for f in entries) / 2**20, 1),
            "same_output": same,
        }
        print(json.dumps(summary), flush=True)
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
