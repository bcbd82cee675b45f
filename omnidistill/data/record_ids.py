"""Duplicate record ids: counted cheaply while streaming, located by file and line when they matter.

Where ids only label items (training, evaluation reports) a repeated id is counted and warned about;
where ids join two files (``eval --compare``, ``score --resume``) it is refused with both locations,
since a join on a repeated id would pair the wrong items.
"""

from __future__ import annotations

import array
from collections.abc import Iterable

import numpy as np

from omnidistill.data.schema import DataError


class IdCounter:
    """Counts ids seen more than once, holding 8 bytes per id (Python's 64-bit string hash, fixed
    within a process; a count, never a join, so a collision could only add a warning)."""

    def __init__(self) -> None:
        self._hashes = array.array("q")

    def add(self, ident: str) -> None:
        self._hashes.append(hash(ident))

    def repeats(self) -> int:
        """How many records share their id with an earlier record."""
        hashes = np.array(self._hashes, np.int64)  # one copy, sorted in place (np.unique's temporaries peaked at 7x the ids)
        hashes.sort()
        return int(np.count_nonzero(hashes[1:] == hashes[:-1]))


def first_repeats(located: Iterable[tuple[str, str]], limit: int = 3) -> list[str]:
    """``'id' at WHERE repeats WHERE`` for the first ``limit`` repeated ids of (id, where) pairs."""
    first: dict[str, str] = {}
    found: list[str] = []
    for ident, where in located:
        if ident in first:
            found.append(f"id {ident!r} at {where} repeats {first[ident]}")
            if len(found) >= limit:
                break
        else:
            first[ident] = where
    return found


def refuse_repeats(located: Iterable[tuple[str, str]], why: str) -> None:
    """Raise :class:`DataError` naming both locations of the first repeated ids of (id, where) pairs."""
    found = first_repeats(located)
    if found:
        raise DataError(f"{'; '.join(found)}: ids must be unique where {why}")
