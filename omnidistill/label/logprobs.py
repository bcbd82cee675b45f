"""A judge's distribution over levels 1..5 from the token log-probabilities of its JSON answer (the
G-Eval idea, cited in OmniScore §1: weight each score level by the judge's probability of it).

For each dimension the score field is located in the answer's JSON by its key path (``{dim}`` in the
flat schema, ``{dim}.score`` in the nested one), never by searching for a digit. The token that holds
the score's first character is found from the tokens' character offsets (the tokens must spell the
answer exactly). Its alternatives in ``top_logprobs`` (plus the chosen token itself) vote for a level:

- a token that is the level digit alone, with or without whitespace around it (``4``, `` 4``), or
- a token that is the chosen token with only that digit changed (``:4`` -> ``:3``).

Tokens of the same level add up. **Missing mass**: levels absent from the top-k, and tokens that are no
level, get no probability; the levels found are renormalised to sum to 1. When the levels found carry
less than ``min_mass`` of the probability (the top-k mostly shows other tokens) the score has no
usable distribution, which :class:`LogprobsError` reports like an answer without ``top_logprobs``.
"""

from __future__ import annotations

import math
from json.decoder import scanstring
from json.scanner import NUMBER_RE
from typing import Any

from omnidistill.dimensions import DIMENSIONS, NUM_LEVELS
from omnidistill.label.parse import JudgeOutputError, json_object_span

_WS = " \t\n\r"
_LEVELS = tuple(str(c) for c in range(1, NUM_LEVELS + 1))


class LogprobsError(ValueError):
    """The answer carries no usable token log-probabilities for a score."""


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _scan(text: str, i: int, path: tuple, numbers: dict[tuple, int]) -> int:
    """Parse one JSON value at ``i`` (valid JSON); record where each number starts, by key path."""
    i = _skip(text, i)
    c = text[i]
    if c == "{":
        i = _skip(text, i + 1)
        if text[i] == "}":
            return i + 1
        while True:
            key, i = scanstring(text, _skip(text, i) + 1)
            i = _skip(text, i) + 1  # past ':'
            i = _skip(text, _scan(text, i, (*path, key), numbers))
            if text[i] == "}":
                return i + 1
            i += 1  # past ','
    if c == "[":
        i, k = _skip(text, i + 1), 0
        if text[i] == "]":
            return i + 1
        while True:
            i = _skip(text, _scan(text, i, (*path, k), numbers))
            k += 1
            if text[i] == "]":
                return i + 1
            i += 1
    if c == '"':
        return scanstring(text, i + 1)[1]
    match = NUMBER_RE.match(text, i)
    if match:
        numbers[path] = i
        return match.end()
    for literal in ("true", "false", "null"):
        if text.startswith(literal, i):
            return i + len(literal)
    raise LogprobsError(f"not JSON at character {i}")


def number_offsets(text: str) -> dict[tuple, int]:
    """Character offset of every number in the answer's JSON object, by key path (the object is found
    as :func:`omnidistill.label.parse.json_object_span` finds it for the parsers)."""
    try:
        start, _ = json_object_span(text)
    except JudgeOutputError as err:
        raise LogprobsError(str(err)) from None
    numbers: dict[tuple, int] = {}
    _scan(text, start, (), numbers)
    return numbers


def _level(alternative: str, chosen: str, at: int) -> int | None:
    """The level an alternative token stands for, given the chosen token and the digit's index in it."""
    if alternative.strip(_WS) in _LEVELS:
        return int(alternative.strip(_WS))
    if len(alternative) == len(chosen) and alternative[at] in _LEVELS and alternative[:at] == chosen[:at]:
        if alternative[at + 1 :] == chosen[at + 1 :]:
            return int(alternative[at])
    return None


def score_distribution(content: list[dict[str, Any]], offset: int, *, min_mass: float = 0.5, where: str = "score") -> list[float]:
    """[p1..p5] for the score whose first character is at ``offset`` of the answer spelt by ``content``
    (the ``choices[0].logprobs.content`` entries: ``token``, ``logprob``, ``top_logprobs``)."""
    at = 0
    for entry in content:
        token = entry.get("token", "")
        if at <= offset < at + len(token):
            alternatives = entry.get("top_logprobs")
            if not alternatives:
                raise LogprobsError(f"{where}: the answer has no top_logprobs for the score token {token!r}")
            logprobs = {a["token"]: float(a["logprob"]) for a in alternatives}
            logprobs.setdefault(token, float(entry["logprob"]))
            mass = [0.0] * NUM_LEVELS
            for alt, lp in logprobs.items():
                level = _level(alt, token, offset - at)
                if level is not None:
                    mass[level - 1] += math.exp(lp)
            found = math.fsum(mass)
            if found < min_mass:
                raise LogprobsError(f"{where}: levels 1-5 carry {found:.3f} of the top_logprobs' probability (< {min_mass})")
            return [m / found for m in mass]
        at += len(token)
    raise LogprobsError(f"{where}: no token covers character {offset} of the answer")


def judgment_distributions(
    text: str, content: list[dict[str, Any]] | None, *, nested: bool, min_mass: float = 0.5
) -> dict[str, list[float]]:
    """{dimension: [p1..p5]} for one judge answer ``text`` with its token log-probabilities ``content``."""
    if not content:
        raise LogprobsError("the answer has no logprobs (does the server support logprobs/top_logprobs?)")
    spelt = "".join(entry.get("token", "") for entry in content)
    if spelt != text:
        raise LogprobsError("the logprobs tokens do not spell the answer")
    numbers = number_offsets(text)
    out = {}
    for dim in DIMENSIONS:
        path = (dim, "score") if nested else (dim,)
        if path not in numbers:
            raise LogprobsError(f"{'.'.join(path)}: no number in the answer")
        out[dim] = score_distribution(content, numbers[path], min_mass=min_mass, where=".".join(path))
    return out
