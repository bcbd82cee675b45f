"""Render every config key with its type, default and attribute docstring (for --help and the README)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import typing

from omnidistill.config import Config
from omnidistill.config.limits import LIMITS, LIST_LENGTHS


def _field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (the string literal right after a field) of a dataclass."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, nxt in itertools.pairwise(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _type_str(tp) -> str:
    return str(tp).replace("typing.", "").replace("omnidistill.config.", "").replace("<class '", "").replace("'>", "")


def _range(owner: str, field: str) -> str:
    """The field's allowed range (:mod:`omnidistill.config.limits`) as a sentence, or ''."""
    parts = []
    if (owner, field) in LIST_LENGTHS:
        parts.append(f"{LIST_LENGTHS[owner, field]} items")
    if (owner, field) in LIMITS:
        parts.append(("each " if parts else "") + LIMITS[owner, field][1])
    return f"Range: {', '.join(parts)}." if parts else ""


def config_rows(cls: type = Config, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, doc) for every leaf field."""
    rows = []
    hints = typing.get_type_hints(cls)
    docs = _field_docs(cls)
    instance = (
        cls()
        if all(f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING for f in dataclasses.fields(cls))
        else None
    )
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows += config_rows(tp, key + ".")
            continue
        default = getattr(instance, f.name) if instance is not None else "(required)"
        rows.append((key, _type_str(tp), repr(default), " ".join(filter(None, [docs.get(f.name, ""), _range(cls.__name__, f.name)]))))
    return rows


@functools.cache
def config_reference_text() -> str:
    """The keys as ``train --help`` lists them (built once per process: every parser of the CLI holds
    it, and reading the docstrings parses the config module's source)."""
    return "\n".join(f"  {k} ({t}, default {d}){': ' + doc if doc else ''}" for k, t, d, doc in config_rows())


def config_reference_markdown() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    esc = lambda text: text.replace("|", "\\|")
    lines += [f"| `{k}` | `{esc(t)}` | `{esc(d)}` | {esc(doc)} |" for k, t, d, doc in config_rows()]
    return "\n".join(lines)
