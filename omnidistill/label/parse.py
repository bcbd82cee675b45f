"""Strict parsing of the judge's answers: one JSON object with four integer scores in 1..5."""

from __future__ import annotations

import json
import re

from omnidistill.dimensions import DIMENSIONS


class JudgeOutputError(ValueError):
    """The judge's answer is not the JSON object that was asked for."""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
_THINK_OPEN, _THINK_CLOSE = re.compile(r"<think>", re.I), re.compile(r"</think>", re.I)


def answer_start(text: str) -> int:
    """Where the verdict begins in ``text``: after the last ``</think>``, else at 0.

    Reasoning models (DeepSeek-R1, Qwen3, QwQ) think aloud in a ``<think>`` block before they answer,
    and a server that does not split that block off into ``reasoning_content`` returns it at the head
    of ``content``. Drafts of the answer in it (a JSON object, "I choose A") are not the answer. A
    block opened and never closed holds no verdict: a :class:`JudgeOutputError`.
    """
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        return closes[-1].end()
    if _THINK_OPEN.search(text):
        raise JudgeOutputError("the answer is reasoning only: its <think> block is never closed")
    return 0


def json_object_span(text: str) -> tuple[int, int]:
    """Where the answer's JSON object lies in ``text``: ``(start, end)`` of its outer braces (end
    exclusive), after any reasoning block (:func:`answer_start`) and inside a ```json fence when there
    is one."""
    begin = answer_start(text)
    fenced = _FENCE.search(text, begin)
    low, high = (fenced.start(1), fenced.end(1)) if fenced else (begin, len(text))
    start, end = text.find("{", low, high), text.rfind("}", low, high)
    if start < 0 or end <= start:
        raise JudgeOutputError("no JSON object in the answer")
    return start, end + 1


def _not_json(name: str) -> float:
    """``json``'s hook for ``NaN`` and ``Infinity``, which Python reads and JSON does not have."""
    raise JudgeOutputError(f"invalid JSON: {name} is not a JSON number")


def _json_object(text: str) -> dict:
    start, end = json_object_span(text)
    try:
        obj = json.loads(text[start:end], parse_constant=_not_json)
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
        scores[dim] = _likert(obj.get(dim), dim)
    return scores


def _exact_keys(obj: dict, allowed: set[str], required: set[str], where: str) -> None:
    extra, missing = sorted(set(obj) - allowed), sorted(required - set(obj))
    if extra:
        raise JudgeOutputError(f"{where}: unexpected key(s) {', '.join(extra)}")
    if missing:
        raise JudgeOutputError(f"{where}: missing key(s) {', '.join(missing)}")


def _likert(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or not 1 <= value <= 5:
        raise JudgeOutputError(f"{where} must be an integer from 1 to 5, got {value!r}")
    return float(value)


def _normalise(text: str) -> str:
    return " ".join(text.split())


def parse_nested_judgment(text: str, *, confidence: bool = True, candidate: str | None = None) -> dict:
    """The OmniScore answer schema (paper appendix G), strictly: ``confidence`` (required when the prompt
    asks for it, in [0, 1]), per dimension exactly ``{score, rationale}`` (faithfulness also ``issues``:
    at most 6 ``{type, text_span}`` with a known type and a span of at most 25 words), no other key.

    Returns ``{"scores", "confidence", "rationales", "issues"}``; each issue records whether its span is
    a verbatim quote of ``candidate`` (whitespace-normalised) as ``verbatim``.
    """
    from omnidistill.label.omniscore_prompts import ISSUE_TYPES, MAX_ISSUES, MAX_SPAN_WORDS

    obj = _json_object(text)
    _exact_keys(obj, {*DIMENSIONS, "confidence"}, set(DIMENSIONS) | ({"confidence"} if confidence else set()), "answer")
    conf = obj.get("confidence")
    if conf is not None and (isinstance(conf, bool) or not isinstance(conf, int | float) or not 0.0 <= conf <= 1.0):
        raise JudgeOutputError(f"confidence must be a number from 0.0 to 1.0, got {conf!r}")
    scores, rationales, issues = {}, {}, []
    for dim in DIMENSIONS:
        part = obj[dim]
        if not isinstance(part, dict):
            raise JudgeOutputError(f"{dim} must be an object with score and rationale, got {part!r}")
        extra = {"issues"} if dim == "faithfulness" else set()
        _exact_keys(part, {"score", "rationale", *extra}, {"score", "rationale", *extra}, dim)
        scores[dim] = _likert(part["score"], f"{dim}.score")
        if not isinstance(part["rationale"], str) or not part["rationale"].strip():
            raise JudgeOutputError(f"{dim}.rationale must be a non-empty string")
        rationales[dim] = part["rationale"].strip()
    raw_issues = obj["faithfulness"]["issues"]
    if not isinstance(raw_issues, list) or len(raw_issues) > MAX_ISSUES:
        raise JudgeOutputError(f"faithfulness.issues must be a list of at most {MAX_ISSUES} items")
    for i, issue in enumerate(raw_issues):
        where = f"faithfulness.issues[{i}]"
        if not isinstance(issue, dict):
            raise JudgeOutputError(f"{where} must be an object with type and text_span")
        _exact_keys(issue, {"type", "text_span"}, {"type", "text_span"}, where)
        if issue["type"] not in ISSUE_TYPES:
            raise JudgeOutputError(f"{where}.type must be one of {', '.join(ISSUE_TYPES)}, got {issue['type']!r}")
        span = issue["text_span"]
        if not isinstance(span, str) or not span.strip() or len(span.split()) > MAX_SPAN_WORDS:
            raise JudgeOutputError(f"{where}.text_span must be a non-empty quote of at most {MAX_SPAN_WORDS} words")
        verbatim = candidate is not None and _normalise(span) in _normalise(candidate)
        issues.append({"type": issue["type"], "text_span": span, "verbatim": verbatim})
    return {"scores": scores, "confidence": None if conf is None else float(conf), "rationales": rationales, "issues": issues}


def parse_list(text: str, key: str, low: int, high: int) -> list[str]:
    """``{key: [str, ...]}`` with ``low`` to ``high`` non-empty strings (checklist-pipeline answers)."""
    obj = _json_object(text)
    items = obj.get(key)
    if not isinstance(items, list) or not low <= len(items) <= high or not all(isinstance(i, str) and i.strip() for i in items):
        raise JudgeOutputError(f"{key} must be a list of {low} to {high} non-empty strings, got {items!r}")
    return [i.strip() for i in items]


_CHOICE = re.compile(r"I choose (?:Response )?([AB]) as the better response", re.I)


def parse_pairwise_choice(text: str) -> str:
    """'A' or 'B' from the closing sentence of a pairwise verdict (CE-Judge §3.3); exactly one verdict."""
    found = {m.upper() for m in _CHOICE.findall(text, answer_start(text))}
    if len(found) != 1:
        raise JudgeOutputError("the verdict must end with 'Therefore, I choose A (or B) as the better response.'")
    return found.pop()
