"""``score --input-workers``: worker processes read, check and tokenize the input, and the output is the
one a single process writes, byte for byte, with the same counts, warnings and errors."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from omnidistill.data.schema import DataError
from omnidistill.dimensions import NUM_DIMENSIONS
from omnidistill.score_file import auto_input_workers, score_file


class IdsScorer:
    """The Scorer's interface without a model: each item's scores are made from its token ids (their
    count, sum, last and first id), so that a different id or order shows in the output; the chunks'
    ids are kept to compare."""

    source = "ids"

    def __init__(self, encoder):
        self.encoder, self.max_length = encoder, encoder.max_length
        self.chunks: list[list[list[int]]] = []
        self.truncated = 0

    def fingerprint(self):
        return "ids"

    def warn_truncated(self, count):
        self.truncated += count

    def predict(self, records, encoded=None):
        from omnidistill.scorer import Prediction

        assert len(records) == len(encoded.ids) == len(encoded.full_lengths)
        self.chunks.append([x.tolist() for x in encoded.ids])
        rows = [[1 + len(x) / 100, 1 + int(x.sum()) % 400 / 100, 1 + int(x[-1]) % 4, 1 + int(x[0]) % 4] for x in encoded.ids]
        return Prediction(np.array(rows, np.float32).reshape(-1, NUM_DIMENSIONS), truncated=encoded.truncated)


@pytest.fixture(scope="module")
def encoder(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    from omnidistill.data.tokenize import RecordEncoder

    return RecordEncoder(AutoTokenizer.from_pretrained(tiny_tokenizer_dir), 24)  # short: some inputs are truncated


def item(i: int, **fields) -> dict:
    return {
        "id": f"r{i}",
        "task": ["qa", "mt", "chat"][i % 3],
        "lang": ["en", "de"][i % 2],
        "candidate": f"answer {i} " * (1 + i % 9),
        **fields,
    }


def inputs(folder: Path) -> list[Path]:
    """Three files, one compressed and one CSV: blank lines, a CRLF line end, invalid lines (bad JSON,
    an empty candidate, invalid UTF-8), fields of the user's own, sources, labels as columns."""
    lines = [json.dumps(item(i, system=f"s{i % 2}", source="the source " * (i % 4))) for i in range(40)]
    lines[5] = "{not json"
    lines[11] = json.dumps(item(11, candidate=""))
    lines.insert(20, "")
    a = folder / "a.jsonl"
    a.write_bytes(("\n".join(lines[:30]) + "\r\n" + "\n".join(lines[30:]) + "\n").encode() + b'{"candidate": "\xff"}\n')
    b = folder / "b.jsonl.bz2"
    b.write_bytes(bz2.compress("".join(json.dumps(item(i, system="s9")) + "\n" for i in range(40, 57)).encode()))
    c = folder / "c.csv"
    c.write_text(
        "id,task,lang,candidate,clarity,system\n" + "".join(f"r{i},qa,en,csv answer {i},{1 + i % 5},s{i % 3}\n" for i in range(57, 70))
    )
    return [a, b, c]


