"""Input paths that may live in a bucket: data files and configs are read through ``etils.epath``, so a
``gs://`` (or ``s3://``) URL goes through the same readers as a local path.

Bucket access needs the filesystem package (``gcsfs`` for ``gs://``: ``pip install 'omnidistill[gcs]'``);
without it the error names the path and the package instead of failing deep inside a reader.
"""

from __future__ import annotations

import os

from etils import epath

_PACKAGES = {"gs://": "gcsfs", "s3://": "s3fs"}


class StorageError(OSError):
    """A path's filesystem cannot be reached (its package is missing)."""


def input_path(path: str | os.PathLike) -> epath.Path:
    """``path`` as an :class:`epath.Path` (local paths stay local)."""
    return epath.Path(path)


def is_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an existing file; a bucket URL whose filesystem package is missing is an error."""
    p = input_path(path)
    try:
        return p.is_file()
    except ImportError as err:
        scheme = next((s for s in _PACKAGES if str(path).startswith(s)), "")
        package = _PACKAGES.get(scheme, "the filesystem package")
        raise StorageError(f"{path}: reading {scheme or 'this'} paths needs {package} (pip install {package}): {err}") from None


def existing_file(path: str | os.PathLike, error: type[Exception], missing: str = "file not found") -> epath.Path:
    """``path`` as an :class:`epath.Path` when it is an existing file; otherwise ``error`` naming it
    (``"{path}: {missing}"``, or why its filesystem cannot be reached)."""
    try:
        found = is_file(path)
    except StorageError as err:
        raise error(str(err)) from None
    if not found:
        raise error(f"{path}: {missing}")
    return input_path(path)
