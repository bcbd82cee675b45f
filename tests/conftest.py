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
