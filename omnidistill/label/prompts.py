"""The ``flat`` prompt set for the teacher LLM: one four-dimension 1-5 rubric with per-task guidance,
reference-free and reference-based variants. The paper's own prompts are
:mod:`omnidistill.label.omniscore_prompts`; the checklist pipeline is :mod:`omnidistill.label.checklist`.

The judge answers with one JSON object; :mod:`omnidistill.label.parse` validates it strictly.
"""

from __future__ import annotations

import json

from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS

SYSTEM = (
    "You are a careful, strict evaluator of machine-generated text. You grade exactly what is written, "
    "in the language it is written in, and you do not reward length or confident tone."
)

RUBRIC = {
    "informativeness": (
        "How much of what the task calls for does the candidate actually deliver?",
        {
            1: "delivers nothing useful for the task",
            3: "covers the core but misses important content",
            5: "complete: everything needed, nothing important left out",
        },
    ),
    "clarity": (
        "Is the candidate fluent, well-formed and easy to read in its language?",
        {
            1: "garbled, ungrammatical or unreadable",
            3: "understandable with effort; clumsy or repetitive",
            5: "fluent, natural and well organised",
        },
    ),
    "plausibility": (
        "Could the candidate be true and sensible on its own, judged by world knowledge and internal logic?",
        {1: "absurd or self-contradictory", 3: "partly believable, with doubtful claims", 5: "entirely credible and coherent"},
    ),
    "faithfulness": (
        "Does the candidate stay true to the given input (question, source, reference), adding nothing unsupported?",
        {
            1: "contradicts or ignores the input",
            3: "mostly consistent, with some unsupported or altered details",
            5: "fully consistent with the input",
        },
    ),
}

TASK_GUIDANCE = {
    "qa": "The candidate answers the question. Judge whether it answers what was asked, correctly and directly.",
    "mt": "The candidate translates the source into the target language. Meaning must be preserved; an untranslated copy is a failure.",
    "summarization": "The candidate summarises the source. It should keep the main points and invent nothing.",
    "headline": "The candidate is a headline for the source. It should be short, accurate and capture the main point.",
    "paraphrase": "The candidate rewrites the source in other words. The meaning must stay the same.",
    "chat": "The candidate replies to the user's message in a conversation. It should be helpful, on topic and correct.",
}
GENERIC_GUIDANCE = "Judge the candidate as a response to the given input."


def rubric_text() -> str:
    lines = []
    for dim in DIMENSIONS:
        question, anchors = RUBRIC[dim]
        lines.append(f"- {dim}: {question}")
        lines.extend(f"    {score} = {text}" for score, text in anchors.items())
    lines.append("  Use 2 and 4 for cases between the anchors.")
    return "\n".join(lines)


def input_block(record: Record, with_reference: bool) -> str:
    parts = [f"Task: {record.task}", f"Language: {record.lang}"]
    if record.context:
        parts.append(f"[Conversation so far]\n{record.context}")
    if record.title:
        parts.append(f"[Title]\n{record.title}")
    if record.question:
        parts.append(f"[Question]\n{record.question}")
    if record.source:
        parts.append(f"[Source]\n{record.source}")
    if with_reference and record.reference:
        parts.append(f"[Reference]\n{record.reference}")
    parts.append(f"[Candidate]\n{record.candidate}")
    return "\n\n".join(parts)


def output_format() -> str:
    example = {"reasoning": "one or two sentences", **{d: 3 for d in DIMENSIONS}}
    return (
        "Reason briefly first, then answer with exactly one JSON object and nothing else, in this form:\n"
        f"{json.dumps(example)}\nEach score is an integer from 1 to 5."
    )


def judge_messages(record: Record, *, reference_mode: str = "auto", checklist: list[str] | None = None) -> list[dict[str, str]]:
    """Chat messages asking for the four scores of one record (the ``flat`` prompt set).

    ``reference_mode``: ``auto`` shows the reference when the record has one, as evidence of what a
    good answer contains; ``based`` makes the reference the yardstick (reference-guided judging, as
    paper 002's gold variant) and refuses a record without one; ``free`` never shows it.
    """
    if reference_mode == "based" and not record.reference:
        raise ValueError(f"item {record.id}: reference_mode=based needs a reference")
    with_ref = reference_mode in ("auto", "based")
    guidance = TASK_GUIDANCE.get(record.task, GENERIC_GUIDANCE)
    if reference_mode == "based":
        ref_note = (
            "A gold reference output is given. Judge the candidate against it: content the reference has and the candidate "
            "lacks lowers informativeness, and claims that contradict it lower faithfulness. Other wordings of the same "
            "content are as good as the reference's."
        )
    elif with_ref and record.reference:
        ref_note = "A reference output is given: use it as evidence of what a good answer contains, not as the only acceptable wording."
    else:
        ref_note = "No reference output is given: rely on the input and your own knowledge."
    body = [guidance, ref_note, "Score the candidate on four dimensions:", rubric_text(), input_block(record, with_ref)]
    if checklist:
        body.append(
            "Checklist to consider while judging (answer it for yourself; do not score the items):\n"
            + "\n".join(f"- {c}" for c in checklist)
        )
    body.append(output_format())
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(body)}]
