"""Evaluation cost at the paper's sizes: python tools/bench_eval.py [--dev 24524] [--test 8617] [--bootstrap 1000]

Synthetic labels and predictions (half-point gold as two annotators give, noisy predictions); prints
one JSON line per measurement. Targets (issue 16): a dev evaluation with reused tie thresholds adds
< 5 s at 24.5k items; 1,000 bootstrap resamples at 8,617 items take < 30 s on one core.
Run with OMP_NUM_THREADS=1 (and the like) for the one-core figure.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from omnidistill.data.schema import Record
from omnidistill.eval.report import build_report, headline_cis

TASKS = ("qa", "mt", "summarization", "headline", "paraphrase")
LANGS = ("ar", "as", "bn", "en", "hi", "np")


def synthetic(n: int, seed: int = 0) -> tuple[list[Record], np.ndarray]:
    rng = np.random.default_rng(seed)
    gold = np.round(np.clip(rng.normal(4.2, 0.9, (n, 4)), 1, 5) * 2) / 2
    pred = np.clip(gold + rng.normal(0, 0.9, (n, 4)), 1, 5)
    records = [
        Record(id=str(i), task=TASKS[i % len(TASKS)], lang=LANGS[i % len(LANGS)], candidate="x", labels=tuple(map(float, gold[i])))
        for i in range(n)
    ]
    return records, pred


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dev", type=int, default=24524)
    p.add_argument("--test", type=int, default=8617)
    p.add_argument("--bootstrap", type=int, default=1000)
    args = p.parse_args()
    records, pred = synthetic(args.dev)
    first, fit_s = timed(lambda: build_report(records, pred))
    eps = {d: c["epsilon"] for d, c in first["tie_calibration"].items()}
    _, reuse_s = timed(lambda: build_report(records, pred, epsilon=eps))
    print(json.dumps({"case": "dev evaluation", "items": args.dev, "first_eval_fits_epsilon_s": round(fit_s, 2),
                      "later_evals_reuse_epsilon_s": round(reuse_s, 2), "target_s": 5}))  # fmt: skip
    records, pred = synthetic(args.test, seed=1)
    gold = np.array([r.labels for r in records])
    mask = np.ones_like(gold, bool)
    _, boot_s = timed(lambda: headline_cis(pred, gold, mask, args.bootstrap))
    print(json.dumps({"case": "bootstrap", "items": args.test, "resamples": args.bootstrap, "seconds": round(boot_s, 2), "target_s": 30}))


if __name__ == "__main__":
    main()
