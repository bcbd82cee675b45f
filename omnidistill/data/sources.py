"""Read JSONL and Parquet files into validated records.

Malformed input raises :class:`DataError` naming the file and line (JSONL) or row (Parquet), or, with
``skip_invalid``, is skipped and counted.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import importlib
import io
import json
import logging
import re
import zlib
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

from etils import epath

from omnidistill.data.record_ids import IdCounter, refuse_repeats
from omnidistill.data.schema import DataError, Record, record_id, surrogate_error, validate_record
from omnidistill.dimensions import DIMENSIONS
from omnidistill.storage import COMPRESSIONS, existing_file, expand_patterns

log = logging.getLogger(__name__)


def _physical_lines(path: epath.Path) -> Iterator[bytes]:
    """The lines of a file as bytes, each with its ending (split at "\n" only, as binary-mode line
    iteration splits them), read one at a time, decompressed when the name says so
    (:data:`COMPRESSIONS`): no copy of the file or list of its lines is held. A UTF-8 byte order mark
    at the start is dropped."""
    module = _decompressor(path)
    try:
        f = path.open("rb")
    except OSError as err:
        raise DataError(f"{path}: cannot read: {err.strerror or err}") from None
    with f, module.open(f, "rb") if module else contextlib.nullcontext(f) as lines:
        count = 0
        try:
            for line in lines:
                if count == 0:
                    if line.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 (or 32) byte order marks
                        raise DataError(f"{path}: the file is UTF-16 or UTF-32 (its byte order mark says so); save it as UTF-8")
                    line = line.removeprefix(b"\xef\xbb\xbf")
                yield line
                count += 1
        except (OSError, EOFError, zlib.error, getattr(module, "LZMAError", OSError)) as err:  # corrupt or cut
            raise DataError(f"{path}:{count + 1}: cannot read the {path.suffix} data: {err}") from None


def _decompressor(path: epath.Path) -> Any:
    """The module that decompresses ``path`` (:data:`COMPRESSIONS`), or None for a plain file."""
    if path.suffix not in COMPRESSIONS:
        return None
    try:
        return importlib.import_module(COMPRESSIONS[path.suffix])
    except ImportError:  # a Python built without that library
        raise DataError(f"{path}: this Python cannot read {path.suffix} files (no {COMPRESSIONS[path.suffix]} module)") from None


def _jsonl_lines(path: epath.Path) -> Iterator[tuple[str, bytes]]:
    """(location, line) of every line that is not blank, its ending removed and not yet decoded
    (:func:`decode_jsonl_line` does that, in this process or a worker's: ``data/parallel_read.py``).
    A file that is one JSON document rather than JSON Lines is refused here, as the whole file's error."""
    # Physical lines end at "\n" only: a lone "\r" inside a line (legal JSON whitespace, or an error
    # in a string) must not split it, or every later line number shifts. "\r\n" endings are accepted.
    name = str(path)  # once: an epath's str() costs a path join
    first = True
    for lineno, line in enumerate(_physical_lines(path), start=1):
        line = line.removesuffix(b"\n").removesuffix(b"\r")
        if not line.strip():
            continue
        if first:
            try:
                _refuse_one_json_document(name, line.decode("utf-8"))
                first = False
            except UnicodeDecodeError:  # the line's own error, when it is decoded
                pass
        yield f"{name}:{lineno}", line


def decode_jsonl_line(where: str, line: bytes) -> Any:
    """One JSONL line's object (label columns folded into ``labels``), or the :class:`DataError` that
    names what is wrong with it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as err:
        return DataError(f"{where}: not valid UTF-8 ({err.reason} at byte {err.start})")
    try:
        obj = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        return DataError(f"{where}: invalid JSON: {err.msg} (column {err.colno})")
    except _RepeatedKey as err:
        return DataError(f"{where}: key {err.args[0]!r} appears twice in one object (JSON readers keep one silently)")
    if "\\u" in text and (error := surrogate_error(obj, where)) is not None:  # only a \u escape makes one
        return error
    return _labels_from_columns(where, obj)[1] if isinstance(obj, dict) else obj


def _refuse_one_json_document(name: str, first_line: str) -> None:
    """Refuse, as the whole file's error, a file that is one JSON document rather than JSON Lines: an array
    (``[`` first: pandas' ``to_json(orient="records")``, ``json.dump`` of a list) or an object printed over
    several lines (``{`` alone). Read line by line, each line was "invalid JSON" or "got list", which
    ``--skip-invalid`` skipped down to "no valid records"."""
    head = first_line.strip()  # a byte order mark is gone already (_physical_lines)
    if head.startswith("[") or head == "{":
        kind = "a JSON array" if head.startswith("[") else "one JSON object printed over several lines"
        fix = "jq -c '.[]'" if head.startswith("[") else "jq -c ."
        raise DataError(
            f"{name}: the file is {kind}, not JSON Lines: records are read one JSON object per line. Write them so "
            f'(pandas: to_json(orient="records", lines=True); or {fix} {name})'
        )


class _RepeatedKey(Exception):
    """A JSON object with a key given twice (its name)."""


def _first_repeat(names: list[str]) -> str | None:
    """The first name that an earlier one repeats, or None."""
    seen: set[str] = set()
    return next((n for n in names if n in seen or seen.add(n)), None)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object builder, refusing a repeated key (e.g. two ``candidate`` fields from a bad
    join: the plain builder keeps the last, and the record would be scored on the wrong text). Its
    cost: ``read_records`` of 105,000 sample records took 2.5 s instead of 2.1 s on the 2-core dev VM."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _RepeatedKey(_first_repeat([k for k, _ in pairs]))
    return obj


PARQUET_BATCH_ROWS = 8192
"""Parquet rows decoded into Python objects at a time."""


def _parquet_objects(path: epath.Path) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        f = path.open("rb")
        batches = pq.ParquetFile(f).iter_batches(batch_size=PARQUET_BATCH_ROWS)
    except Exception as err:  # pyarrow raises several error types for corrupt files
        raise DataError(f"{path}: cannot read Parquet: {err}") from None
    name = str(path)  # once: an epath's str() costs a path join
    with f:
        i = 0
        while True:
            try:
                batch = next(batches, None)
            except Exception as err:
                raise DataError(f"{path}: cannot read Parquet: {err}") from None
            if batch is None:
                return
            for row in batch.to_pylist():  # pandas' index, where to_parquet stores it as a column, is not a field
                fields = {k: _drop_nulls(v) for k, v in row.items() if v is not None and not _PANDAS_INDEX.fullmatch(k)}
                yield _labels_from_columns(f"{name}:row {i}", fields)
                i += 1


_PANDAS_INDEX = re.compile(r"__index_level_\d+__")
"""How ``DataFrame.to_parquet`` names the columns of an index that is not a plain range (a range is
stored in the file's metadata only)."""


def _labels_from_columns(where: str, obj: dict[str, Any]) -> tuple[str, Any]:
    """A record with label dimensions as fields of their own (``{"clarity": 4, ...}``: how pandas writes
    a DataFrame's columns with ``to_json(orient="records", lines=True)`` or ``to_parquet``, and what a
    CSV file's columns are) has them folded into ``labels``; a null is a missing label. A record that
    also has ``labels`` is that record's error."""
    flat = [dim for dim in DIMENSIONS if dim in obj]
    if not flat:
        return where, obj
    if "labels" in obj:
        return where, DataError(f"{where}: labels given twice, in labels and in the field(s) {', '.join(flat)}")
    labels = {dim: obj.pop(dim) for dim in flat}
    obj["labels"] = {dim: value for dim, value in labels.items() if value is not None}
    return where, obj


def _drop_nulls(value: Any) -> Any:
    """Parquet struct columns give every row every field of the column (null where the row has none):
    drop those, so one row's unknown label name is that row's error, not every row's."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


CSV_FIELD_LIMIT = 2**31 - 1
"""Characters one CSV value may hold: Python's ``csv`` stops at 131,072 (128 Ki) by default, which a
long document to summarize passes; a value is at most its file's size anyway."""

_LONE_CR = re.compile(r"\r(?!\n|$)")


def _csv_lines(path: epath.Path, name: str) -> Iterator[str]:
    """The file's lines decoded, one at a time, split as text mode with ``newline=""`` splits them
    (what ``csv`` expects): at "\n", "\r\n" and a lone "\r"; endings kept, for quoted line breaks."""
    for lineno, line in enumerate(_physical_lines(path), start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"{name}:{lineno}: not valid UTF-8 ({err.reason} at byte {err.start} of the line)") from None
        if "\r" in text and _LONE_CR.search(text):  # rare: old Mac line ends
            yield from io.StringIO(text, newline="")
        else:
            yield text


def _csv_objects(path: epath.Path) -> Iterator[tuple[str, Any]]:
    """CSV with a header, read a line at a time; label dimensions may be columns; empty cells are
    missing values. Quoting is strict: text after a closing quote is that record's error, and a quote
    never closed stops the reading (every later line would be one value)."""
    if csv.field_size_limit() < CSV_FIELD_LIMIT:
        csv.field_size_limit(CSV_FIELD_LIMIT)
    name = str(path)
    reader = csv.DictReader(_csv_lines(path, name), strict=True)
    try:
        columns = reader.fieldnames or []
    except csv.Error as err:
        raise _quoting_error(err, f"{name}:1") from None
    _check_csv_header(path, columns)
    for where, row in _csv_rows(reader, name):
        if isinstance(row, DataError):
            yield where, row
            continue
        extra, short = row.get(None), [k for k, v in row.items() if v is None]  # csv's marks of a ragged row
        if extra or short:  # e.g. an unquoted comma in a text: its tail would be dropped or shift the fields
            count = len(reader.fieldnames or ()) + len(extra or ()) - len(short)
            yield where, DataError(f"{where}: {count} values for the header's {len(reader.fieldnames or ())} columns (an unquoted comma?)")
            continue
        obj: dict[str, Any] = {k: v for k, v in row.items() if v != "" and k}  # an unnamed column is not read
        try:
            for dim in DIMENSIONS:
                if dim in obj:
                    obj[dim] = float(obj[dim])
        except ValueError:
            yield where, DataError(f"{where}: {dim} must be a number, got {obj[dim]!r}")
            continue
        yield _labels_from_columns(where, obj)  # label columns become labels, as in JSONL and Parquet


def _csv_rows(reader: csv.DictReader, name: str) -> Iterator[tuple[str, dict[str, Any] | DataError]]:
    """(location, row) of every record after the header (read already), or a :class:`DataError` for
    one whose quoting is malformed. A quote never closed raises: the rest of the file is inside it."""
    while True:
        start = f"{name}:{reader.line_num + 1}"
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            error = _quoting_error(err, start)
            if _UNCLOSED in str(err):
                raise error from None
            yield start, error
            continue
        yield f"{name}:{reader.line_num}", row


_UNCLOSED = "unexpected end of data"
"""What ``csv`` says (strict) when the file ends inside a quoted value."""


def _quoting_error(err: csv.Error, where: str) -> DataError:
    doubled = 'a quote inside a quoted value is written twice: ""'
    if _UNCLOSED in str(err):
        return DataError(
            f"{where}: a quote opened in this record is never closed, so every line after it, to the end of "
            f"the file, would be one value; close it ({doubled})"
        )
    return DataError(f"{where}: malformed CSV quoting ({err}; {doubled})")


def _check_csv_header(path: epath.Path, columns: list[str]) -> None:
    """Refuse a header that would lose or misplace values silently: a column named twice (``csv``
    keeps the last column's value under that name), or one column holding another delimiter's
    names (a semicolon- or tab-separated file, which would be read as one field per row); and a column
    of the schema's objects (``labels``: each of its values would be refused, row by row)."""
    if (column := _first_repeat([c for c in columns if c])) is not None:
        raise DataError(f"{path}:1: column {column!r} appears twice in the header; each column can be read only once")
    if unnamed := [i for i, c in enumerate(columns, start=1) if not c]:
        log.warning(
            "%s: header column(s) %s have no name and are not read (pandas' to_csv writes its index so; index=False leaves it out)",
            path, ", ".join(map(str, unnamed)),
        )  # fmt: skip
    if len(columns) == 1 and (found := next((d for d in (";", "\t", "|") if d in columns[0]), None)):
        one = columns[0][:60]
        raise DataError(f"{path}:1: the header is one column, {one!r}: CSV is read comma-separated; this looks {found!r}-separated")
    if nested := [c for c in ("labels", "annotations", "label_dist") if c in columns]:
        raise DataError(
            f"{path}:1: column {nested[0]!r} would hold objects, which a CSV cell cannot: give each label dimension "
            f"a column of its own ({', '.join(DIMENSIONS)}), or write {', '.join(nested)} to JSONL or Parquet"
        )


JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
"""Names of files read as one JSON object per line."""


def iter_units(path: str | Path) -> Iterator[tuple[str, Any]]:
    """:func:`iter_objects`' items, except that a JSONL line comes as its bytes, still to be decoded by
    :func:`decode_unit`: reading a file's lines is cheap, and decoding and checking them is the part
    that worker processes can share (``data/parallel_read.py``). Errors of the whole file (a missing
    file, a corrupt archive, a JSON array) are raised here."""
    path = existing_file(path, DataError)
    kind = path.suffix
    if kind in COMPRESSIONS:
        kind = Path(path.stem).suffix
        if kind not in (*JSONL_SUFFIXES, ".csv"):
            raise DataError(f"{path}: unsupported file type {kind + path.suffix!r} (compressed: .jsonl or .csv files)")
    if kind == ".parquet":
        return _parquet_objects(path)
    if kind in JSONL_SUFFIXES:
        return _jsonl_lines(path)
    if kind == ".csv":
        return _csv_objects(path)
    raise DataError(f"{path}: unsupported file type {kind!r} (use .jsonl, .csv or .parquet; .jsonl and .csv may end in .gz, .bz2 or .xz)")


def decode_unit(where: str, unit: Any) -> Any:
    """The object of one of :func:`iter_units`' items (or its :class:`DataError`)."""
    return decode_jsonl_line(where, unit) if isinstance(unit, bytes) else unit


def iter_objects(path: str | Path) -> Iterator[tuple[str, Any]]:
    """(location, decoded object or DataError) for every record of a JSONL, CSV or Parquet file, local or
    in a bucket (``gs://``; :mod:`omnidistill.storage`); JSONL and CSV may be compressed (:data:`COMPRESSIONS`)."""
    for where, unit in iter_units(path):
        yield where, decode_unit(where, unit)


def checked_record(where: str, obj: Any, *, skip_invalid: bool, require_labels: bool, keep: frozenset[str]) -> Record | None:
    """The :class:`Record` of one decoded object (or of its :class:`DataError`), checked against the
    schema; an invalid one raises its error, or with ``skip_invalid`` is None (logged at debug)."""
    try:
        if isinstance(obj, DataError):
            raise obj
        return validate_record(obj, where, require_labels=require_labels, keep=keep)
    except DataError as err:
        if not skip_invalid:
            raise
        log.debug("skipped %s", err)
        return None


class RecordStream:
    """The validated records of one or more files, read one at a time on every pass (nothing is held):
    for a training split read from the token cache, whose memory then stays flat in the number of
    records. Fields named in ``keep`` (outside the schema) go to each record's ``extra``. After a full
    pass, ``skipped`` is the number of invalid records skipped (``skip_invalid``)
    and ``duplicate_ids`` the number of records whose id an earlier record has (warned about once:
    ids label items here; :func:`refuse_duplicate_ids` is for joins)."""

    def __init__(
        self,
        paths: str | Path | Sequence[str | Path],
        *,
        skip_invalid: bool = False,
        require_labels: bool = True,
        keep: frozenset[str] = frozenset(),
    ):
        self.paths = expand_patterns([paths] if isinstance(paths, str | Path) else list(paths), DataError)
        self.skip_invalid, self.require_labels, self.keep = skip_invalid, require_labels, keep
        self.skipped = 0
        self.duplicate_ids: int | None = None

    def __iter__(self) -> Iterator[Record]:
        return self.start_pass().records()

    def start_pass(self) -> StreamPass:
        """A new pass over the files, to read record by record, as raw items, or first one then the other."""
        return StreamPass(self, _all_units(self.paths))

    def finish_pass(self, count: int, skipped: int, ids: IdCounter) -> None:
        """The end of a full pass that read ``count`` valid records and skipped ``skipped``, with their
        ids in ``ids``: the warnings, the error of no valid record, ``skipped`` and ``duplicate_ids``."""
        if skipped:
            log.warning("skipped %d invalid record(s) (data.skip_invalid=true)", skipped)
        if not count:
            raise DataError(f"{', '.join(map(str, self.paths))}: no valid records")
        self.skipped = skipped
        repeats = ids.repeats()
        if repeats and self.duplicate_ids is None:
            log.warning("%d record(s) of %s repeat an earlier record's id", repeats, ", ".join(map(str, self.paths)))
        self.duplicate_ids = repeats


def _all_units(paths: Sequence[str | Path]) -> Iterator[tuple[str, Any]]:
    """:func:`iter_units` of each file in turn; a file with no record (blank lines at most) is an error."""
    for path in paths:
        empty = True
        for item in iter_units(path):
            empty = False
            yield item
        if empty:
            raise DataError(f"{path}: no records")


@dataclasses.dataclass
class StreamPass:
    """One pass over a :class:`RecordStream`: its files' raw items (``units``, :func:`iter_units`) at one
    shared position, and the tally of what was read. :meth:`records` checks them into records here;
    ``data/parallel_read.py`` takes the rest of the same ``units`` to worker processes (after
    ``score --resume`` has read the kept items here) and adds to the same tally."""

    stream: RecordStream
    units: Iterator[tuple[str, Any]]
    count: int = 0
    skipped: int = 0
    ids: IdCounter = dataclasses.field(default_factory=IdCounter)

    def check(self, where: str, obj: Any) -> Record | None:
        """:func:`checked_record` with the stream's options (None: skipped), counted."""
        stream = self.stream
        record = checked_record(where, obj, skip_invalid=stream.skip_invalid, require_labels=stream.require_labels, keep=stream.keep)
        self.tally(() if record is None else (record,), skipped=record is None)
        return record

    def tally(self, records: Sequence[Record], skipped: int = 0) -> None:
        """Count ``records`` as read and ``skipped`` more as skipped."""
        self.count += len(records)
        self.skipped += skipped
        for record in records:
            self.ids.add(record.id)

    def records(self) -> Iterator[Record]:
        """The pass's records from its position on, checked here; at the end, :meth:`finish`."""
        for where, unit in self.units:
            record = self.check(where, decode_unit(where, unit))
            if record is not None:
                yield record
        self.finish()

    def finish(self) -> None:
        """:meth:`RecordStream.finish_pass` with this pass's tally."""
        self.stream.finish_pass(self.count, self.skipped, self.ids)


def read_records(
    paths: str | Path | Sequence[str | Path],
    *,
    skip_invalid: bool = False,
    require_labels: bool = True,
    keep: frozenset[str] = frozenset(),
) -> tuple[list[Record], int]:
    """Validated records of one or more files and the number skipped as invalid; fields named in
    ``keep`` (outside the schema) go to each record's ``extra``."""
    stream = RecordStream(paths, skip_invalid=skip_invalid, require_labels=require_labels, keep=keep)
    records = list(stream)
    return records, stream.skipped


def refuse_duplicate_ids(paths: Sequence[str | Path], why: str, *, among: Collection[str] | None = None) -> None:
    """Raise :class:`DataError` naming file:line of both records when an id repeats in ``paths``
    (for ids that join two files; a record without an id is named by its location, so never repeats).
    ``among``: only these ids count (those a join needs). One pass counts repeats at 8 bytes per
    record; only when there are some does a second pass locate them."""

    paths = expand_patterns(paths, DataError)

    def located() -> Iterator[tuple[str, str]]:
        for path in paths:
            for where, obj in iter_objects(path):
                if isinstance(obj, dict):
                    try:
                        ident = record_id(obj, where)
                    except DataError:  # the record's own error, raised (or skipped) when it is read
                        ident = where
                    if among is None or ident in among:
                        yield ident, where

    counter = IdCounter()
    for ident, _ in located():
        counter.add(ident)
    if counter.repeats():
        refuse_repeats(located(), why)
