"""TensorFlow Datasets: a builder for the omnidistill schema, and reading any prepared TFDS dataset.

- ``omnidistill_schema`` builds a TFDS dataset (array_record files, no TensorFlow needed) from local
  ``train``/``dev``/``test`` JSONL or Parquet files placed in TFDS's manual directory; records are
  validated exactly as the JSONL reader validates them.
- :class:`TfdsRecords` reads a prepared TFDS dataset through its random-access data source (the one
  grain consumes) and maps its features onto the schema with ``data.tfds.fields`` / ``data.tfds.labels``;
  nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from omnidistill.config import ConfigError, TfdsConfig, nearest_name
from omnidistill.data.schema import META_FIELDS, TEXT_FIELDS, DataError, Record, validate_record
from omnidistill.data.sources import read_records, refuse_duplicate_ids
from omnidistill.dimensions import DIMENSIONS, NUM_LEVELS
from omnidistill.storage import COMPRESSIONS

SCHEMA_NAME = "omnidistill_schema"
SPLIT_FILES = ("train", "dev", "test")


MAPPED_FIELDS = ("id", "task", "lang", "candidate", "group_id", *TEXT_FIELDS, *META_FIELDS)
"""The record fields ``data.tfds.fields`` may map a feature onto (each maps to a feature of its own name by default)."""


def check_feature_map(cfg: TfdsConfig, features: Collection[str]) -> None:
    """Refuse a ``data.tfds`` mapping that would read nothing, rather than let it: a split other than
    train/dev/test in ``splits``; a record field that does not exist, or a feature the dataset lacks
    (``features``), in ``fields``; a dimension that does not exist, or a feature the dataset lacks, in
    ``labels``. Each error names the key and what it could be."""

    def refuse(key: str, what: str, wrong: str, choices: Sequence[str]) -> None:
        close = nearest_name(wrong, choices)
        raise ConfigError(f"data.tfds.{key}: {what} ({f'did you mean {close}?' if close else 'one of: ' + ', '.join(choices)})")

    for split in cfg.splits:
        if split not in SPLIT_FILES:
            refuse(f"splits.{split}", "not a split of omnidistill's", split, SPLIT_FILES)
    for section, names, kind in (("fields", MAPPED_FIELDS, "not a record field"), ("labels", DIMENSIONS, "not a dimension")):
        for name, feature in getattr(cfg, section).items():
            if name not in names:
                refuse(f"{section}.{name}", kind, name, names)
            if feature not in features:
                refuse(f"{section}.{name}", f"tfds:{cfg.name} has no feature {feature!r}", feature, sorted(features))


def _tfds():
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DataError("TFDS sources need tensorflow-datasets (pip install 'omnidistill[tfds]')") from None
    return tfds


def schema_builder_class():
    """The ``omnidistill_schema`` builder (defined on first use so that TFDS stays optional)."""
    tfds = _tfds()
    if SCHEMA_NAME in tfds.list_builders(with_community_datasets=False):
        return tfds.builder_cls(SCHEMA_NAME)

    class OmnidistillSchema(tfds.core.GeneratorBasedBuilder):
        """Items in the omnidistill schema; labels are a float vector with NaN for a missing dimension, and
        ``label_dist`` a [4, 5] matrix with NaN rows for a dimension without a distribution (1.1.0)."""

        VERSION = tfds.core.Version("1.1.0")
        RELEASE_NOTES: ClassVar[dict[str, str]] = {"1.1.0": "label_dist: the teacher's distribution over levels 1..5 per dimension"}
        MANUAL_DOWNLOAD_INSTRUCTIONS = "Put train/dev/test .jsonl, .csv or .parquet files in the manual directory."

        def _info(self):
            text = tfds.features.Text()
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {
                        **{k: text for k in ("id", "task", "lang", *TEXT_FIELDS, *META_FIELDS, "candidate", "group_id")},
                        "labels": tfds.features.Tensor(shape=(len(DIMENSIONS),), dtype=np.float32),
                        "label_dist": tfds.features.Tensor(shape=(len(DIMENSIONS), NUM_LEVELS), dtype=np.float32),
                    }
                ),
            )

        def _split_generators(self, dl_manager):
            return {split: self._generate_examples(path) for split, path in split_files(dl_manager.manual_dir).items()}

        def _generate_examples(self, path):
            records, _ = read_records(path, require_labels=False)
            for r in records:
                yield (
                    r.id,
                    {
                        "id": r.id,
                        "task": r.task,
                        "lang": r.lang,
                        "candidate": r.candidate,
                        "group_id": r.group_id or "",
                        **{f: getattr(r, f) or "" for f in (*TEXT_FIELDS, *META_FIELDS)},
                        "labels": np.array([np.nan if v is None else v for v in r.labels], np.float32),
                        "label_dist": dist_matrix(r),
                    },
                )

    OmnidistillSchema.name = SCHEMA_NAME
    return OmnidistillSchema


MANUAL_SUFFIXES = (*(f"{kind}{packed}" for kind in (".jsonl", ".csv") for packed in ("", *COMPRESSIONS)), ".parquet")
"""The files ``tfds-build`` reads per split, as ``read_records`` reads them (JSONL and CSV also compressed)."""


def split_files(manual_dir: str | Path) -> dict[str, Path]:
    """{split: file} of the ``train``/``dev``/``test`` files (:data:`MANUAL_SUFFIXES`) in ``manual_dir``;
    an error names the folder when it holds none, or a split with two files."""
    manual = Path(manual_dir)
    kinds = f".jsonl, .csv or .parquet (the first two also {'/'.join(COMPRESSIONS)})"
    if not manual.is_dir():
        raise DataError(f"{manual}: no such folder (tfds-build reads train/dev/test {kinds} files from --manual-dir)")
    candidates = {split: [manual / f"{split}{ext}" for ext in MANUAL_SUFFIXES] for split in SPLIT_FILES}
    found = {split: [path for path in paths if path.is_file()] for split, paths in candidates.items()}
    both = [f"{paths[0]} and {paths[1].name}" for paths in found.values() if len(paths) > 1]
    if both:
        raise DataError(f"{both[0]}: two files for one split; keep the one {SCHEMA_NAME} should hold")
    if not any(found.values()):
        raise DataError(f"{manual}: no train/dev/test {kinds} files")
    return {split: paths[0] for split, paths in found.items() if paths}


def dist_matrix(record: Any) -> np.ndarray:
    """A record's ``label_dist`` as float32 [4, 5], NaN rows where a dimension has none."""
    out = np.full((len(DIMENSIONS), NUM_LEVELS), np.nan, np.float32)
    for d, row in enumerate(record.label_dist):
        if row is not None:
            out[d] = row
    return out


