"""The omnidistill record schema and its validation (errors name the file and line)."""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from typing import Any

from omnidistill.dimensions import DIMENSIONS, NUM_LEVELS, SCORE_MAX, SCORE_MIN

TASKS = ("qa", "mt", "summarization", "headline", "paraphrase", "chat")
UNKNOWN = "unknown"
"""The ``task`` and ``lang`` of a record that gives none (reports group such records under it). A task
of this value is no task: the model input has no task line for it (:func:`~omnidistill.data.input_text.given_task`)."""
TEXT_FIELDS = ("context", "question", "title", "source", "reference")
"""Input texts, in the order they form the model input before the candidate (only those present)."""
META_FIELDS = ("dataset", "src_lang", "tgt_lang")
"""Metadata the teacher prompts use (prompt choice, MT language names); never part of the model input."""
KNOWN_FIELDS = {"id", "task", "lang", *TEXT_FIELDS, *META_FIELDS, "candidate", "labels", "label_dist", "annotations", "group_id", "teacher"}
DIST_TOLERANCE = 1e-6
"""How far a ``label_dist`` row may sum from 1."""


class DataError(ValueError):
    """A malformed record or file; the message starts with ``file:line``."""


@dataclasses.dataclass(frozen=True)
class Record:
    """One (input, candidate) item with up to four labels (None = missing dimension)."""

    id: str
    task: str
    lang: str
    candidate: str
    question: str | None = None
    source: str | None = None
    reference: str | None = None
    context: str | None = None
    """Earlier turns of a conversation (chat), as ``role: text`` lines."""
    title: str | None = None
    dataset: str | None = None
    src_lang: str | None = None
    tgt_lang: str | None = None
    labels: tuple[float | None, ...] = (None,) * len(DIMENSIONS)
    annotations: tuple[tuple[float | None, ...], ...] = ()
    group_id: str | None = None
    label_dist: tuple[tuple[float, ...] | None, ...] = ()
    """The teacher's distribution over levels 1..5 per dimension (None = none for that dimension), or
    ``()`` when the record has none at all; ``labels`` stays its expected value."""
    extra: dict[str, Any] | None = dataclasses.field(default=None, compare=False, hash=False)
    """Fields outside the schema that the reader was asked to keep (``data.keep_fields``, ``--keep-fields``:
    :mod:`omnidistill.data.own_fields`), as they are: never model input, written back into ``score``'s,
    ``eval``'s and ``label``'s output lines."""

    @property
    def has_labels(self) -> bool:
        return any(v is not None for v in self.labels)


DIMENSION_LIST = f"the dimensions: {', '.join(DIMENSIONS)}"
_DIMENSION_SET = frozenset(DIMENSIONS)


def label_vector(obj: Any, where: str, field: str) -> tuple[float | None, ...]:
    """One label object ({dimension: number in [1, 5] or null}) as a tuple in dimension order (None =
    missing); anything else is a :class:`DataError` naming ``where`` and the field."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: {field} must be an object with keys {', '.join(DIMENSIONS)}")
    if not obj.keys() <= _DIMENSION_SET:
        unknown = obj.keys() - _DIMENSION_SET
        raise DataError(f"{where}: {field} has unknown dimension(s) {', '.join(sorted(unknown))} ({DIMENSION_LIST})")
    values = []
    for dim in DIMENSIONS:
        value = obj.get(dim)
        if value is None:
            values.append(None)
            continue
        if type(value) is float and SCORE_MIN <= value <= SCORE_MAX:  # a decoded JSON label, as it usually is (NaN fails)
            values.append(value)
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise DataError(f"{where}: {field}.{dim} must be a number in [1, 5], got {value!r}")
        if not SCORE_MIN <= value <= SCORE_MAX:
            raise DataError(f"{where}: {field}.{dim}={value} is outside [1, 5]")
        values.append(float(value))
    return tuple(values)


def label_distributions(obj: Any, where: str) -> tuple[tuple[float, ...] | None, ...]:
    """``label_dist`` ({dimension: [p1, ..., p5] or null}) in dimension order: five finite, non-negative
    numbers per dimension that sum to 1 within 1e-6; anything else is a :class:`DataError` naming
    ``where`` and the field."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: label_dist must be an object with keys {', '.join(DIMENSIONS)}")
    unknown = set(obj) - set(DIMENSIONS)
    if unknown:
        raise DataError(f"{where}: label_dist has unknown dimension(s) {', '.join(sorted(unknown))} ({DIMENSION_LIST})")
    rows: list[tuple[float, ...] | None] = []
    for dim in DIMENSIONS:
        value = obj.get(dim)
        field = f"label_dist.{dim}"
        if value is None:
            rows.append(None)
            continue
        if not isinstance(value, list) or len(value) != NUM_LEVELS:
            raise DataError(f"{where}: {field} must be a list of {NUM_LEVELS} probabilities (levels 1..5), got {value!r}")
        for i, p in enumerate(value):
            if isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(p) or p < 0:
                raise DataError(f"{where}: {field}[{i}] must be a non-negative number, got {p!r}")
        total = math.fsum(value)
        if abs(total - 1.0) > DIST_TOLERANCE:
            raise DataError(f"{where}: {field} sums to {total!r}, not 1 (within {DIST_TOLERANCE})")
        rows.append(tuple(float(p) for p in value))
    return tuple(rows)


