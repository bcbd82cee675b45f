"""Reading and validating JSONL / Parquet: malformed input names the file and line."""

import csv
import gzip
import importlib
import json
import tracemalloc

import pytest

from omnidistill.data.schema import DataError
from omnidistill.data.sources import RecordStream, read_records, refuse_duplicate_ids

GOOD = {"id": "a", "task": "qa", "lang": "en", "question": "Q?", "candidate": "A.", "labels": {"informativeness": 4, "clarity": 5}}


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_sample_dataset_is_valid(sample_dir):
    for split in ("train", "dev", "test"):
        records, skipped = read_records(sample_dir / f"{split}.jsonl")
        assert records and skipped == 0
        assert {r.task for r in records} == {"qa", "mt", "summarization", "headline", "paraphrase", "chat"}
        assert len({r.lang for r in records}) == 6


def test_missing_dimension_is_none_not_zero(tmp_path):
    path = write_lines(tmp_path / "d.jsonl", [json.dumps(GOOD)])
    (record,), _ = read_records(path)
    assert record.labels == (4.0, 5.0, None, None)


@pytest.mark.parametrize(
    "bad,pattern",
    [
        ("{not json", r"d\.jsonl:2: invalid JSON"),
        (json.dumps({**GOOD, "labels": {"clarity": 7}}), r"d\.jsonl:2: labels\.clarity=7 is outside \[1, 5\]"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "candidate"}), r"d\.jsonl:2: missing or empty 'candidate'"),
        (json.dumps({**GOOD, "candidate": 5}), r"d\.jsonl:2: candidate must be a string, got int"),
        (json.dumps({**GOOD, "candidate": ["a", "b"]}), r"d\.jsonl:2: candidate must be a string, got list"),
        (
            json.dumps({**GOOD, "labels": {"fluency": 3}}),
            r"d\.jsonl:2: labels has unknown dimension\(s\) fluency "
            r"\(the dimensions: informativeness, clarity, plausibility, faithfulness\)",
        ),
        (json.dumps({**GOOD, "labels": {"clarity": "high"}}), r"d\.jsonl:2: labels\.clarity must be a number"),
        (json.dumps({**GOOD, "labels": None}), r"d\.jsonl:2: no labels \(need at least one of [a-z, ]+\)$"),
        (  # the shipped test set's annotators, without the mean it also carries
            json.dumps({**GOOD, "labels": None, "annotations": [{"clarity": 4}, {"clarity": 5}]}),
            r"d\.jsonl:2: no labels .*; annotations and label_dist are not read as labels: set labels too \(e\.g\. the annotators' mean\)$",
        ),
        (json.dumps([1, 2]), r"d\.jsonl:2: expected a JSON object"),
        (json.dumps({**GOOD, "candidat": "x"}), r"d\.jsonl:2: unknown field\(s\) candidat \(the schema's candidate\?\)$"),
        (  # COMET's names
            json.dumps({"src": "Der Mond.", "mt": "The Moon.", "labels": GOOD["labels"]}),
            r"d\.jsonl:2: unknown field\(s\) mt \(the schema's candidate\?\), src \(the schema's source\?\)$",
        ),
        (  # nothing close: no guess, but why it is refused and what to do (a column of the user's own)
            json.dumps({**GOOD, "extra_note": "x"}),
            r"d\.jsonl:2: unknown field\(s\) extra_note; only the schema's fields are read, .*: name yours in data\.keep_fields .* "
            r"or --keep-fields \(score, eval, label\)",
        ),
        (  # a label dimension as a field of its own, misspelt
            json.dumps({"candidate": "x", "clarty": 4}),
            r"d\.jsonl:2: unknown field\(s\) clarty \(the schema's clarity\?\)$",
        ),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad, pattern):
    path = write_lines(tmp_path / "d.jsonl", [json.dumps(GOOD), bad])
    with pytest.raises(DataError, match=pattern):
        read_records(path)


def test_skip_invalid_skips_and_counts(tmp_path):
    lines = [json.dumps(GOOD), "{oops", json.dumps({**GOOD, "labels": {"clarity": 0}}), json.dumps(GOOD)]
    records, skipped = read_records(write_lines(tmp_path / "d.jsonl", lines), skip_invalid=True)
    assert len(records) == 2 and skipped == 2


def test_bad_utf8_and_empty_and_missing_files(tmp_path):
    path = tmp_path / "enc.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n\xff\xfe\n")
    with pytest.raises(DataError, match=r"enc\.jsonl:2: not valid UTF-8"):
        read_records(path)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match=r"empty\.jsonl: no records"):
        read_records(tmp_path / "empty.jsonl")
    with pytest.raises(DataError, match=r"nope\.jsonl: file not found"):
        read_records(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match=r"unsupported file type"):
        read_records(write_lines(tmp_path / "d.txt", ["a,b"]))


