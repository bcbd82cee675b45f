"""TFDS: the omnidistill_schema builder over the shipped sample, reading any dataset with a field map."""

from __future__ import annotations

import dataclasses
import gzip

import numpy as np
import pytest

from omnidistill.cli import main
from omnidistill.config import ConfigError, TfdsConfig
from omnidistill.data.schema import DataError
from omnidistill.data.sources import read_records
from tests.shared_runs import TRAINED_TINY

tfds = pytest.importorskip("tensorflow_datasets")


@pytest.fixture(scope="module")
def schema_dir(tmp_path_factory, sample_dir):
    from omnidistill.data.tfds_source import build_schema_dataset

    data_dir = tmp_path_factory.mktemp("tfds")
    build_schema_dataset(sample_dir, data_dir)
    return data_dir


def test_schema_builder_round_trips_the_sample(schema_dir, sample_dir):
    from omnidistill.data.tfds_source import TfdsRecords

    for split in ("train", "dev", "test"):
        expected = {r.id: r for r in read_records(sample_dir / f"{split}.jsonl")[0]}
        got = TfdsRecords(TfdsConfig(name="omnidistill_schema", data_dir=str(schema_dir)), split)
        assert len(got) == len(expected)
        for record in got[:50]:
            want = expected[record.id]
            assert (record.candidate, record.task, record.lang, record.source, record.question) == (
                want.candidate,
                want.task,
                want.lang,
                want.source,
                want.question,
            )
            assert record.labels == want.labels  # missing dimensions stay missing
            assert record.group_id == want.group_id
            got_dist = [None if row is None else np.asarray(row, np.float32) for row in record.label_dist]
            want_dist = [None if row is None else np.asarray(row, np.float32) for row in want.label_dist]
            assert len(got_dist) == len(want_dist) and all(
                (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))
                for a, b in zip(got_dist, want_dist, strict=True)
            )  # the teacher's distribution, with its missing dimensions, survives TFDS (float32)


@pytest.mark.parametrize("name", ["train.csv", "train.csv.gz"])
def test_schema_builder_reads_a_csv_split(tmp_path, name):
    """tfds-build takes a split as CSV, plain or compressed (as training reads them): texts, ids and
    labels, a missing dimension still missing; it was refused as a folder with no files."""
    from omnidistill.data.tfds_source import TfdsRecords

    manual = tmp_path / "manual"
    manual.mkdir()
    table = 'id,task,lang,source,candidate,informativeness,clarity\na,mt,de,"Guten Tag, Welt",Good day world,4,5\nb,mt,de,Hallo,Hello,2,\n'
    (manual / name).write_bytes(gzip.compress(table.encode()) if name.endswith(".gz") else table.encode())
    assert main(["tfds-build", "--manual-dir", str(manual), "--data-dir", str(tmp_path / "tfds")]) == 0
    got = TfdsRecords(TfdsConfig(name="omnidistill_schema", data_dir=str(tmp_path / "tfds")), "train")
    want = read_records(manual / name)[0]
    fields = lambda r: (r.id, r.source, r.candidate, r.labels)
    assert sorted(map(fields, got[: len(got)])) == list(map(fields, want))
    assert want[1].labels == (2.0, None, None, None)


def test_a_rebuild_from_changed_files_is_refused_then_overwrites(tmp_path, capsys):
    """TFDS keeps a prepared version whatever the manual files hold now: a rebuild after an edit kept
    the old examples without a word. The same files are a no-op; other files need --overwrite."""
    from omnidistill.data.tfds_source import TfdsRecords

    manual, data_dir = tmp_path / "manual", tmp_path / "tfds"
    manual.mkdir()
    (manual / "train.csv").write_text("id,task,lang,candidate,clarity\na,qa,en,Paris.,4\n")
    build = ["tfds-build", "--manual-dir", str(manual), "--data-dir", str(data_dir)]
    assert main(build) == 0 and "prepared omnidistill_schema in" in capsys.readouterr().out
    assert main(build) == 0 and "already prepared from these files" in capsys.readouterr().out
    (manual / "train.csv").write_text("id,task,lang,candidate,clarity\na,qa,en,Paris.,4\nb,qa,en,Lyon.,2\n")
    assert main(build) == 2
    err = capsys.readouterr().err
    assert "already holds omnidistill_schema, prepared from other files than" in err and "pass --overwrite to rebuild it" in err
    read = lambda: sorted(r.id for r in TfdsRecords(TfdsConfig(name="omnidistill_schema", data_dir=str(data_dir)), "train")[:10])
    assert read() == ["a"]
    assert main([*build, "--overwrite"]) == 0
    assert read() == ["a", "b"]


