"""A teacher's pairwise choices on disk: the ``omnidistill label --pairwise`` output, one JSON line per
pair of candidates that share an input, with their ids (``id_a``, ``id_b``) and the ``winner`` by
majority of the judge models, or null when they tied (CE-Judge section 3.3: the judge chooses one of
two and has no tie option). Read by ``score``/``eval --pairs`` (agreement) and ``data.pairs`` (training).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from omnidistill.data.schema import DataError


@dataclasses.dataclass(frozen=True)
class Preference:
    """One judged pair: the two ids and the winner's (None: the judges tied)."""

    id_a: str
    id_b: str
    winner: str | None
    line: int = dataclasses.field(default=0, compare=False)
    """Its line in the file it was read from (0: not read from a file)."""


def read_preferences(path: str | Path, origin: str = "--pairs") -> list[Preference]:
    """The pairs of a ``label --pairwise`` output (or any JSONL with ``id_a``, ``id_b`` and ``winner``);
    a malformed line is a :class:`DataError` naming the file, the line and the field (``origin``: the
    option or setting that named the file, for the message of a file that is not there)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found ({origin}: the output of omnidistill label --pairwise)")
    pairs = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{where}: invalid JSON ({err.msg})") from None
            if not isinstance(item, dict):
                raise DataError(f"{where}: expected a JSON object with id_a, id_b and winner")
            for field in ("id_a", "id_b", "winner"):
                if field not in item:
                    raise DataError(f"{where}: no {field} (a pair line of label --pairwise has id_a, id_b and winner)")
                if field != "winner" and (item[field] is None or isinstance(item[field], (dict, list, bool))):
                    raise DataError(f"{where}: {field} must be an id, got {item[field]!r}")
            a, b, winner = str(item["id_a"]), str(item["id_b"]), item["winner"]
            if a == b:
                raise DataError(f"{where}: id_a and id_b are both {a!r}")
            if winner is not None and str(winner) not in (a, b):
                raise DataError(f"{where}: winner {winner!r} is neither id_a {a!r} nor id_b {b!r}")
            pairs.append(Preference(a, b, None if winner is None else str(winner), number))
    return pairs
