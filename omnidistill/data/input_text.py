"""Turn a record into the one text string the model reads (``data.input_format``).

Two layouts, both written so that a user outside omnidistill reproduces the string exactly:

- ``sep``: the fields present joined by ``f" {sep_token} "``, in the order context, question, title,
  source, reference, candidate; ``tokenizer(text)`` then adds [CLS] ... [SEP].
- ``omniscore``: the layout of QCRI's ``omniscore`` package (``omniscore.formatting.format_example``):
  segments ``f"{prefix} {text}"`` joined by a separator: an optional task line, the source-side
  fields (context, question, title, source, joined by the separator), the reference, the candidate.

Every field is stripped of surrounding whitespace and whitespace-only fields are left out. The
``omniscore`` package strips each field and leaves out empty ones too, but keeps a whitespace-only one as
its bare prefix (``Reference:``): a caller of the package passes None for a blank field
(``docs/export.md``). There is no task id unless ``layout.task_prefix`` asks for one: the paper
gives the student none (OmniScore §3, "Problem formulation"). ``dataset``, ``src_lang`` and
``tgt_lang`` are teacher-prompt metadata and never part of the input.
"""

from __future__ import annotations

import dataclasses

from omnidistill.config import DataConfig, PromptLayout
from omnidistill.data.schema import TEXT_FIELDS, UNKNOWN, Record

SOURCE_SIDE = tuple(f for f in TEXT_FIELDS if f != "reference")


@dataclasses.dataclass(frozen=True)
class TextLayout:
    """Prefixes (None: bare text) and the separator between segments."""

    separator: str
    task_prefix: str | None = None
    source_prefix: str | None = None
    reference_prefix: str | None = None
    prediction_prefix: str | None = None
    task_line: bool = False

    @classmethod
    def from_config(cls, data: DataConfig, sep_token: str | None) -> TextLayout:
        """The layout of ``data.input_format`` (``sep`` needs the tokenizer's separator token)."""
        if data.input_format == "sep":
            if not sep_token:
                raise ValueError("data.input_format=sep needs a tokenizer with a sep_token (or eos_token)")
            return cls(separator=f" {sep_token} ")
        return cls.from_prompt_layout(data.layout)

    @classmethod
    def from_prompt_layout(cls, layout: PromptLayout) -> TextLayout:
        return cls(
            separator=layout.separator,
            task_prefix=layout.task_prefix,
            source_prefix=layout.source_prefix,
            reference_prefix=layout.reference_prefix,
            prediction_prefix=layout.prediction_prefix,
            task_line=layout.task_prefix is not None,
        )


@dataclasses.dataclass(frozen=True)
class InputText:
    """The text, and the character span of each field in it (source-side fields, reference, candidate)."""

    text: str
    spans: tuple[tuple[int, int], ...]


def clean(text: str | None) -> str:
    return (text or "").strip()


def given_task(record: Record) -> str | None:
    """The record's task as the model input holds it: None for a record that gives none (its task is
    :data:`~omnidistill.data.schema.UNKNOWN`), which gets no task line, as the ``omniscore`` package's
    ``format_example(..., task=None)`` formats an item without a task. Before, such a record read
    ``Task: unknown`` under a task-line layout, and scored otherwise than in the package."""
    task = clean(record.task)
    return task if task and task != UNKNOWN else None


def source_fields(record: Record) -> list[str]:
    """The source-side fields present (context, question, title, source), stripped."""
    return [t for f in SOURCE_SIDE if (t := clean(getattr(record, f)))]


def source_text(record: Record, separator: str) -> str:
    """The source-side fields joined by ``separator`` (the ``sources=`` argument of the ``omniscore``
    package for this record)."""
    return separator.join(source_fields(record))


def format_record(record: Record, layout: TextLayout) -> InputText:
    """The model's input text for ``record`` under ``layout``, with the span of every field."""
    text, spans = "", []

    def add_segment(prefix: str | None, parts: list[str], track: bool) -> None:
        nonlocal text
        body = layout.separator.join(parts)
        segment = f"{prefix} {body}".strip() if prefix else body
        if text:
            text += layout.separator
        start = len(text) + len(segment) - len(body)  # the body ends the segment (it has no trailing space)
        text += segment
        if track:
            for part in parts:
                spans.append((start, start + len(part)))
                start += len(part) + len(layout.separator)

    task = given_task(record)
    if layout.task_line and task:
        add_segment(layout.task_prefix, [task], track=False)
    sources = source_fields(record)
    if sources:
        add_segment(layout.source_prefix, sources, track=True)
    if clean(record.reference):
        add_segment(layout.reference_prefix, [clean(record.reference)], track=True)
    add_segment(layout.prediction_prefix, [clean(record.candidate)], track=True)
    return InputText(text=text, spans=tuple(spans))
