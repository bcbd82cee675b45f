"""The benchmark tools run and print peer-format JSON lines (tiny shapes; no timing assertions)."""

import json
import subprocess
import sys


def run(repo_root, tool, *args):
    done = subprocess.run(
        [sys.executable, str(repo_root / "tools" / tool), "--tiny", "--steps", "2", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo_root,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_bench_train_every_family(repo_root):
    rows = run(repo_root, "bench_train.py", "--batch", "8", "--seq", "64", "--dtype", "float32")
    cases = [r for r in rows if "model" in r]
    assert {r["model"] for r in cases} == {
        "mbert",
        "bert-large(mxbai)",
        "deberta-v3-base",
        "modernbert-base(ettin-150m-like)",
        "ettin-32m-like",
    }
    assert all("error" not in r and r["train_tok_s"] > 0 and {"step_ms", "mfu_vs_989", "params_M"} <= set(r) for r in cases)


def test_bench_score_filter(repo_root):
    rows = run(repo_root, "bench_score.py", "--only", "mbert,ettin", "--batch", "8", "--seq", "64")
    cases = [r for r in rows if "model" in r]
    assert [r["model"] for r in cases] == ["mbert", "modernbert-base(ettin-150m-like)", "ettin-32m-like"] and all(
        r["infer_ex_s"] > 0 for r in cases
    )
