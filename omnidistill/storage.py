"""Input paths that may live in a bucket: data files and configs are read through ``etils.epath``, so a
``gs://`` (or ``s3://``) URL goes through the same readers as a local path. Output files (local) are
checked by :func:`output_file` before a command does its work. Input files may be compressed
(:data:`COMPRESSIONS`); outputs are written plain.

Bucket access needs the filesystem package (``gcsfs`` for ``gs://``: ``pip install 'omnidistill[gcs]'``);
without it the error names the path and the package instead of failing deep inside a reader.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from etils import epath

_PACKAGES = {"gs://": "gcsfs", "s3://": "s3fs"}

COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}
"""Compressed input files (``train.jsonl.gz``), by their last suffix: the standard library module
that reads each."""


class StorageError(OSError):
    """A path's filesystem cannot be reached (its package is missing)."""


def file_identity(path: str | os.PathLike) -> str:
    """What tells two names of one file apart from two files: a local path resolved (links, ``..``,
    the current directory), a bucket URL as written."""
    text = str(path)
    return text if "://" in text else os.path.realpath(text)


def input_path(path: str | os.PathLike) -> epath.Path:
    """``path`` as an :class:`epath.Path` (local paths stay local)."""
    return epath.Path(path)


def filesystem_package(path: str | os.PathLike) -> tuple[str, str] | None:
    """A bucket URL's scheme and the package its filesystem needs (``("gs://", "gcsfs")``); None for a
    local path, ``(scheme, "the filesystem package")`` for another URL."""
    text = str(path)
    if "://" not in text:
        return None
    scheme = next((s for s in _PACKAGES if text.startswith(s)), text.split("://", 1)[0] + "://")
    return scheme, _PACKAGES.get(scheme, "the filesystem package")


def is_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an existing file; a bucket URL whose filesystem package is missing is an error."""
    p = input_path(path)
    try:
        return p.is_file()
    except ImportError as err:
        scheme, package = filesystem_package(path) or ("this", "the filesystem package")
        raise StorageError(f"{path}: reading {scheme} paths needs {package} (pip install {package}): {err}") from None


def relative_path_note(path: str | os.PathLike) -> str | None:
    """``"relative paths are read from the current directory, <cwd>"`` for a relative local ``path`` (a
    file not found there may be where a command was meant to run from), else None."""
    if "://" in str(path) or Path(path).is_absolute():
        return None
    return f"relative paths are read from the current directory, {Path.cwd()}"


def existing_file(path: str | os.PathLike, error: type[Exception], missing: str = "file not found") -> epath.Path:
    """``path`` as an :class:`epath.Path` when it is an existing file; otherwise ``error`` naming it
    (``"{path}: {missing}"``, or why its filesystem cannot be reached)."""
    try:
        found = is_file(path)
    except StorageError as err:
        raise error(str(err)) from None
    if not found:
        folder = input_path(path).is_dir()  # a folder where a file was meant: say so, not "not found"
        raise error(f"{path}: a folder, not a file (name the files in it)" if folder else f"{path}: {missing}")
    return input_path(path)


_WILDCARDS = "*?["


def expand_patterns(paths: Sequence[str | os.PathLike], error: type[Exception]) -> list[str | os.PathLike]:
    """``paths`` with each glob pattern (``data/train-*.jsonl.gz``, local or ``gs://``) replaced by the
    files it matches, sorted by name; other paths as given. A name that exists as a file is itself,
    wildcard characters or not. A pattern that matches no file is ``error`` naming it."""
    out: list[str | os.PathLike] = []
    for path in paths:
        text = str(path)
        first = min((i for i in map(text.find, _WILDCARDS) if i >= 0), default=-1)
        try:
            literal = first < 0 or is_file(path)
        except StorageError as err:
            raise error(str(err)) from None
        if literal:
            out.append(path)
            continue
        split = text.rfind("/", 0, first) + 1  # the folder before the first wildcard, and the pattern in it
        folder = input_path(text[:split] or ".")
        found = sorted(str(p) if split else str(p.relative_to(folder)) for p in folder.glob(text[split:]) if p.is_file())
        if not found:
            raise error(f"{text}: no file matches this pattern")
        out.extend(found)
    return out


def existing_files(paths: Sequence[str | os.PathLike], error: type[Exception]) -> list[str | os.PathLike]:
    """``paths`` with glob patterns expanded (:func:`expand_patterns`), each an existing file; otherwise
    ``error`` naming the first that is not (:func:`existing_file`)."""
    files = expand_patterns(paths, error)
    for name in files:
        existing_file(name, error)
    return files


def files_at_hand(paths: Sequence[str | os.PathLike]) -> list[str]:
    """The existing files among ``paths``, glob patterns expanded; a name or pattern with no file is
    left out (for what reads a split only if it is there: a model card's counts, eval's baseline)."""
    found: list[str] = []
    for path in paths:
        try:
            found += [str(f) for f in expand_patterns([path], StorageError) if is_file(f)]
        except StorageError:
            continue
    return found


OTHER_FORMATS = {".csv": "CSV", ".tsv": "TSV", ".parquet": "Parquet", ".pq": "Parquet", ".xlsx": "Excel", ".arrow": "Arrow"}
"""Output names whose format is not JSONL: the ``score`` and ``label`` outputs under such a name would be
JSONL all the same, which that format's readers (``pandas.read_parquet``, ``read_csv``) refuse or misread."""


def output_file(output: str | os.PathLike, inputs: Sequence[str | os.PathLike], what: str) -> Path:
    """``output`` checked before any work: not a folder and not one of ``inputs`` (writing ``what`` over
    it would lose the items); its folder is made. Returns it as a :class:`Path`."""
    output = Path(output)
    if output.suffix in COMPRESSIONS:
        raise ValueError(
            f"--output {output}: the {what} are written as plain JSONL, a line at a time; "
            f"name a .jsonl file and compress it when it is complete"
        )
    if output.suffix.lower() in OTHER_FORMATS:  # JSONL under such a name: the format's own readers refuse it
        raise ValueError(
            f"--output {output}: the {what} are written as JSONL, a line at a time, not as {OTHER_FORMATS[output.suffix.lower()]}; "
            f"name a .jsonl file and convert it when it is complete (e.g. pandas.read_json(PATH, lines=True).to_parquet(...))"
        )
    if output.is_dir():
        raise ValueError(f"--output {output} is a folder: name the JSONL file to write")
    if file_identity(output) in {file_identity(name) for name in inputs}:
        raise ValueError(f"--output {output} is one of the inputs: write the {what} to another file")
    output.parent.mkdir(parents=True, exist_ok=True)
    return output
