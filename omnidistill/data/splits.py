"""One place that turns ``data`` config into the records of a split (files or TFDS)."""

from __future__ import annotations

from collections.abc import Sequence

from omnidistill.config import DataConfig
from omnidistill.data.schema import DataError, Record
from omnidistill.data.sources import RecordStream, read_records
from omnidistill.storage import existing_files, expand_patterns, file_identity, relative_path_note


def load_split(data: DataConfig, split: str, *, require_labels: bool = True) -> tuple[Sequence[Record], int]:
    """Records of ``split`` (train/dev/test) and how many were skipped; empty when the split is absent.

    TFDS training data stays lazy (random access through the data source); dev/test are read whole.
    """
    if data.tfds is not None:
        from omnidistill.data.tfds_source import TfdsRecords

        if split != "train" and split not in data.tfds.splits:
            return [], 0
        try:
            records = TfdsRecords(data.tfds, split, require_labels=require_labels)
        except DataError:
            if split == "train":
                raise
            return [], 0
        return (records if split == "train" else list(records)), 0
    files = getattr(data, split)
    if not files:
        return [], 0
    return read_records(files, skip_invalid=data.skip_invalid, require_labels=require_labels, keep=frozenset(data.keep_fields))


def stream_split(data: DataConfig, split: str) -> Sequence[Record] | RecordStream:
    """Records of ``split`` to be read in one pass each time (the token cache's input): files are
    streamed record by record, TFDS through its random-access source; empty when the split is absent.
    A :class:`RecordStream` counts its skipped records in ``skipped`` after a pass."""
    if data.tfds is not None:
        return load_split(data, split)[0]
    files = getattr(data, split)
    return RecordStream(files, skip_invalid=data.skip_invalid, keep=frozenset(data.keep_fields)) if files else []


def files_shared_with_train(data: DataConfig, split: str) -> list[str]:
    """The files of ``split`` (glob patterns expanded) that ``data.train`` reads too, local paths compared
    after resolving links and relative parts; none for TFDS data, whose splits are separate."""
    if data.tfds is not None or not data.train or not getattr(data, split):
        return []
    train = {file_identity(path) for path in expand_patterns(data.train, DataError)}
    return [str(path) for path in expand_patterns(getattr(data, split), DataError) if file_identity(path) in train]


def check_split_files(data: DataConfig, split: str, origin: str, advice: str = "") -> None:
    """Refuse a file or glob pattern of ``data.<split>`` that is not there, before anything costly (a
    model download, a scoring program) runs for a split that cannot be read. The error names it, where
    it came from (``origin``: ``data.train``, or a run's config) and, for a relative path, the current
    directory it was looked for in; ``advice`` follows. TFDS splits are checked where they are read."""
    if data.tfds is not None:
        return
    for name in getattr(data, split):
        note = relative_path_note(name)
        where = origin if note is None else f"{origin}; {note}"
        try:
            existing_files([name], DataError)
        except DataError as err:
            raise DataError(f"{err} ({where}){advice}") from None
