"""Random malformed JSONL and CSV never crash the reader with an unexplained exception."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnidistill.data.schema import DataError
from omnidistill.data.sources import read_records

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=6
)
fields = st.sampled_from(["id", "task", "lang", "question", "source", "reference", "candidate", "labels", "annotations", "group_id", "x"])
label_objs = st.dictionaries(st.sampled_from(["informativeness", "clarity", "plausibility", "faithfulness", "fluency"]), values, max_size=4)
records = st.dictionaries(fields, st.one_of(values, label_objs), max_size=8)
lines = st.one_of(records.map(json.dumps), values.map(json.dumps), st.text(max_size=40), st.binary(max_size=40))


def reads_or_names_the_file(path) -> None:
    """Records with a candidate each, or a DataError whose message starts with the file, with and
    without skipping invalid records."""
    for skip in (False, True):
        try:
            records_, _skipped = read_records(path, skip_invalid=skip)
        except DataError as err:
            assert str(err).startswith(str(path))
        else:
            assert all(r.candidate.strip() for r in records_)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(lines, min_size=1, max_size=6))
def test_reader_raises_only_data_errors(tmp_path, batch):
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join(x if isinstance(x, bytes) else x.encode("utf-8", "surrogatepass") for x in batch))
    reads_or_names_the_file(path)


csv_cells = st.one_of(st.text(alphabet='ab ,"\r\n\x00é', max_size=8), st.sampled_from(["3", "9", "x", '"', '""', '"a"b']))
csv_lines = st.one_of(st.lists(csv_cells, max_size=4).map(",".join), st.binary(max_size=12))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(csv_lines, min_size=1, max_size=6))
def test_csv_reader_raises_only_data_errors(tmp_path, batch):
    """Random CSV rows (stray quotes, line breaks, NULs, bytes that are not UTF-8) under a good header."""
    path = tmp_path / "fuzz.csv"
    body = b"\n".join(x if isinstance(x, bytes) else x.encode("utf-8") for x in batch)
    path.write_bytes(b"id,candidate,clarity\n" + body)
    reads_or_names_the_file(path)
