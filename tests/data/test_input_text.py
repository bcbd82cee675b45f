"""The ids omnidistill trains on are the ids every consumer computes, for every tokenizer kind and layout.

Consumers: the exported model card's ``input_text`` + ``tokenizer(text, truncation=True,
max_length=...)`` (plain ``transformers``), and the real ``omniscore`` package's formatting path
(``omniscore.formatting.format_example`` with the layout, then its tokenizer call).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from transformers import AutoTokenizer

from omnidistill.config import DataConfig, PromptLayout
from omnidistill.data.input_text import TextLayout, format_record, source_text
from omnidistill.data.schema import Record, validate_record
from omnidistill.data.sources import read_records
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.export.model_card import input_text_code

LAYOUTS = {
    "sep": DataConfig(input_format="sep"),
    "omniscore": DataConfig(input_format="omniscore"),  # the paper: no task line
    "omniscore-released": DataConfig(input_format="omniscore", layout=PromptLayout(task_prefix="Task:", prediction_prefix="Candidate:")),
}
MAX_LENGTH = 96  # short enough that some sample records are truncated


PER_TASK_AND_LANGUAGE = 10


@pytest.fixture(scope="module")
def records(sample_dir):
    """The first records of each (task, language) of the sample's three splits: every task's fields
    and every script, 360 records rather than all 2,640 (each case tokenizes them a dozen times)."""
    out, seen = [], Counter()
    for split in ("train", "dev", "test"):
        for record in read_records(sample_dir / f"{split}.jsonl")[0]:
            seen[record.task, record.lang] += 1
            if seen[record.task, record.lang] <= PER_TASK_AND_LANGUAGE:
                out.append(record)
    return out


def card_input_text(tok, layout: TextLayout):
    """The exported model card's ``input_text`` function, as a user runs it."""
    namespace = {"tok": tok}
    exec(input_text_code(layout), namespace)
    return namespace["input_text"]


def package_format(layout: TextLayout):
    """The ``omniscore`` package's ``InputFormat`` of a folder with this layout."""
    formatting = pytest.importorskip("omniscore.formatting")
    return formatting.InputFormat(
        task_prefix=layout.task_prefix,
        source_prefix=layout.source_prefix,
        reference_prefix=layout.reference_prefix,
        prediction_prefix=layout.prediction_prefix,
        separator=layout.separator,
    )


def omniscore_text(layout: TextLayout, record: Record) -> str:
    """The input text as the ``omniscore`` package formats it for a folder with this layout."""
    from omniscore.formatting import format_example

    task = record.task if layout.task_line else None
    return format_example(
        record.candidate,
        reference=record.reference or None,
        source=source_text(record, layout.separator) or None,
        task=task,
        input_format=package_format(layout),
    )


def test_a_record_without_a_task_is_formatted_as_the_package_formats_no_task(tiny_tokenizer_dir):
    """The package's user scores an item without a task by giving none (``task=None``: no task line); a
    record without one holds the reports' ``unknown`` task, and its text read ``Task: unknown``."""
    layout = TextLayout.from_config(LAYOUTS["omniscore-released"], None)
    fmt = package_format(layout)
    from omniscore.formatting import format_example

    item = {"id": "x", "source": "The Moon orbits the Earth.", "candidate": "Der Mond umkreist die Erde."}
    record = validate_record(item, "items.jsonl:1", require_labels=False)
    assert record.task == "unknown"
    expected = format_example(item["candidate"], source=item["source"], input_format=fmt)
    assert format_record(record, layout).text == expected == "Source: The Moon orbits the Earth.\nCandidate: Der Mond umkreist die Erde."
    card = card_input_text(AutoTokenizer.from_pretrained(tiny_tokenizer_dir), layout)
    assert card(item["candidate"], source=item["source"]) == expected
    with_task = validate_record({**item, "task": "mt"}, "items.jsonl:2", require_labels=False)
    assert format_record(with_task, layout).text == format_example(item["candidate"], source=item["source"], task="mt", input_format=fmt)


def test_a_blank_field_is_left_out_where_the_package_keeps_its_prefix_unless_given_none():
    """docs/export.md's one difference in what a consumer is handed: omnidistill leaves a whitespace-only
    reference out (the record holds none); the package, handed the string, writes ``Reference:``."""
    from omniscore.formatting import format_example

    layout = TextLayout.from_config(LAYOUTS["omniscore"], None)
    item = {"id": "x", "source": "The Moon orbits the Earth.", "reference": "  ", "candidate": "Der Mond umkreist die Erde."}
    ours = format_record(validate_record(item, "items.jsonl:1", require_labels=False), layout).text
    handed = {"source": item["source"], "input_format": package_format(layout)}
    assert format_example(item["candidate"], reference=item["reference"], **handed) == ours.replace(
        "\nPrediction:", f"\n{layout.reference_prefix}\nPrediction:"
    )
    assert format_example(item["candidate"], reference=item["reference"].strip() or None, **handed) == ours


