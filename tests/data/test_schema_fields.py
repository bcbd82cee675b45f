"""Schema fields the teacher prompts and input formats use: title, src_lang/tgt_lang, dataset, context."""

import json

import pytest

from omnidistill.data.input_text import TextLayout, format_record
from omnidistill.data.schema import DataError, validate_record
from omnidistill.data.sources import read_records


def test_prompt_fields_are_accepted_and_context_turns_are_rendered(tmp_path):
    row = {
        "id": "1", "task": "chat", "lang": "de", "dataset": "wildchat", "title": "T", "src_lang": "en", "tgt_lang": "de",
        "context": [{"role": "user", "content": "Hallo"}, {"role": "assistant", "content": "Hi!"}],
        "question": "Wie geht's?", "candidate": "Gut.", "labels": {"clarity": 4},
    }  # fmt: skip
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (r,), _ = read_records([str(path)])
    assert (r.dataset, r.title, r.src_lang, r.tgt_lang) == ("wildchat", "T", "en", "de")
    assert r.context == "user: Hallo\nassistant: Hi!"
    # the conversation and title are model input; dataset and language codes are not (no task id)
    text = format_record(r, TextLayout(separator=" [SEP] ")).text
    assert text == "user: Hallo\nassistant: Hi! [SEP] Wie geht's? [SEP] T [SEP] Gut."


@pytest.mark.parametrize(("context", "message"), [(5, "context must be a string or a list"), ([{"role": "user"}], r"context\[0\]")])
def test_bad_context_names_the_line(context, message):
    with pytest.raises(DataError, match=rf"f\.jsonl:3: {message}"):
        validate_record({"candidate": "c", "labels": {"clarity": 3}, "context": context}, "f.jsonl:3")