def test_a_null_or_blank_id_defaults_to_the_location_and_an_id_of_another_type_is_an_error(tmp_path):
    """``"id": null`` gave the id "None", which every such record shared: ``score --resume`` refused
    the input as repeating ids, and reports named items "None". A list id became its repr."""
    rows = [{**GOOD, "id": None}, {**GOOD, "id": " "}, {**GOOD, "id": 7}, {**GOOD, "id": "x", "group_id": 3}]
    path = write_lines(tmp_path / "d.jsonl", [json.dumps(row) for row in rows])
    records, _ = read_records(path)
    assert [(r.id, r.group_id) for r in records] == [(f"{path}:1", None), (f"{path}:2", None), ("7", None), ("x", "3")]
    refuse_duplicate_ids([path], "joined by id")  # two records without an id do not repeat one
    for field, value, kind in [("id", 1.5, "float"), ("id", ["a"], "list"), ("id", True, "bool"), ("group_id", {"g": 1}, "dict")]:
        write_lines(path, [json.dumps({**GOOD, field: value})])
        with pytest.raises(DataError, match=rf"d\.jsonl:1: {field} must be a string or an integer, got {kind}"):
            read_records(path)


def test_a_lone_surrogate_is_the_records_error_and_a_pair_is_its_character(tmp_path):
    r"""JSON may escape half of a UTF-16 pair (``\ud83d``, text cut inside an emoji): the tokenizer then
    failed with ``TextEncodeInput must be Union[...]``, a TypeError, and the traceback stopped ``score``."""
    lines = ['{"id": "a", "candidate": "cut \\ud83d", "labels": {"clarity": 3}}']
    lines.append('{"id": "b", "candidate": "\\ud83d\\ude00", "labels": {"clarity": 3}}')
    lines.append('{"id": "c", "candidate": "x", "context": [{"role": "user", "content": "\\udc00"}], "labels": {"clarity": 3}}')
    path = write_lines(tmp_path / "d.jsonl", lines)
    with pytest.raises(DataError, match=r"d\.jsonl:1: candidate holds a lone surrogate \(\\ud83d\)"):
        read_records(path)
    records, skipped = read_records(path, skip_invalid=True)
    assert skipped == 2 and [(r.id, r.candidate) for r in records] == [("b", "\N{GRINNING FACE}")]
    write_lines(path, lines[2:])
    with pytest.raises(DataError, match=r"d\.jsonl:1: context\[0\]\.content holds a lone surrogate \(\\udc00\)"):
        read_records(path)


def test_parquet_rows_are_read_and_validated_and_labels_may_be_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [GOOD, {**GOOD, "id": "b", "labels": {"informativeness": 9.0, "clarity": 2.0}}]
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, tmp_path / "d.parquet")
    with pytest.raises(DataError, match=r"d\.parquet:row 1: labels\.informativeness=9\.0 is outside"):
        read_records(tmp_path / "d.parquet")
    records, skipped = read_records(tmp_path / "d.parquet", skip_invalid=True)
    assert [r.id for r in records] == ["a"] and skipped == 1
    # label dimensions as columns, as pandas' to_parquet writes a DataFrame (they were "unknown field(s)
    # clarity, ..."): the same records as a labels struct; a null cell is a missing label
    flat = [{**{k: v for k, v in row.items() if k != "labels"}, **row["labels"]} for row in rows[:1]]
    flat.append({"id": "c", "candidate": "x", "informativeness": 2, "clarity": None})
    pq.write_table(pa.Table.from_pylist(flat), tmp_path / "flat.parquet")
    records, _ = read_records(tmp_path / "flat.parquet")
    assert records[0] == read_records(tmp_path / "d.parquet", skip_invalid=True)[0][0]
    assert records[1].labels == (2.0, None, None, None)  # in dimension order
    # the same in JSONL (pandas' to_json(orient="records", lines=True)), where null is a missing label
    write_lines(tmp_path / "flat.jsonl", [json.dumps(row) for row in flat])
    assert read_records(tmp_path / "flat.jsonl")[0] == records
    both = [{**rows[0], "clarity": 3.0}]
    pq.write_table(pa.Table.from_pylist(both), tmp_path / "both.parquet")
    with pytest.raises(DataError, match=r"both\.parquet:row 0: labels given twice, in labels and in the field\(s\) clarity"):
        read_records(tmp_path / "both.parquet")
    write_lines(tmp_path / "both.jsonl", [json.dumps(row) for row in both])
    with pytest.raises(DataError, match=r"both\.jsonl:1: labels given twice"):
        read_records(tmp_path / "both.jsonl")


