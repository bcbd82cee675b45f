"""Which files two splits share (a dev or test split that reads training files measures training data),
and which named files are not there."""

from __future__ import annotations

import os
import re

import pytest

from omnidistill.config import DataConfig, TfdsConfig
from omnidistill.data.schema import DataError
from omnidistill.data.splits import check_split_files, files_shared_with_train


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


def test_split_files_are_checked_as_the_readers_find_them(tmp_path, monkeypatch):
    """Glob patterns stand for the files they match (``eval`` of a run whose ``data.test`` is a pattern
    said ``data/te*.jsonl: file not found``); what is not there is named with its key, where a relative
    path was looked for, and the caller's advice."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test-0.jsonl").write_text("{}\n")
    check_split_files(DataConfig(test=["data/test-*.jsonl", str(tmp_path / "data" / "test-0.jsonl")]), "test", "data.test")
    check_split_files(DataConfig(train=["data/absent.jsonl"], tfds=TfdsConfig(name="x")), "train", "data.train")  # TFDS: checked where read
    for files, message in [
        (["data/test-0.jsonl", "data/dev-*.jsonl"], "data/dev-*.jsonl: no file matches this pattern (data.test; relative paths"),
        (["data/absent.jsonl"], f"absent.jsonl: file not found (data.test; relative paths are read from the current directory, {tmp_path}"),
        (["data"], "data: a folder, not a file"),
        ([str(tmp_path / "absent.jsonl")], f"{tmp_path / 'absent.jsonl'}: file not found (data.test): pass"),
    ]:
        with pytest.raises(DataError, match=re.escape(message)):
            check_split_files(DataConfig(test=files), "test", "data.test", ": pass --data FILE")
