"""Shared test setup: 8 simulated CPU devices, offline Hugging Face, small helpers."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding a ``slow`` test run first (order kept otherwise): the parallel workers, which
    take whole files, then end on short files together instead of one worker finishing a long one."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


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
