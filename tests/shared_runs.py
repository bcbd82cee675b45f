"""Trained runs that several test files read, built once per test session and shared by the parallel
workers (the first worker to ask builds it under a file lock; the others wait and reuse it).

Tests must only read a shared run: copy it before anything that writes into it (resume, eval into
its folder)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from filelock import FileLock


def shared_root(tmp_path_factory, worker_id: str) -> Path:
    """A folder every worker of this session sees (pytest's base temp of the session's controller)."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


def build_once(root: Path, name: str, build: Callable[[Path], None]) -> Path:
    """``root/name``, made by ``build`` unless another worker already made it (a marker file is written
    last, so a half-built folder from a failed build is built again)."""
    folder, done = root / name, root / f"{name}.built"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            build(folder)
            done.write_text("ok")
    return folder


TRAINED_TINY = (
    "train.max_steps=6",
    "train.eval_every_steps=3",
    "train.log_every_steps=2",
    "mesh.data=1",
    "mesh.fsdp=8",
    "eval.length_step=64",  # three scoring shapes (64, 128, 192) instead of six
    "data.length_buckets=[192]",  # one compiled train step
    # XLA's attention: under the suite's fast-compile flags the blocked kernel, which CPU training takes
    # from 64 tokens, compiles 0.4-0.8 s longer and steps 1.4-1.8x slower (docs/benchmarks.md, "Test
    # suite time"); its equality with XLA's is pinned in tests/models/test_attention.py, and the quick
    # start trains with it end to end
    "model.attention=xla",
)
"""The overrides of the session's shared ``trained_tiny`` run (tests/conftest.py)."""


def tiny_run_args(repo_root: Path, run: Path, *extra: str) -> list[str]:
    """``omnidistill train`` of configs/tiny.yaml on the sample, written to ``run``."""
    return [
        "train",
        str(repo_root / "configs" / "tiny.yaml"),
        f"train.output_dir={run}",
        f"data.train=[{repo_root}/data/sample/train.jsonl]",
        f"data.dev=[{repo_root}/data/sample/dev.jsonl]",
        f"data.test=[{repo_root}/data/sample/test.jsonl]",
        f"model.tokenizer={repo_root}/assets/tiny-wordpiece",
        *extra,
    ]