SOURCES_FILE = "omnidistill_sources.json"
"""Written beside a prepared ``omnidistill_schema``: the manual files it was built from and their digest."""


def sources_digest(files: dict[str, Path]) -> str:
    """A sha256 of each split's name and file contents."""
    digest = hashlib.sha256()
    for split, path in sorted(files.items()):
        digest.update(f"{split}\0".encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def build_schema_dataset(manual_dir: str | Path, data_dir: str | Path, *, overwrite: bool = False) -> tuple[Path, bool]:
    """Prepare ``omnidistill_schema`` from the files in ``manual_dir`` under ``data_dir``: its folder, and
    whether it was built (False: it was already prepared from files of the same contents).

    TFDS keeps a prepared version whatever the manual files now hold, so a rebuild from changed
    files used to leave the old dataset in place without a word. A prepared version built from other
    files (or without a record of them) is now refused unless ``overwrite``, which rebuilds it."""
    files = split_files(manual_dir)
    for path in files.values():  # before TFDS starts: it asserts on a missing folder,
        refuse_duplicate_ids([path], "TFDS keys each split's examples by id")  # and needs TensorFlow to name a repeated key
    tfds = _tfds()
    builder = schema_builder_class()(data_dir=str(data_dir), file_format="array_record")
    folder, digest = Path(builder.data_dir), sources_digest(files)
    mode = tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS  # TFDS's default
    if (folder / "dataset_info.json").is_file():
        record = folder / SOURCES_FILE
        if record.is_file() and json.loads(record.read_text(encoding="utf-8")).get("digest") == digest:
            return folder, False
        if not overwrite:
            raise DataError(
                f"{folder}: already holds {SCHEMA_NAME}, prepared from other files than {manual_dir}'s (or before "
                "tfds-build recorded them); TFDS would keep it as it is: pass --overwrite to rebuild it"
            )
        mode = tfds.download.GenerateMode.FORCE_REDOWNLOAD
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir), download_mode=mode))
    sources = {"digest": digest, "files": {split: str(path.resolve()) for split, path in files.items()}}
    (folder / SOURCES_FILE).write_text(json.dumps(sources, indent=2), encoding="utf-8")
    return folder, True


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    value = str(value)
    return value if value.strip() else None


