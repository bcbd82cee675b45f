"""Shared test setup: 8 simulated CPU devices, offline Hugging Face, one XLA compilation cache, small helpers."""

import atexit
import os
import shutil
import sys
import tempfile

from tests.xla_env import xla_flags

os.environ.setdefault("XLA_FLAGS", xla_flags(8))  # 8 simulated CPU devices, compiled fast (tests/xla_env.py)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Many tests compile the same tiny train and predict steps, in the workers and in the subprocesses they
# start: one persistent compilation cache for the whole run lets each shape compile once. The pytest
# process that makes the folder (the first to import this file) removes it at exit; the parallel
# workers and subprocesses inherit it through the environment. A size limit turns on the cache's file
# lock, so that concurrent writers and readers never see half a file (the lock costs a directory scan
# per write, so only compiles of 0.3 s or more are kept: a few hundred entries, not thousands). Keys cover the program, the
# devices and the compiler flags, so a hit is the executable a compile would give.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="omnidistill-tests-xla-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")  # the train and predict steps, not every small op
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(16 * 2**30))
# subprocesses that name `python` or `omnidistill` get the interpreter under test (venv, conda or system)
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding a ``slow`` test run first (order kept otherwise): the parallel workers, which
    take whole files, then end on short files together instead of one worker finishing a long one.
    xdist keeps this order only with ``--no-loadscope-reorder`` (pyproject's addopts); by default it
    hands out the files with the most tests first, and the quick start and the resume test (one test
    each) came last: one worker ran about 100 s after the other two had finished (13 min 3 s in all;
    11 min 34 s with the collection order, the workers ending within 16 s of each other)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` starts one worker more than the CPUs this process may use (pyproject caps it at 4;
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides where set). A worker often waits, on a subprocess,
    on the shared run's lock or on a file, so a third worker on 2 CPUs keeps both busy: the suite went
    from 13 min 18 s and 13 min 35 s to 12 min 44 s for the same CPU time (4 workers: 12 min 53 s,
    12.8 GB at peak). xdist's own count is physical cores, which is 1 on some 2-vCPU machines."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cpus + 1


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tiny_tokenizer_dir() -> Path:
    return REPO / "assets" / "tiny-wordpiece"


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return REPO / "data" / "sample"


@pytest.fixture(scope="session")
def tokenizer_dirs(tmp_path_factory, sample_dir, tiny_tokenizer_dir) -> dict[str, Path]:
    """kind -> folder of a local WordPiece, byte-level BPE and SentencePiece-Unigram tokenizer."""
    from tests.tokenizer_kinds import KINDS, build_tokenizer

    root = tmp_path_factory.mktemp("tokenizers")
    return {kind: build_tokenizer(kind, root / kind, sample_dir, tiny_tokenizer_dir) for kind in KINDS}


@pytest.fixture(scope="session")
def trained_tiny(tmp_path_factory, worker_id, repo_root) -> Path:
    """The tiny default trained 6 steps (dev evaluations at 3 and 6) on a data 1 x fsdp 8 mesh, then
    evaluated on the sample's test split (``eval/test.json``): one run for the whole session, shared
    by every worker. Read only (copy it to resume it or evaluate into it)."""
    from omnidistill.cli import main
    from tests.shared_runs import TRAINED_TINY, build_once, shared_root, tiny_run_args

    def build(run: Path) -> None:
        assert main(tiny_run_args(repo_root, run, *TRAINED_TINY)) == 0
        assert main(["eval", str(run), "--no-plots", "--bootstrap", "0"]) == 0

    return build_once(shared_root(tmp_path_factory, worker_id), "trained-tiny", build)


@pytest.fixture
def bert_random_draws(monkeypatch) -> list[tuple[int, ...]]:
    """The shapes of the real arrays (not the traced ones of a model built from shapes) that BERT's
    initializer draws while the test runs."""
    import jax
    import numpy as np

    import omnidistill.models.bert.modeling as bert_modeling

    drawn, init = [], bert_modeling._INIT

    def spy(key, shape, dtype=np.float32):
        out = init(key, shape, dtype)
        if not isinstance(out, jax.core.Tracer):
            drawn.append(shape)
        return out

    monkeypatch.setattr(bert_modeling, "_INIT", spy)
    return drawn