@pytest.mark.parametrize("layout_name", sorted(LAYOUTS))
@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_training_ids_equal_every_consumers_ids(tokenizer_dirs, records, kind, layout_name):
    tok = AutoTokenizer.from_pretrained(tokenizer_dirs[kind])
    base = LAYOUTS[layout_name]
    encoders = {
        t: RecordEncoder.from_config(
            tok, DataConfig(input_format=base.input_format, layout=base.layout, truncation=t, max_length=MAX_LENGTH)
        )
        for t in ("right", "context_first")
    }
    layout = encoders["right"].layout
    input_text = card_input_text(tok, layout)
    card = [input_text(r.candidate, source=source_text(r, layout.separator), reference=r.reference, task=r.task) for r in records]
    package = [omniscore_text(layout, r) for r in records]
    assert card == package == [encoders["right"].text(r) for r in records]
    theirs = tok(card, truncation=True, max_length=MAX_LENGTH)["input_ids"]
    full = [len(ids) for ids in tok(card)["input_ids"]]
    lengths = encoders["right"].full_lengths(records)
    assert lengths == full and any(n > MAX_LENGTH for n in full) and any(n <= MAX_LENGTH for n in full)
    for truncation, encoder in encoders.items():
        singles = [encoder(r)["input_ids"].tolist() for r in records]  # training's: one record at a time
        batched = [ids.tolist() for ids in encoder.token_ids_many(records)]  # the token cache's: one tokenizer call
        assert batched == singles, truncation
        encoded = encoder.encode_inputs(records)  # scoring's: the ids and the lengths before truncation
        assert [ids.tolist() for ids in encoded.ids] == batched, truncation
        assert encoded.full_lengths == full and encoded.truncated == sum(n > MAX_LENGTH for n in full)
        for record, n, ours, their_ids in zip(records, full, singles, theirs, strict=True):
            if truncation == "right" or n <= MAX_LENGTH:
                assert ours == their_ids, (truncation, record.id)
            else:  # documented difference: context cut first, the same length, the same first and last token
                assert len(ours) == MAX_LENGTH and ours[0] == their_ids[0] and ours[-1] == their_ids[-1], record.id


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_context_first_keeps_the_candidate_and_the_layout_tokens(tokenizer_dirs, kind):
    tok = AutoTokenizer.from_pretrained(tokenizer_dirs[kind])
    encoder = RecordEncoder.from_config(tok, DataConfig(input_format="omniscore", max_length=40))
    record = Record(id="x", task="mt", lang="en", source=" ".join(["Paris is nice."] * 60), candidate="The Moon orbits the Earth.")
    ids = encoder(record)["input_ids"].tolist()
    assert len(ids) == 40
    short = Record(id="y", task="mt", lang="en", source="Paris is nice.", candidate="The Moon orbits the Earth.")
    full = tok(encoder.text(short))["input_ids"]
    # the untruncated short input ends with "\nPrediction: <candidate>[SEP]"; the truncated one ends the same way
    tail = len(tok(encoder.text(Record(id="z", task="mt", lang="en", candidate="The Moon orbits the Earth.")))["input_ids"]) - 1
    assert ids[-tail:] == full[-tail:]
    assert (
        ids[: 1 + len(tok("Source:", add_special_tokens=False)["input_ids"])]
        == full[: 1 + len(tok("Source:", add_special_tokens=False)["input_ids"])]
    )


def test_fields_are_stripped_and_whitespace_fields_dropped():
    layout = TextLayout.from_prompt_layout(PromptLayout())
    record = Record(id="x", task="qa", lang="en", question="  Why?  ", source=" ", reference="\tR ", candidate=" C\n")
    formatted = format_record(record, layout)
    assert formatted.text == "Source: Why?\nReference: R\nPrediction: C"
    assert [formatted.text[a:b] for a, b in formatted.spans] == ["Why?", "R", "C"]
    sep = TextLayout(separator=" [SEP] ")
    assert format_record(record, sep).text == "Why? [SEP] R [SEP] C"


def test_source_side_fields_join_in_schema_order():
    layout = TextLayout.from_prompt_layout(PromptLayout(task_prefix="Task:"))
    record = Record(id="x", task="chat", lang="en", context="user: hi", question="Q", title="T", source="S", candidate="C")
    formatted = format_record(record, layout)
    assert formatted.text == "Task: chat\nSource: user: hi\nQ\nT\nS\nPrediction: C"
    assert [formatted.text[a:b] for a, b in formatted.spans] == ["user: hi", "Q", "T", "S", "C"]


def test_old_per_field_tokenization_differs_on_byte_level_bpe(tokenizer_dirs, records):
    """Why the ids come from one tokenizer call: tokenizing fields apart gives other ids on BPE."""
    tok = AutoTokenizer.from_pretrained(tokenizer_dirs["bpe"])
    encoder = RecordEncoder.from_config(tok, DataConfig(max_length=512))
    differs = 0
    for record in records[:20]:
        pieces = tok([t for t in format_record(record, encoder.layout).text.split(encoder.layout.separator)], add_special_tokens=False)
        apart = [tok.cls_token_id] + [i for p in pieces["input_ids"] for i in (*p, tok.sep_token_id)]
        differs += apart != encoder(record)["input_ids"].tolist()
    assert differs > 0
    assert np.all([encoder(r)["input_ids"].tolist() == tok(encoder.text(r))["input_ids"] for r in records[:20]])
