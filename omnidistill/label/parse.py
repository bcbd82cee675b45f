"""Strict parsing of the judge's answers: one JSON object with four integer scores in 1..5."""

from __future__ import annotations

import json
import re

from omnidistill.dimensions import DIMENSIONS


class JudgeOutputError(ValueError):
    """The judge's answer is not the JSON object that was asked for."""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def _json_object(text: str) -> dict:
    fenced = _FENCE.search(text)
    candidate = fenced.group(1) if fenced else text
    start, end = candidate.find("{"), candidate.rfind("}")
    if start < 0 or end <= start:
        raise JudgeOutputError("no JSON object in the answer")
    try:
        obj = json.loads(candidate[start : end + 1])
    except json.JSONDecodeError as err:
        raise JudgeOutputError(f"invalid JSON: {err.msg}") from None
    if not isinstance(obj, dict):
        raise JudgeOutputError("the JSON value is not an object")
    return obj


def parse_judgment(text: str) -> dict[str, float]:
    """The four scores (as floats) from a judge answer; raises :class:`JudgeOutputError` otherwise."""
    obj = _json_object(text)
    scores = {}
    for dim in DIMENSIONS:
        value = obj.get(dim)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or not 1 <= value <= 5:
            raise JudgeOutputError(f"{dim} must be an integer from 1 to 5, got {value!r}")
        scores[dim] = float(value)
    return scores


def parse_checklist(text: str) -> list[str]:
    obj = _json_object(text)
    items = obj.get("checklist")
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i.strip() for i in items):
        raise JudgeOutputError("checklist must be a non-empty list of strings")
    return [i.strip() for i in items][:8]