def _optional_text(obj: dict, key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DataError(f"{where}: {key} must be a string, got {type(value).__name__}")
    return value if value.strip() else None


def record_id(obj: dict, where: str) -> str:
    """The id :func:`validate_record` gives the record ``obj`` at ``where``: its ``id``, else ``where``."""
    return identifier(obj, "id", where) or where


def identifier(obj: dict, key: str, where: str) -> str | None:
    """An ``id`` or ``group_id``: a string or an integer, as text; None when absent, null or blank (an
    ``id`` then defaults to the record's file and line, not to the text "None" that every such record
    would share)."""
    value = obj.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DataError(f"{where}: {key} must be a string or an integer, got {type(value).__name__} {value!r}"[:200])
    return str(value)


def _conversation(obj: dict, where: str) -> str | None:
    """``context``: a string, or a list of {role, content} turns rendered as ``role: content`` lines."""
    value = obj.get("context")
    if value is None or isinstance(value, str):
        return _optional_text(obj, "context", where)
    if not isinstance(value, list):
        raise DataError(f"{where}: context must be a string or a list of {{role, content}} turns, got {type(value).__name__}")
    lines = []
    for i, turn in enumerate(value):
        if not isinstance(turn, dict) or not isinstance(turn.get("role"), str) or not isinstance(turn.get("content"), str):
            raise DataError(f"{where}: context[{i}] must be an object with string 'role' and 'content'")
        lines.append(f"{turn['role']}: {turn['content']}")
    return "\n".join(lines) or None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value: Any, field: str = "") -> tuple[str, str] | None:
    """(field, character) of the first string in a decoded JSON value that holds a lone surrogate:
    ``json.loads`` joins an escaped pair into one character and keeps a lone one (``"\\ud83d"``)."""
    if isinstance(value, str):
        return (field, match.group()) if (match := _SURROGATE.search(value)) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        name = f"{field}[{key}]" if isinstance(key, int) else f"{field}.{key}" if field else str(key)
        if (found := _lone_surrogate(item, name)) is not None:
            return found
    return None


def surrogate_error(obj: Any, where: str) -> DataError | None:
    """The error for a record holding a lone surrogate in any of its strings, else None: tokenizers and
    UTF-8 writers refuse one (the message shows it escaped, since printing it fails too)."""
    if (found := _lone_surrogate(obj)) is None:
        return None
    field, char = found
    return DataError(
        f"{where}: {field} holds a lone surrogate (\\u{ord(char):04x}), half of a UTF-16 pair and not a "
        "character (text cut inside one?): tokenizers and UTF-8 writers refuse it"
    )