@pytest.mark.slow
def test_train_and_eval_from_tfds(schema_dir, repo_root, tmp_path):
    run = tmp_path / "run"
    args = [
        "train",
        str(repo_root / "configs" / "tiny.yaml"),
        f"train.output_dir={run}",
        *TRAINED_TINY,  # the session's shared run's shapes and schedule: its compiled steps serve this run too
        "data.train=[]",
        "data.dev=[]",
        "data.test=[]",
        "data.tfds.name=omnidistill_schema",
        f"data.tfds.data_dir={schema_dir}",
        f"model.tokenizer={repo_root}/assets/tiny-wordpiece",
    ]
    assert main(args) == 0
    assert (run / "best_metrics.json").exists()  # dev came from TFDS too
    assert main(["eval", str(run), "--bootstrap", "0", "--no-plots"]) == 0


def test_any_dataset_through_a_field_map(tmp_path):
    class ForeignMetricData(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {"doc": tfds.features.Text(), "hyp": tfds.features.Text(), "fluency": np.float32, "adequacy": np.float32}
                ),
            )

        def _split_generators(self, dl_manager):
            return {"validation": self._generate_examples()}

        def _generate_examples(self):
            for i in range(5):
                yield i, {"doc": f"Source {i}.", "hyp": f"Hypothesis {i}.", "fluency": 1.0 + i, "adequacy": 5.0 - i}

    ForeignMetricData(data_dir=str(tmp_path), file_format="array_record").download_and_prepare()
    from omnidistill.data.tfds_source import TfdsRecords

    cfg = TfdsConfig(
        name="foreign_metric_data",
        data_dir=str(tmp_path),
        splits={"dev": "validation"},
        fields={"source": "doc", "candidate": "hyp"},
        labels={"clarity": "fluency", "faithfulness": "adequacy"},
    )
    records = list(TfdsRecords(cfg, "dev"))  # TFDS stores examples in its own (shuffled) order
    assert sorted(r.candidate for r in records) == [f"Hypothesis {i}." for i in range(5)]
    two = next(r for r in records if r.candidate == "Hypothesis 2.")
    assert two.source == "Source 2." and two.labels == (None, 3.0, None, 3.0)
    assert records[0].id == "tfds:foreign_metric_data/validation[0]"
    np.testing.assert_equal(len(records), 5)
    # a mapping that would read nothing is refused by name, not left to drop a text or a label silently
    for key, value, message in [
        ("splits", {"valid": "validation"}, r"data\.tfds\.splits\.valid: not a split of omnidistill's \(one of: train, dev, test\)"),
        ("fields", {"sorce": "doc", "candidate": "hyp"}, r"data\.tfds\.fields\.sorce: not a record field \(did you mean source\?\)"),
        (
            "fields",
            {"source": "document", "candidate": "hyp"},
            r"fields\.source: tfds:foreign_metric_data has no feature 'document' \(one of: adequacy, doc, fluency, hyp\)",
        ),
        ("labels", {"clarty": "fluency"}, r"data\.tfds\.labels\.clarty: not a dimension \(did you mean clarity\?\)"),
        ("labels", {"clarity": "fluent"}, r"labels\.clarity: tfds:foreign_metric_data has no feature 'fluent' \(did you mean fluency\?\)"),
    ]:
        with pytest.raises(ConfigError, match=message):
            TfdsRecords(dataclasses.replace(cfg, **{key: value}), "dev")


def test_missing_dataset_is_a_clear_error(tmp_path):
    from omnidistill.data.tfds_source import TfdsRecords

    with pytest.raises(DataError, match="tfds:no_such_dataset/train: cannot open"):
        TfdsRecords(TfdsConfig(name="no_such_dataset", data_dir=str(tmp_path)), "train")


def test_tfds_build_names_what_is_wrong_with_its_folder_before_tfds_starts(tmp_path, sample_dir, capsys):
    """A missing or empty folder, two files for one split, and a repeated id (TFDS needs TensorFlow to
    report a repeated key) are CLI errors that name the folder or file, and nothing is written."""
    data_dir = tmp_path / "tfds"
    (tmp_path / "empty").mkdir()
    both = tmp_path / "both"
    both.mkdir()
    (both / "train.jsonl").write_text((sample_dir / "train.jsonl").read_text())
    (both / "train.parquet").write_bytes(b"")
    repeated = tmp_path / "repeated"
    repeated.mkdir()
    lines = (sample_dir / "dev.jsonl").read_text().splitlines()
    (repeated / "train.jsonl").write_text((sample_dir / "train.jsonl").read_text())
    (repeated / "dev.jsonl").write_text("\n".join([*lines, lines[2]]) + "\n")
    for manual, message in [
        (tmp_path / "missing", "missing: no such folder"),
        (tmp_path / "empty", "empty: no train/dev/test .jsonl, .csv or .parquet (the first two also .gz/.bz2/.xz) files"),
        (both, "train.jsonl and train.parquet: two files for one split"),
        (repeated, f"repeated/dev.jsonl:{len(lines) + 1} repeats {repeated / 'dev.jsonl'}:3"),
    ]:
        assert main(["tfds-build", "--manual-dir", str(manual), "--data-dir", str(data_dir)]) == 2
        assert message in capsys.readouterr().err
    assert not data_dir.exists()
