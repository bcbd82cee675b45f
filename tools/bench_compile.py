"""Compile time of the training step with the encoder layers unrolled and under ``model.scan_layers``.

    python tools/bench_compile.py                         # mbert (12 layers) and bert-large (24 layers), both layouts
    python tools/bench_compile.py --only deberta,ettin    # other cases of tools/bench_cases.py
    python tools/bench_compile.py --tiny                  # a smoke test

Each (case, layout) compiles in a fresh process: the real train step (AdamW, the paper's loss,
B32xS512 bf16 by default, with the case's dropout, as ``tools/bench_train.py``) is lowered and compiled from shapes alone,
so nothing is allocated and any size can be measured on any machine. One JSON line per measurement:
seconds to build the (abstract) model, to trace and lower the step, and to compile it, XLA's peak-memory estimate of the compiled step
(``compiled_peak_GB``, per device) and the peak resident memory of the compiling process
(``host_peak_rss_GB``), then a Markdown table with the unrolled/scanned compile-time ratio.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CASES = ("mbert", "bert-large(mxbai)")


def compile_once(name: str, scan: bool, *, batch: int, seq: int, dtype: str, tiny: bool) -> dict:
    """Lower and compile one case's train step from shapes; the figures as a dict."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    sys.path.insert(0, str(ROOT / "tools"))
    from bench_cases import _model, _optimizer, _train_batch

    from omnidistill.train.memory import compiled_peak_gb
    from omnidistill.train.state import TrainState
    from omnidistill.train.step import make_train_step, train_step_compiler_options

    jax.config.update("jax_enable_compilation_cache", False)  # a persistent-cache hit is no compile to time
    start = time.perf_counter()
    model, hf = _model(name, tiny, dtype, "auto", abstract=True, scan=scan, dropout=True)
    built_at = time.perf_counter()
    graphdef, state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    tx = _optimizer(params)
    train_state = TrainState(
        step=jax.ShapeDtypeStruct((), jnp.int32),
        params=params,
        opt_state=jax.eval_shape(tx.init, params),
        rng=jax.eval_shape(lambda: jax.random.PRNGKey(0)),
    )
    data = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in _train_batch(hf, batch, seq).items()}
    step_fn = make_train_step(graphdef, tx, dropout=model.dropout_rate > 0)
    step = jax.jit(step_fn, donate_argnums=0, compiler_options=train_step_compiler_options())
    lowered = step.lower(train_state, data)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    done = time.perf_counter()
    return dict(
        model=name,
        layers=hf["num_hidden_layers"],
        layout="scan" if scan else "unrolled",
        build_s=round(built_at - start, 2),
        lower_s=round(lowered_at - built_at, 2),
        compile_s=round(done - lowered_at, 2),
        compiled_peak_GB=compiled_peak_gb(compiled),
        host_peak_rss_GB=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
        train_B=batch,
        train_S=seq,
        dtype=dtype,
        device=jax.devices()[0].device_kind,
    )


def table(rows: list[dict]) -> str:
    """Markdown: one line per case, both layouts side by side."""
    lines = [
        "| case | layers | lower+compile unrolled (s) | lower+compile scan (s) | speed-up "
        "| compiled peak GB unrolled / scan | host RSS GB unrolled / scan |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    by_case: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_case.setdefault(row["model"], {})[row["layout"]] = row
    for name, pair in by_case.items():
        if set(pair) != {"unrolled", "scan"}:
            continue
        u, s = pair["unrolled"], pair["scan"]
        tu, ts = u["lower_s"] + u["compile_s"], s["lower_s"] + s["compile_s"]
        lines.append(
            f"| {name} | {u['layers']} | {tu:.1f} | {ts:.1f} | {tu / ts:.1f}x | {u['compiled_peak_GB']} / {s['compiled_peak_GB']} "
            f"| {u['host_peak_rss_GB']} / {s['host_peak_rss_GB']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="comma-separated substrings of case names (default: mbert and bert-large)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test)")
    p.add_argument("--one", nargs=2, metavar=("CASE", "LAYOUT"), help=argparse.SUPPRESS)  # the child process
    args = p.parse_args(argv)
    common = dict(batch=args.batch, seq=args.seq, dtype=args.dtype, tiny=args.tiny)
    if args.one:
        print(json.dumps(compile_once(args.one[0], args.one[1] == "scan", **common)), flush=True)
        return
    sys.path.insert(0, str(ROOT / "tools"))
    from bench_cases import CASES

    names = [n for n in CASES if any(s in n for s in args.only.split(","))] if args.only else list(DEFAULT_CASES)
    flags = [f"--batch={args.batch}", f"--seq={args.seq}", f"--dtype={args.dtype}", *(["--tiny"] if args.tiny else [])]
    rows = []
    for name in names:
        for layout in ("unrolled", "scan"):
            out = subprocess.run([sys.executable, __file__, "--one", name, layout, *flags], capture_output=True, text=True, check=False)
            if out.returncode != 0:
                row = dict(model=name, layout=layout, error=out.stderr.strip().splitlines()[-1][:300] if out.stderr.strip() else "failed")
            else:
                row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(table([r for r in rows if "error" not in r]))


if __name__ == "__main__":
    main()