class TfdsRecords(Sequence[Record]):
    """A lazy, random-access view of one split of a prepared TFDS dataset as :class:`Record` objects."""

    def __init__(self, cfg: TfdsConfig, split: str, *, require_labels: bool = True):
        tfds = _tfds()
        if cfg.name == SCHEMA_NAME:
            schema_builder_class()
        self.cfg, self.split, self.require_labels = cfg, split, require_labels
        tfds_split = cfg.splits.get(split, split)
        self.where = f"tfds:{cfg.name}/{tfds_split}"
        try:  # TFDS raises many types for a missing or unprepared dataset
            builder = tfds.builder(cfg.name, data_dir=cfg.data_dir, file_format="array_record")
            features = builder.info.features.keys()
        except Exception as err:
            raise self._cannot_open(err) from None
        check_feature_map(cfg, features)  # before the split: a wrong split name in data.tfds.splits is named as such
        try:
            self.source = builder.as_data_source(split=tfds_split)
        except Exception as err:
            raise self._cannot_open(err) from None

    def _cannot_open(self, err: Exception) -> DataError:
        return DataError(f"{self.where}: cannot open ({type(err).__name__}: {err}); prepare it first")

    def __len__(self) -> int:
        return len(self.source)

    def to_object(self, item: dict[str, Any]) -> dict[str, Any]:
        """The schema object of one TFDS example, using the configured feature mapping."""
        fields = {
            "id": "id",
            "task": "task",
            "lang": "lang",
            "candidate": "candidate",
            "group_id": "group_id",
            **{f: f for f in (*TEXT_FIELDS, *META_FIELDS)},
        }
        fields.update(self.cfg.fields)
        obj: dict[str, Any] = {}
        for name, feature in fields.items():
            if feature in item and (value := _text(item[feature])) is not None:
                obj[name] = value
        if self.cfg.labels:
            labels = {dim: float(item[feat]) for dim, feat in self.cfg.labels.items() if feat in item}
        elif "labels" in item:
            labels = {dim: float(v) for dim, v in zip(DIMENSIONS, np.asarray(item["labels"]).tolist(), strict=True)}
        else:
            labels = {}
        labels = {d: v for d, v in labels.items() if not np.isnan(v)}
        if labels:
            obj["labels"] = labels
        if "label_dist" in item:
            rows = np.asarray(item["label_dist"], np.float64)
            dist = {d: row.tolist() for d, row in zip(DIMENSIONS, rows, strict=True) if not np.isnan(row).any()}
            if dist:
                obj["label_dist"] = dist
        return obj

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"{self.where}: index {index} out of range")
        where = f"{self.where}[{index}]"
        obj = self.to_object(self.source[index])
        obj.setdefault("id", where)
        return validate_record(obj, where, require_labels=self.require_labels)
