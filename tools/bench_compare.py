"""Side-by-side tables of omnidistill against the PyTorch peer, from the JSON lines both print.

    python tools/bench_compare.py peer_eager.jsonl peer_compile.jsonl ours_train.jsonl ours_score.jsonl

Peer lines carry ``compile``; ours carry ``framework: omnidistill-jax``. Lines of the realistic-length
scoring case (``mode: varlen``: the peer's ``--varlen`` and ``tools/bench_score.py --varlen``) are
compared as their own rows, ``MODEL [varlen]`` (and ours with ``--pack-length N`` as ``MODEL [varlen] packed N``,
with ``--batch-tokens N`` as ``MODEL [varlen] tokens N``, against the same peer figures). Prints a Markdown table for
training (tokens/s, ratio to the eager and compiled peer, MFU, peak memory) and one for inference
(examples/s and ratios), with the issue's targets: training >= 1.5x eager and >= 1.2x compiled,
inference >= 2x eager.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TRAIN_TARGETS = {"eager": 1.5, "compiled": 1.2}
INFER_TARGETS = {"eager": 2.0, "compiled": 1.3}


def read_rows(paths: list[str]) -> tuple[dict, dict, dict, dict]:
    """(peer eager, peer compiled, our training, our inference) rows by model name; error rows skipped."""
    eager, compiled, train, infer = {}, {}, {}, {}
    for path in paths:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.startswith("{"):
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise SystemExit(f"{path}:{number}: not JSON ({err})") from None
            if "model" not in row or "error" in row:
                continue
            name = row["model"] + (" [varlen]" if row.get("mode") == "varlen" else "")  # realistic lengths, dynamic padding
            if row.get("pack_length"):  # our packed rows: compared with the same peer rows as the padded ones
                name += f" packed {row['pack_length']}"
            if row.get("batch_tokens"):  # our batches filled by tokens, layers unpadded: the same peer rows too
                name += f" tokens {row['batch_tokens']}"
            if row.get("framework") == "omnidistill-jax":
                if "train_tok_s" in row:
                    train[name] = row
                if "infer_ex_s" in row:
                    infer[name] = row
            elif "compile" in row:
                (compiled if row["compile"] else eager)[name] = row
    return eager, compiled, train, infer


def _ratio(ours: float | None, theirs: float | None, target: float) -> str:
    if not ours or not theirs:
        return "–"
    r = ours / theirs
    return f"{r:.2f}× {'✓' if r >= target else '✗'}"


def _num(x: float | None) -> str:
    return f"{x:,.0f}" if x else "–"


def tables(eager: dict, compiled: dict, train: dict, infer: dict) -> str:
    """The two Markdown tables."""
    names = list(dict.fromkeys([*eager, *compiled, *train, *infer]))
    out = [
        "| model | peer eager tok/s | peer compiled tok/s | omnidistill tok/s | vs eager (≥1.5) | vs compiled (≥1.2) "
        "| MFU | peak GB (peer / ours) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        e, c, o = eager.get(n, {}), compiled.get(n, {}), train.get(n, {})
        ours = o.get("train_tok_s")
        if not (ours or e.get("train_tok_s") or c.get("train_tok_s")):
            continue  # a scoring-only case (--varlen)
        vs_eager = _ratio(ours, e.get("train_tok_s"), TRAIN_TARGETS["eager"])
        vs_compiled = _ratio(ours, c.get("train_tok_s"), TRAIN_TARGETS["compiled"])
        # Ours: XLA's per-case compiled peak where reported (the measured device peak is the process's
        # high-water mark, carried over from earlier, larger cases of the same run).
        mine = o.get("compiled_peak_GB", o.get("peak_GB"))
        peak = f"{e.get('peak_GB', '–')} / {mine if mine is not None else '–'}"
        out.append(
            f"| {n} | {_num(e.get('train_tok_s'))} | {_num(c.get('train_tok_s'))} | {_num(ours)} | "
            f"{vs_eager} | {vs_compiled} | "
            f"{o.get('mfu_vs_989', '–')} | {peak} |"
        )
    out += [
        "",
        "| model | peer eager ex/s | peer compiled ex/s | omnidistill ex/s | vs eager (≥2) | vs compiled (≥1.3) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        peer = n.split(" packed ")[0].split(" tokens ")[0]
        e, c, o = eager.get(peer, {}), compiled.get(peer, {}), infer.get(n, {})
        ours = o.get("infer_ex_s")
        out.append(
            f"| {n} | {_num(e.get('infer_ex_s'))} | {_num(c.get('infer_ex_s'))} | {_num(ours)} | "
            f"{_ratio(ours, e.get('infer_ex_s'), INFER_TARGETS['eager'])} | "
            f"{_ratio(ours, c.get('infer_ex_s'), INFER_TARGETS['compiled'])} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", help="JSON-lines outputs of the peer script and the bench tools")
    args = p.parse_args()
    print(tables(*read_rows(args.files)), end="")


if __name__ == "__main__":
    main()
