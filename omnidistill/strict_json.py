"""JSON that every reader takes: a number that is not finite is written as ``null``.

Python's ``json`` writes ``NaN`` and ``Infinity``, which JSON does not have (RFC 8259 §6): JavaScript's
``JSON.parse``, Go's and Rust's decoders and other strict readers refuse the whole file. A report has
such numbers where a value is undefined, e.g. a Pearson r over labels that never vary, so the files
users read with other tools go through :func:`dumps`: evaluation reports and comparisons, sweep
summaries, ``train_summary.json``, ``train_log.jsonl`` and labelling stats.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite_or_null(value: Any) -> Any:
    """``value`` with every float that is not finite (NaN, ±inf) replaced by None, in dicts, lists and
    tuples at any depth; other values are kept as they are."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`finite_or_null` of ``value``; ``allow_nan=False`` makes any non-finite
    number left (e.g. a NumPy scalar the caller did not convert) an error rather than invalid JSON."""
    return json.dumps(finite_or_null(value), allow_nan=False, **kwargs)
