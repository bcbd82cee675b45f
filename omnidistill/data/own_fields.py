"""Fields of the user's own and the fields reports group by.

A dataset often carries columns of its own beside the schema's: the system that wrote the candidate,
a prompt id, a judge's name. Named in ``data.keep_fields`` (training and ``eval``) or ``--keep-fields``
(``score``, ``eval``, ``label``), such a field is read as it is into :attr:`Record.extra` and is never model input;
an unnamed field outside the schema is still refused, so that a misspelt one is never ignored.

``eval --group-by`` and ``score --group-by`` (``eval.group_by`` in a run's config) report each value of
a field on its own, as they report each task and language: a field of the user's own (read as a kept
field without being named twice) or the schema's metadata (``dataset``, ``src_lang``, ``tgt_lang``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from omnidistill.data.schema import KNOWN_FIELDS, META_FIELDS, Record
from omnidistill.dimensions import DIMENSIONS

ALWAYS_GROUPED = ("task", "lang")
"""Fields every report already groups by."""
OUTPUT_NAMES = frozenset({"scores", "uncertainty", "pred"})
"""Fields that ``score``'s and ``eval``'s output lines write themselves."""
MISSING = "(none)"
"""The group of a record that lacks the field, or holds null in it."""


def _field_names(names: Iterable[str], option: str) -> list[str]:
    """``names`` as a list, refusing one that is not a non-blank string (``option``: where they were given)."""
    names = list(names)
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{option}: {name!r} is not a field name")
    return names


def check_keep_fields(names: Iterable[str], option: str) -> frozenset[str]:
    """``names`` as a set, refusing a name the schema reads or an output line writes (``option`` names
    where they were given: ``--keep-fields``, ``data.keep_fields``)."""
    names = _field_names(names, option)
    taken = sorted(set(names) & (KNOWN_FIELDS | set(DIMENSIONS) | OUTPUT_NAMES))
    if taken:
        raise ValueError(f"{option} {', '.join(taken)}: the schema or the output line has such a field; name only fields of your own")
    return frozenset(names)


def check_group_by(names: Iterable[str], option: str) -> tuple[str, ...]:
    """``names`` in order without repeats, refusing ``task`` and ``lang`` (always grouped) and the
    schema's other fields but its metadata (a text or label field has a value per item, not groups)."""
    out: list[str] = []
    for name in _field_names(names, option):
        if name in ALWAYS_GROUPED:
            raise ValueError(f"{option} {name}: every report already groups by {' and '.join(ALWAYS_GROUPED)}")
        if (name in KNOWN_FIELDS and name not in META_FIELDS) or name in DIMENSIONS or name in OUTPUT_NAMES:
            raise ValueError(
                f"{option} {name}: not a field to group by; name a field of your own (e.g. system) or the schema's {', '.join(META_FIELDS)}"
            )
        if name not in out:
            out.append(name)
    return tuple(out)


def fields_to_read(keep: Iterable[str], group_by: Sequence[str]) -> frozenset[str]:
    """The fields outside the schema a reader must keep: ``keep`` and the fields grouped by that are not
    the schema's."""
    return frozenset(keep) | {name for name in group_by if name not in KNOWN_FIELDS}


def group_value(record: Record, name: str) -> str:
    """The group of ``record`` by field ``name``: a string as it is, another value as JSON (``3``,
    ``true``), :data:`MISSING` when the record lacks the field or holds null in it."""
    value = getattr(record, name) if name in KNOWN_FIELDS else (record.extra or {}).get(name)
    if value is None:
        return MISSING
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