@pytest.mark.parametrize("kind", ["jsonl", "csv", "csv.gz"])
def test_a_record_stream_reads_a_file_without_holding_it(tmp_path, kind):
    """RecordStream (the token cache's and ``score``'s input) reads line by line: the memory it
    allocates while passing over a 6 MB file stays far below the file's size (reading it whole, or
    splitting it into lines, did not; a CSV was read whole until this test)."""
    filler = "x" * 300
    rows = [{**GOOD, "id": f"r{i}", "question": f"{filler} {i}?"} for i in range(20_000)]
    if kind == "jsonl":
        path = write_lines(tmp_path / "big.jsonl", [json.dumps(row) for row in rows])
    else:
        path = tmp_path / "big.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, ["id", "task", "lang", "question", "candidate", "informativeness", "clarity"])
            writer.writeheader()
            writer.writerows({**{k: v for k, v in row.items() if k != "labels"}, **row["labels"]} for row in rows)
    size = path.stat().st_size  # a compressed file is held against its plain size: decompressed as it is read
    if kind == "csv.gz":
        path = path.with_name("big.csv.gz")
        path.write_bytes(gzip.compress((tmp_path / "big.csv").read_bytes()))
    stream = RecordStream(path)
    tracemalloc.start()
    try:
        count = sum(1 for _ in stream)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 20_000 and stream.skipped == 0
    assert peak < size / 10, (peak, size)


@pytest.mark.parametrize("compression", ["gzip", "bz2", "lzma"])
def test_compressed_files_read_as_the_plain_files(tmp_path, compression):
    module = importlib.import_module(compression)
    suffix = {"gzip": ".gz", "bz2": ".bz2", "lzma": ".xz"}[compression]
    plain = write_lines(tmp_path / "d.jsonl", [json.dumps({**GOOD, "id": f"r{i}"}) for i in range(50)])
    table = tmp_path / "d.csv"
    table.write_text('id,candidate,clarity\n1,one,4\n2,"two\nlines",3\n', encoding="utf-8")
    for path in (plain, table):
        packed = path.with_name(path.name + suffix)
        packed.write_bytes(module.compress(path.read_bytes()))
        assert read_records(packed) == read_records(path)
    cut = tmp_path / f"cut.jsonl{suffix}"
    cut.write_bytes(module.compress(plain.read_bytes())[:-20])
    with pytest.raises(DataError, match=rf"cut\.jsonl\{suffix}:\d+: cannot read the \{suffix} data"):
        read_records(cut)


def test_a_compressed_name_on_a_plain_file_or_a_parquet_file_is_refused(tmp_path):
    fake = write_lines(tmp_path / "d.jsonl.gz", [json.dumps(GOOD)])
    with pytest.raises(DataError, match=r"d\.jsonl\.gz:1: cannot read the \.gz data: Not a gzipped file"):
        read_records(fake)
    (tmp_path / "p.parquet.gz").write_bytes(gzip.compress(b"PAR1"))
    with pytest.raises(DataError, match=r"p\.parquet\.gz: unsupported file type '\.parquet\.gz'"):
        read_records(tmp_path / "p.parquet.gz")


def test_a_record_stream_counts_skipped_records_each_pass(tmp_path):
    path = write_lines(tmp_path / "d.jsonl", [json.dumps(GOOD), "{not json", json.dumps({**GOOD, "id": "b"})])
    stream = RecordStream(path, skip_invalid=True)
    assert [r.id for r in stream] == ["a", "b"] and stream.skipped == 1
    assert [r.id for r in stream] == ["a", "b"] and stream.skipped == 1  # re-iterable: the cache reads it twice
    with pytest.raises(DataError, match=r"d\.jsonl:2: invalid JSON"):
        list(RecordStream(path))


def test_repeated_training_ids_are_counted_and_warned_about_once(tmp_path, caplog):
    """Ids only label training items: a repeat is kept, counted and warned about (once per stream)."""
    rows = [{"id": i, "task": "qa", "lang": "en", "candidate": f"c{n}", "labels": {"clarity": 3}} for n, i in enumerate("abcbad")]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    stream = RecordStream(path)
    with caplog.at_level("WARNING"):
        assert len(list(stream)) == 6 and len(list(stream)) == 6
    assert stream.duplicate_ids == 2
    assert [r.getMessage() for r in caplog.records if "repeat" in r.getMessage()] == [
        f"2 record(s) of {path} repeat an earlier record's id"
    ]
