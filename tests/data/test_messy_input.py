"""Messy input files (issue 17): line numbers are physical lines, a BOM is fine, one bad Parquet row is
that row's error, and an empty file is reported whatever was skipped before it."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from omnidistill.data.schema import DataError
from omnidistill.data.sources import read_records


def line(i, **extra):
    return json.dumps({"id": str(i), "candidate": f"c{i}", "labels": {"clarity": 3}, **extra})


def test_a_lone_carriage_return_does_not_shift_line_numbers(tmp_path):
    path = tmp_path / "x.jsonl"
    good = line(1).replace('"id"', '\r"id"')  # \r as JSON whitespace inside line 1
    path.write_bytes((good + "\n" + line(2) + "\r\n" + '{"candidate": "x", "labels": {"clarity": 9}}\n').encode())
    with pytest.raises(DataError, match=r"x\.jsonl:3: labels\.clarity=9"):
        read_records([str(path)])
    records, skipped = read_records([str(path)], skip_invalid=True)
    assert [r.id for r in records] == ["1", "2"] and skipped == 1


def test_utf8_bom_is_accepted_in_jsonl_and_csv(tmp_path):
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + (line(1) + "\n").encode())
    assert read_records([str(jsonl)])[0][0].id == "1"
    csv = tmp_path / "bom.csv"
    csv.write_bytes(b"\xef\xbb\xbfid,candidate,clarity\n7,hello,4\n")
    assert read_records([str(csv)])[0][0].id == "7"
    for path in (csv, jsonl):  # a UTF-16 file (Excel's "Unicode text") is named as such, not "not valid UTF-8"
        path.write_bytes(path.read_bytes().decode("utf-8-sig").encode("utf-16"))
        with pytest.raises(DataError, match=rf"{path.name}: the file is UTF-16 or UTF-32 .*save it as UTF-8"):
            read_records([str(path)])


def test_csv_quoted_line_breaks_keep_physical_line_numbers(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text('id,candidate,clarity\n1,"two\nlines",4\n2,ok,nine\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"q\.csv:4: clarity must be a number"):
        read_records([str(path)])


def test_a_csv_quote_never_closed_is_refused_not_read_as_one_value(tmp_path):
    """A stray opening quote made every later line of the file one value of that record, silently:
    the rows after it were lost (scored as one text). Text after a closing quote was glued on."""
    path = tmp_path / "u.csv"
    path.write_text('id,candidate\n1,fine\n2,"stray quote\n3,lost\n4,lost too\n', encoding="utf-8")
    for skip in (False, True):  # not skippable: the rest of the file is inside the quote
        with pytest.raises(DataError, match=r"u\.csv:3: a quote opened in this record is never closed"):
            read_records([str(path)], require_labels=False, skip_invalid=skip)
    path.write_text('id,candidate\n1,"quoted" tail\n2,"a ""doubled"" quote"\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"u\.csv:2: malformed CSV quoting"):
        read_records([str(path)], require_labels=False)
    records, skipped = read_records([str(path)], require_labels=False, skip_invalid=True)
    assert skipped == 1 and [(r.id, r.candidate) for r in records] == [("2", 'a "doubled" quote')]


def test_a_csv_value_longer_than_pythons_csv_limit_is_read(tmp_path):
    """A 200,000-character source (a long document to summarize) stopped the reading with csv's
    ``field larger than field limit (131072)``, an exception that was not a DataError."""
    path = tmp_path / "long.csv"
    path.write_text(f"id,candidate,source\n1,short,{'x' * 200_000}\n2,next,y\n", encoding="utf-8")
    records, _ = read_records([str(path)], require_labels=False)
    assert [len(r.source) for r in records] == [200_000, 1]


def test_invalid_utf8_in_a_csv_names_its_line(tmp_path):
    path = tmp_path / "e.csv"
    path.write_bytes(b"id,candidate\n1,ok\n2,b\xffd\n")
    with pytest.raises(DataError, match=r"e\.csv:3: not valid UTF-8"):
        read_records([str(path)], require_labels=False)


def test_a_csv_row_with_more_or_fewer_values_than_the_header_is_its_error(tmp_path):
    """An unquoted comma in a text used to drop the text's tail silently (csv puts extra values under
    no column); a short row left its last columns unset."""
    path = tmp_path / "r.csv"
    path.write_text('id,question,candidate\n1,Where?,Paris, the capital\n2,Where?\n3,Where?,"Paris, quoted"\n4,,Berlin\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"r\.csv:2: 4 values for the header's 3 columns \(an unquoted comma\?\)"):
        read_records([str(path)], require_labels=False)
    records, skipped = read_records([str(path)], require_labels=False, skip_invalid=True)
    assert skipped == 2 and [(r.id, r.question, r.candidate) for r in records] == [("3", "Where?", "Paris, quoted"), ("4", None, "Berlin")]


def test_a_key_given_twice_in_a_jsonl_record_is_that_records_error(tmp_path):
    """``json.loads`` keeps the last of two equal keys: a record with two ``candidate`` fields was scored
    on one of them, silently. Nested objects (labels) are checked too."""
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"id": "1", "candidate": "first", "candidate": "second", "labels": {"clarity": 3}}\n'
        '{"id": "2", "candidate": "c", "labels": {"clarity": 3, "clarity": 5}}\n' + line(3) + "\n",
        encoding="utf-8",
    )
    with pytest.raises(DataError, match=r"d\.jsonl:1: key 'candidate' appears twice in one object"):
        read_records([str(path)])
    records, skipped = read_records([str(path)], skip_invalid=True)
    assert [r.id for r in records] == ["3"] and skipped == 2


def test_one_unknown_label_in_one_parquet_row_is_that_rows_error(tmp_path):
    path = tmp_path / "x.parquet"
    rows = [{"id": str(i), "candidate": f"c{i}", "labels": {"clarity": 3.0, "fluency": 2.0 if i == 2 else None}} for i in range(4)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DataError, match=r"x\.parquet:row 2: labels has unknown dimension\(s\) fluency"):
        read_records([str(path)])
    records, skipped = read_records([str(path)], skip_invalid=True)
    assert [r.id for r in records] == ["0", "1", "3"] and skipped == 1


def test_an_empty_file_after_skipped_records_is_reported(tmp_path):
    bad = tmp_path / "a.jsonl"
    bad.write_text(line(1) + "\n" + '{"candidate": ""}\n')
    empty = tmp_path / "b.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match=r"b\.jsonl: no records"):
        read_records([str(bad), str(empty)], skip_invalid=True)


def test_truncation_is_counted_exactly_and_from_a_sample():
    from omnidistill.data.schema import Record
    from omnidistill.data.tokenize import RecordEncoder, count_truncated
    from omnidistill.models.loader import load_tokenizer

    tokenizer = load_tokenizer(str(__import__("pathlib").Path(__file__).resolve().parents[2] / "assets" / "tiny-wordpiece"))
    encoder = RecordEncoder(tokenizer, max_length=16)
    short = Record(id="s", task="qa", lang="en", candidate="yes", question="why")
    long = Record(id="l", task="qa", lang="en", candidate="the answer " * 10, question="why")
    records = [short, long, short, long, long]
    assert count_truncated(encoder, records) == {"truncated": 3, "of": 5, "sampled": False}
    # the counter agrees with what the encoder does: an input is truncated iff its ids hit max_length
    assert [len(encoder.token_ids(r)) == 16 for r in records] == [False, True, False, True, True]
    sampled = count_truncated(encoder, records * 40, sample=50, seed=1)
    assert sampled["sampled"] and sampled["of"] == 200 and 80 <= sampled["truncated"] <= 160
    # training counts the dev set's truncation from the ids it encodes once for every dev evaluation
    from omnidistill.train.setup import input_counts

    counts = input_counts(encoder, records, encoder.encode_inputs(records[:4]), {"train": 0, "dev": 0}, seed=0)
    assert counts["truncated"] == {"train": 3, "dev": 2}


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("id,candidate,question,candidate", r"h\.csv:1: column 'candidate' appears twice"),
        ("id;candidate;question", r"h\.csv:1: the header is one column, 'id;candidate;question'.*looks ';'-separated"),
        ("id\tcandidate", r"h\.csv:1: .*'\\t'-separated"),
        ("id,candidate,labels", r"h\.csv:1: column 'labels' would hold objects.*a column of its own \(informativeness, clarity"),
    ],
)
def test_a_csv_header_that_would_misread_every_row_is_refused(tmp_path, header, message):
    """A column named twice kept the last column's value under that name, silently (a candidate scored
    on another text); a semicolon-separated file read as one field per row."""
    path = tmp_path / "h.csv"
    delimiter = ";" if ";" in header else "\t" if "\t" in header else ","
    path.write_text(
        header + "\n" + delimiter.join(["1", "first", "Where?", "second"][: header.count(delimiter) + 1]) + "\n", encoding="utf-8"
    )
    with pytest.raises(DataError, match=message):
        read_records([str(path)], require_labels=False, skip_invalid=True)


def test_the_index_pandas_writes_is_not_read_as_a_field(tmp_path, caplog):
    """``DataFrame.to_csv`` writes the index as a first column with no name (the rows were refused as
    ``unknown field(s) `` with an empty name), and ``to_parquet`` an index that is not a plain range as a
    column ``__index_level_0__``: neither is read, and the unnamed CSV column is warned about."""
    csv_path = tmp_path / "df.csv"
    csv_path.write_text(",id,candidate,clarity,\n7,a,c1,3,\n9,b,c2,4,x\n", encoding="utf-8")
    with caplog.at_level("WARNING"):
        records, skipped = read_records([str(csv_path)])
    assert [(r.id, r.candidate, r.labels[1]) for r in records] == [("a", "c1", 3.0), ("b", "c2", 4.0)] and skipped == 0
    assert "df.csv: header column(s) 1, 5 have no name and are not read (pandas' to_csv writes its index so" in caplog.text
    table = pa.Table.from_pylist([{"__index_level_0__": 7, "id": "a", "candidate": "c1", "clarity": 3.0}])
    pq.write_table(table, tmp_path / "df.parquet")
    assert read_records([str(tmp_path / "df.parquet")])[0] == records[:1]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('[{"id": "a", "candidate": "x"}, {"id": "b", "candidate": "y"}]\n', "a JSON array"),  # to_json(orient="records")
        ('[\n  {\n    "id": "a",\n    "candidate": "x"\n  }\n]\n', "a JSON array"),  # json.dump(rows, f, indent=2)
        ('\n{\n  "id": "a",\n  "candidate": "x"\n}\n', "one JSON object printed over several lines"),
    ],
)
def test_a_file_that_is_one_json_document_is_named_as_such(tmp_path, text, kind):
    """Read line by line, such a file was "line 1: invalid JSON" (or "got list"), and with
    --skip-invalid "no valid records"; it is the whole file's error, saying how to write JSON Lines."""
    path = tmp_path / "d.json"
    path.write_text(text, encoding="utf-8")
    for skip in (False, True):
        with pytest.raises(DataError, match=rf"d\.json: the file is {kind}, not JSON Lines: .*to_json\(orient=\"records\", lines=True\)"):
            read_records([str(path)], require_labels=False, skip_invalid=skip)