def warnings(caplog) -> list[str]:
    """The warnings logged (not the debug lines of skipped records, which a worker logs in its own process)."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def scored(encoder, files, out: Path, workers: int, **options) -> tuple[dict, IdsScorer]:
    scorer = IdsScorer(encoder)
    done = score_file(scorer, files, out, input_workers=workers, **options)
    return done, scorer


def test_workers_write_what_one_process_writes(encoder, tmp_path, caplog):
    """JSONL, bz2 and CSV inputs with invalid lines skipped, chunks of 7, kept and grouped fields of the
    user's own, truncated inputs, a repeated id: lines, chunks of token ids (7 valid records each, though
    the workers read 7 lines at a time), means and counts are the same with two worker processes as read
    in this process; no worker is left running."""
    files = inputs(tmp_path)
    with (tmp_path / "a.jsonl").open("a") as f:
        f.write(json.dumps(item(3)) + "\n")  # r3 again: warned about as in one process
    options = {"skip_invalid": True, "chunk": 7, "keep_fields": ["system"], "group_by": ["system"]}
    before = set(multiprocessing.active_children())  # an earlier test's, if any
    runs = {}
    for workers in (0, 2):
        caplog.clear()
        out = tmp_path / f"out{workers}.jsonl"
        runs[workers] = (*scored(encoder, files, out, workers, **options), out.read_bytes(), warnings(caplog))
    (done0, scorer0, text0, logged0), (done2, scorer2, text2, logged2) = runs[0], runs[2]
    assert text2 == text0 and len(text0.splitlines()) == 39 + 17 + 13
    assert scorer2.chunks == scorer0.chunks  # the same chunks (a model's batches, and so its float rounding, depend on them)
    assert done2["skipped"] == done0["skipped"] == 3 and done2["truncated"] == done0["truncated"] > 0
    assert done2["means"].as_dict() == done0["means"].as_dict() and set(done0["means"].as_dict()["by"]["system"]) == {
        "s0",
        "s1",
        "s2",
        "s9",
        "(none)",
    }
    assert logged2 == logged0 and any("repeat an earlier record's id" in m for m in logged0)
    assert set(multiprocessing.active_children()) <= before  # the workers were shut down


@pytest.mark.parametrize("where", ["record", "file"])
def test_an_error_is_raised_after_the_chunks_before_it_are_written(encoder, tmp_path, where):
    """An invalid record (no ``skip_invalid``), or a file with no record after the first: the same error,
    and the same lines written before it, with workers as in one process."""
    a = tmp_path / "a.jsonl"
    a.write_text("".join(json.dumps(item(i)) + "\n" for i in range(23)))
    files = [a]
    if where == "record":
        a.write_text(a.read_text() + '{"id": "bad", "candidate": 3}\n')
    else:
        files.append(tmp_path / "empty.jsonl.gz")
        files[-1].write_bytes(gzip.compress(b"\n\n"))
    outcome = {}
    before = set(multiprocessing.active_children())
    for workers in (0, 1):
        out = tmp_path / f"out{workers}.jsonl"
        with pytest.raises(DataError) as err:
            scored(encoder, files, out, workers, chunk=5)
        outcome[workers] = (str(err.value), out.read_text())
    assert outcome[1] == outcome[0]
    message, text = outcome[0]
    assert message == (f"{a}:24: candidate must be a string, got int" if where == "record" else f"{files[-1]}: no records")
    assert len(text.splitlines()) == 20  # the chunk with the error (or cut short by it) is not written
    assert set(multiprocessing.active_children()) <= before  # the workers were shut down


def test_resume_with_workers_continues_where_one_process_stopped(encoder, tmp_path):
    """An output cut in the middle of a line, resumed with a worker: the kept lines are checked here,
    the rest read by the worker from the next input line on, and the file equals one written whole."""
    files = inputs(tmp_path)
    options = {"skip_invalid": True, "chunk": 7, "keep_fields": ["system"]}
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    scored(encoder, files, whole, 0, **options)
    lines = whole.read_text().splitlines(keepends=True)
    scored(encoder, files, cut, 0, **options)
    cut.write_text("".join(lines[:33]) + lines[33][:10])
    done, scorer = scored(encoder, files, cut, 1, resume=True, **options)
    assert cut.read_text() == whole.read_text()
    assert done["resumed"] == 33 and done["scored"] == len(lines) - 33 and done["skipped"] == 3
    assert sum(len(c) for c in scorer.chunks) == len(lines) - 33  # the kept items were not tokenized again


def test_by_default_workers_read_only_large_inputs_off_a_cpu(tmp_path):
    """On a CPU the model has the cores, so a thread reads ahead; on an accelerator one worker per 4
    cores, at most 4, for inputs of 32 MiB or more (a worker takes seconds to start), or of unknown size."""
    from omnidistill.score_file import AUTO_WORKERS_MIN_BYTES, input_bytes

    large = AUTO_WORKERS_MIN_BYTES
    assert auto_input_workers("cpu", 64, large) == 0
    assert [auto_input_workers("gpu", cores, large) for cores in (2, 4, 8, 16, 64)] == [0, 1, 2, 4, 4]
    assert auto_input_workers("tpu", 240, None) == 4 and auto_input_workers("gpu", 16, large - 1) == 0
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"
    a.write_bytes(b"x" * 1000)
    b.write_bytes(b"y" * 24)
    assert input_bytes([a, b]) == 1024 and input_bytes([tmp_path / "gone.jsonl"]) is None
