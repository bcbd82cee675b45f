"""Bucket paths: data files and configs named by a ``gs://`` URL go through the same readers as local ones."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from omnidistill.config import ConfigError, load_config
from omnidistill.data.schema import DataError
from omnidistill.data.sources import read_records


@pytest.fixture()
def fake_bucket(tmp_path):
    """``gs://bucket/...`` served from a local folder by an fsspec filesystem registered as ``gs``/``gcs``
    (what gcsfs registers), so the test exercises epath's bucket backend without a network."""
    import fsspec
    from etils.epath import backend
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.registry import _registry

    root = tmp_path / "bucket"
    root.mkdir()

    class FolderAsBucket(LocalFileSystem):
        protocol = ("gs", "gcs")

        def __init__(self, *args, finalize_on_close=False, **kwargs):
            super().__init__()

        @classmethod
        def _strip_protocol(cls, path):
            path = str(path)
            for prefix in ("gs://bucket/", "gcs://bucket/", "gs://bucket", "gcs://bucket"):
                if path.startswith(prefix):
                    path = str(root / path[len(prefix) :].lstrip("/"))
                    break
            return super()._strip_protocol(path)

        def glob(self, path, **kwargs):  # gcsfs answers "bucket/name", not the folder behind the fake
            return [f"bucket/{Path(found).relative_to(root).as_posix()}" for found in super().glob(path, **kwargs)]

    saved = {name: fsspec.registry.get(name) for name in ("gs", "gcs")}
    for name in saved:
        fsspec.register_implementation(name, FolderAsBucket, clobber=True)
    backend.fsspec_backend._get_filesystem.cache_clear()
    yield root
    backend.fsspec_backend._get_filesystem.cache_clear()
    for name, impl in saved.items():
        _registry.pop(name, None)
        if impl is not None:
            fsspec.register_implementation(name, impl, clobber=True)


def test_data_and_configs_read_from_a_bucket_as_from_disk(fake_bucket, repo_root, sample_dir):
    shutil.copy(sample_dir / "dev.jsonl", fake_bucket / "dev.jsonl")
    shutil.copy(repo_root / "configs" / "tiny.yaml", fake_bucket / "tiny.yaml")
    local, _ = read_records(sample_dir / "dev.jsonl")
    remote, _ = read_records("gs://bucket/dev.jsonl")
    assert remote == local
    assert load_config("gs://bucket/tiny.yaml", ["optim.lr=0.5"]) == load_config(repo_root / "configs" / "tiny.yaml", ["optim.lr=0.5"])
    with pytest.raises(DataError, match=r"gs://bucket/absent\.jsonl: file not found"):
        read_records("gs://bucket/absent.jsonl")


def test_parquet_and_csv_read_from_a_bucket(fake_bucket, sample_dir):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from omnidistill.data.sources import iter_objects

    rows = [obj for _, obj in iter_objects(sample_dir / "dev.jsonl")][:5]
    pq.write_table(pa.Table.from_pylist(rows), fake_bucket / "dev.parquet")
    (fake_bucket / "dev.csv").write_text("task,candidate,informativeness\nqa,an answer,4\n", encoding="utf-8")
    records, _ = read_records("gs://bucket/dev.parquet")
    assert [r.candidate for r in records] == [r["candidate"] for r in rows]
    (where, obj), *_ = iter_objects("gs://bucket/dev.csv")
    assert where == "gs://bucket/dev.csv:2" and obj["labels"] == {"informativeness": 4.0}


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed")
def test_a_bucket_without_its_filesystem_package_names_the_package():
    with pytest.raises(DataError, match=r"gs://b/train\.jsonl: reading gs:// paths needs gcsfs"):
        read_records("gs://b/train.jsonl")
    with pytest.raises(ConfigError, match=r"gs://b/c\.yaml: reading gs:// paths needs gcsfs"):
        load_config("gs://b/c.yaml")


def test_a_folder_given_as_a_file_is_called_a_folder(tmp_path, sample_dir):
    """``score --input data/sample`` said ``data/sample: file not found``."""
    from omnidistill.cli import main

    with pytest.raises(DataError, match=rf"{sample_dir}: a folder, not a file \(name the files in it\)"):
        read_records(str(sample_dir))
    with pytest.raises(DataError, match=r"nothing\.jsonl: file not found"):
        read_records(str(tmp_path / "nothing.jsonl"))
    assert main(["score", "--model", str(tmp_path), "--input", str(sample_dir), "--output", str(tmp_path / "o.jsonl")]) == 2


def test_glob_patterns_expand_to_sorted_files_locally_and_in_a_bucket(fake_bucket, tmp_path, sample_dir):
    """Sharded splits (``train-*.jsonl.gz``) are named by one pattern, in config lists and on the
    command line, read in the order of their names; a name that is a file is itself."""
    from omnidistill.storage import expand_patterns

    lines = (sample_dir / "dev.jsonl").read_text().splitlines(keepends=True)
    for root in (tmp_path / "shards", fake_bucket):
        root.mkdir(exist_ok=True)
        for i, part in enumerate((lines[:100], lines[100:200], lines[200:])):
            (root / f"dev-{2 - i}.jsonl").write_text("".join(part))  # names sort the other way round
    (tmp_path / "shards" / "odd[1].jsonl").write_text(lines[0])
    local, _ = read_records(str(tmp_path / "shards" / "dev-*.jsonl"))
    remote, _ = read_records("gs://bucket/dev-?.jsonl")
    whole, _ = read_records(sample_dir / "dev.jsonl")
    assert local == remote == whole[200:] + whole[100:200] + whole[:100]
    assert expand_patterns([str(tmp_path / "shards" / "odd[1].jsonl")], DataError) == [str(tmp_path / "shards" / "odd[1].jsonl")]
    with pytest.raises(DataError, match=r"shards/nope-\*\.jsonl: no file matches this pattern"):
        read_records(str(tmp_path / "shards" / "nope-*.jsonl"))
