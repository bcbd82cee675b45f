"""Which files two splits share: a dev or test split that reads training files measures training data."""

from __future__ import annotations

import os

from omnidistill.config import DataConfig
from omnidistill.data.splits import files_shared_with_train


def test_a_split_reading_training_files_is_found_however_the_path_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for name in ("train-0.jsonl", "train-1.jsonl", "dev.jsonl"):
        (tmp_path / "data" / name).write_text("{}\n")
    os.symlink(tmp_path / "data" / "train-1.jsonl", tmp_path / "link.jsonl")
    data = DataConfig(train=["data/train-*.jsonl"], dev=["data/dev.jsonl"], test=["./data/../data/train-0.jsonl", "link.jsonl"])
    assert files_shared_with_train(data, "dev") == []
    assert files_shared_with_train(data, "test") == ["./data/../data/train-0.jsonl", "link.jsonl"]  # as the user wrote them
    assert files_shared_with_train(DataConfig(train=["data/train-0.jsonl"], dev=[]), "dev") == []