FIELD_ALIASES = {
    "prediction": "candidate", "predictions": "candidate", "hypothesis": "candidate", "mt": "candidate",
    "output": "candidate", "response": "candidate", "src": "source", "ref": "reference", "label": "labels",
}  # fmt: skip
"""Other tools' names for schema fields: the ``omniscore`` package's ``predictions``, COMET's ``src``/``mt``/
``ref``, and the usual words for a model's output."""


def unknown_fields_error(unknown: set[str], where: str) -> DataError:
    """The error for fields outside the schema, each with the schema's name for it where one is likely
    (an alias from :data:`FIELD_ALIASES`, else the nearest field name)."""
    named, unmatched = [], False
    names = sorted(KNOWN_FIELDS | set(DIMENSIONS))  # a label dimension may be a field of its own (``clarty``: ``clarity``)
    for name in sorted(unknown):
        close = FIELD_ALIASES.get(name.lower()) or next(iter(difflib.get_close_matches(name, names, n=1)), None)
        named.append(f"{name} (the schema's {close}?)" if close else name)
        unmatched = unmatched or close is None
    # a column of the user's own (a system name, a timestamp): say why it is refused and what to do
    advice = (
        "; only the schema's fields are read, and others are refused so that a misspelt one is never ignored: "
        "name yours in data.keep_fields (training, eval) or --keep-fields (score, eval, label) to read them as they are, "
        "never as model input, or drop them"
        if unmatched
        else ""
    )
    return DataError(f"{where}: unknown field(s) {', '.join(named)}{advice}")


def validate_record(obj: Any, where: str, *, require_labels: bool = True, keep: frozenset[str] = frozenset()) -> Record:
    """Check one decoded JSON object / Parquet row against the schema and build a :class:`Record`;
    the fields named in ``keep`` (outside the schema) go to its ``extra`` as they are."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if not obj.keys() <= KNOWN_FIELDS and (unknown := obj.keys() - KNOWN_FIELDS - keep):
        raise unknown_fields_error(unknown, where)
    candidate = obj.get("candidate")
    if candidate is not None and not isinstance(candidate, str):
        raise DataError(f"{where}: candidate must be a string, got {type(candidate).__name__}")
    if candidate is None or not candidate.strip():
        raise DataError(f"{where}: missing or empty 'candidate'")
    labels: tuple[float | None, ...] = (None,) * len(DIMENSIONS)
    if obj.get("labels") is not None:
        labels = label_vector(obj["labels"], where, "labels")
    annotations: tuple[tuple[float | None, ...], ...] = ()
    if obj.get("annotations") is not None:
        if not isinstance(obj["annotations"], list):
            raise DataError(f"{where}: annotations must be a list of label objects")
        annotations = tuple(label_vector(a, where, f"annotations[{i}]") for i, a in enumerate(obj["annotations"]))
    label_dist: tuple[tuple[float, ...] | None, ...] = ()
    if obj.get("label_dist") is not None:
        label_dist = label_distributions(obj["label_dist"], where)
    if require_labels and all(v is None for v in labels):
        given = [how for how, value in (("the annotators' mean", annotations), ("label_dist's expected level", label_dist)) if value]
        hint = f"; annotations and label_dist are not read as labels: set labels too (e.g. {' or '.join(given)})" if given else ""
        raise DataError(f"{where}: no labels (need at least one of {', '.join(DIMENSIONS)}){hint}")
    return Record(
        id=record_id(obj, where),
        task=_optional_text(obj, "task", where) or UNKNOWN,
        lang=_optional_text(obj, "lang", where) or UNKNOWN,
        candidate=candidate,
        question=_optional_text(obj, "question", where),
        source=_optional_text(obj, "source", where),
        reference=_optional_text(obj, "reference", where),
        context=_conversation(obj, where),
        title=_optional_text(obj, "title", where),
        dataset=_optional_text(obj, "dataset", where),
        src_lang=_optional_text(obj, "src_lang", where),
        tgt_lang=_optional_text(obj, "tgt_lang", where),
        labels=labels,
        annotations=annotations,
        group_id=identifier(obj, "group_id", where),
        label_dist=label_dist,
        extra=({name: obj[name] for name in sorted(keep) if name in obj} or None) if keep else None,
    )
