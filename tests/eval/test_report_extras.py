"""Agreement, cross-lingual consistency and judge comparison sections of the report."""

import json
import re

import numpy as np
import pytest

from omnidistill.data.schema import DataError, Record
from omnidistill.eval.compare import compare_judges, comparison_markdown, load_predictions
from omnidistill.eval.consistency import cross_lingual_consistency
from omnidistill.eval.report import build_report, report_markdown


def rec(i, lang, labels, annotations=(), group=None):
    return Record(id=str(i), task="qa", lang=lang, candidate="x", labels=labels, annotations=annotations, group_id=group)


def test_agreement_section_compares_student_with_annotators():
    anns = [((4.0, 4.0, 4.0, 4.0), (4.0, 5.0, 4.0, 4.0)), ((2.0, 2.0, 1.0, 2.0), (2.0, 2.0, 2.0, 2.0))] * 5
    recs = [rec(i, "en", tuple(np.mean(a, axis=0)), a) for i, a in enumerate(anns)]
    pred = np.array([r.labels for r in recs])
    rep = build_report(recs, pred, bootstrap_samples=50)
    ag = rep["agreement"]
    assert ag["annotators"] == 2 and ag["items"] == 10
    assert ag["student_vs_annotator"]["mae"] == pytest.approx(0.125)  # student = annotator mean
    assert {p["a"] for p in ag["pairs"]} | {p["b"] for p in ag["pairs"]} == {"annotator_1", "annotator_2", "student"}
    assert set(rep["ci95"]) == {"mae", "rmse", "pearson", "acc1", "mae_dims"}
    assert "Agreement with the human annotators" in report_markdown(rep)


def test_cross_lingual_consistency_kappa_and_deviation():
    recs, preds = [], []
    for g in range(6):
        for lang, shift in (("en", 0.0), ("de", 0.0), ("hi", 1.0)):
            recs.append(rec(f"{g}{lang}", lang, (3.0,) * 4, group=f"g{g}"))
            preds.append([1.0 + g % 4 + shift] * 4)
    out = cross_lingual_consistency(recs, np.array(preds))
    assert out["complete_groups"] == 6 and out["languages"] == ["de", "en", "hi"]
    assert out["deviation_from_reference"]["de"]["mean_abs"] == 0.0
    assert out["deviation_from_reference"]["hi"]["mean_abs"] == pytest.approx(1.0)
    assert -1 <= out["fleiss_kappa"]["clarity"] < 1
    assert cross_lingual_consistency([rec(1, "en", (3.0,) * 4)], np.ones((1, 4))) is None


def test_judge_comparison_from_files(tmp_path):
    recs = [rec(i, "en" if i % 2 else "hi", (float(1 + i % 5),) * 4) for i in range(10)]
    judge = tmp_path / "judge.jsonl"
    judge.write_text("\n".join(json.dumps({"id": r.id, "labels": {"clarity": 3, "faithfulness": r.labels[0]}}) for r in recs))
    pred = load_predictions(judge, recs)
    assert np.isnan(pred[:, 0]).all() and (pred[:, 3] == [r.labels[0] for r in recs]).all()
    cmp = compare_judges(recs, {"student": np.full((10, 4), 3.0), "llm": pred})
    assert cmp["llm"]["overall"]["dimensions"]["faithfulness"]["mae"] == 0.0
    assert cmp["llm"]["overall"]["n"] == 20  # only the two dimensions it scored
    assert "| MAE |" in comparison_markdown(cmp)
    (tmp_path / "bad.jsonl").write_text('{"id": "0"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:1"):
        load_predictions(tmp_path / "bad.jsonl", recs)
    # a null id is no id (it used to join an item whose id was the text "None")
    (tmp_path / "bad.jsonl").write_text('{"id": null, "labels": {"clarity": 3}}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:1: expected an object with 'id'"):
        load_predictions(tmp_path / "bad.jsonl", [rec("None", "en", (3.0,) * 4)])


def test_a_judge_file_is_read_as_data_files_are(tmp_path):
    """``omnidistill label`` writes texts unescaped (``ensure_ascii=False``): a U+2028 in one split its
    line for ``--compare``, which then stopped with "invalid JSON". CSV label columns read too."""
    recs = [rec(i, "en", (3.0,) * 4) for i in range(2)]
    judge = tmp_path / "labelled.jsonl"
    rows = [{"id": "0", "candidate": "one\u2028two", "labels": {"clarity": 2}}, {"id": "1", "candidate": "x", "labels": {"clarity": 4}}]
    judge.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert load_predictions(judge, recs)[:, 1].tolist() == [2.0, 4.0]
    table = tmp_path / "judge.csv"
    table.write_text("id,clarity,faithfulness\n1,5,\n0,1,2\n", encoding="utf-8")
    pred = load_predictions(table, recs)
    assert pred[:, 1].tolist() == [1.0, 5.0] and pred[0, 3] == 2.0 and np.isnan(pred[1, 3])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"4"', "labels.plausibility must be a number in [1, 5], got '4'"),
        ("true", "labels.plausibility must be a number in [1, 5], got True"),
        ("7", "labels.plausibility=7 is outside [1, 5]"),
        ("-3", "labels.plausibility=-3 is outside [1, 5]"),
        ("NaN", "labels.plausibility must be a number in [1, 5], got nan"),
    ],
)
def test_judge_labels_are_validated_naming_file_line_and_field(tmp_path, value, message):
    recs = [rec(i, "en", (3.0,) * 4) for i in range(3)]
    path = tmp_path / "judge.jsonl"
    lines = [json.dumps({"id": str(i), "labels": {"clarity": 3}}) for i in range(3)]
    lines[1] = '{"id": "1", "labels": {"clarity": 3, "plausibility": ' + value + "}}"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=re.escape(f"judge.jsonl:2: {message}")):
        load_predictions(path, recs)


def test_teacher_vs_human_rwg_and_unscored_cells():
    recs = [rec(i, "en", (4.0, 4.0, 4.0, 2.0)) for i in range(4)]
    judge = np.array([[4.0, 5.0, 4.0, np.nan]] * 4)  # agrees on 2 dimensions, off by 1 on clarity, no faithfulness
    cmp = compare_judges(recs, {"teacher": judge})["teacher"]
    assert cmp["unscored_cells"] == 4
    # per item: variances (ddof 1) 0, 0.5, 0 over the three scored dimensions; max-disagreement null 4
    assert cmp["rwg_vs_human"]["rwg_star"] == pytest.approx(1 - (0.5 / 3) / 4)
    assert cmp["rwg_vs_human_by_task"]["qa"]["clarity"] == pytest.approx(1 - 0.5 / 4)


def test_mean_baseline_is_the_training_mean_for_every_item(sample_dir):
    """The baseline predicts each dimension's training-label mean; checked against plain Python on the files."""
    import json

    from omnidistill.data.sources import read_records
    from omnidistill.eval.report import mean_baseline, train_mean_labels

    rows = [json.loads(line) for line in (sample_dir / "train.jsonl").read_text().splitlines()]
    dims = ("informativeness", "clarity", "plausibility", "faithfulness")
    expected = [
        sum(r["labels"][d] for r in rows if r["labels"].get(d) is not None) / sum(r["labels"].get(d) is not None for r in rows)
        for d in dims
    ]
    means = train_mean_labels(read_records(sample_dir / "train.jsonl")[0])
    assert means.tolist() == pytest.approx(expected, abs=1e-5)

    dev = [json.loads(line) for line in (sample_dir / "dev.jsonl").read_text().splitlines()]
    per_dim = [
        sum(abs(r["labels"][d] - m) for r in dev if r["labels"].get(d) is not None) / sum(r["labels"].get(d) is not None for r in dev)
        for d, m in zip(dims, expected, strict=True)
    ]
    base = mean_baseline(read_records(sample_dir / "dev.jsonl")[0], means, model_mae_dims=0.5)
    assert base["mae_dims"] == pytest.approx(sum(per_dim) / 4, abs=1e-5)
    assert base["model_improvement"] == pytest.approx((base["mae_dims"] - 0.5) / base["mae_dims"])


def test_a_cross_lingual_section_with_too_little_data_says_so_in_one_sentence():
    """Two parallel pairs (as on the sample) leave every κ undefined: one sentence, no rows of dashes;
    with enough parallel items the table is back."""
    recs, preds = [], []
    for g in range(2):
        for lang in ("en", "de"):
            recs.append(rec(f"{g}{lang}", lang, (3.0,) * 4, group=f"g{g}"))
            preds.append([3.0] * 4)
    recs += [rec("solo", "hi", (3.0,) * 4)]
    preds.append([2.0] * 4)
    text = report_markdown(build_report(recs, np.array(preds)))
    section = text[text.index("### Cross-lingual consistency") :]
    assert "Too little parallel data for these statistics: 2 parallel item(s), at most 2 parallel item(s) per language" in section
    assert "| de |" not in section and "–" not in section.split("\n\n")[1]
    recs, preds = [], []
    for g in range(6):
        for lang, shift in (("en", 0.0), ("de", 1.0)):
            recs.append(rec(f"{g}{lang}", lang, (3.0,) * 4, group=f"g{g}"))
            preds.append([1.0 + g % 4 + shift] * 4)
    text = report_markdown(build_report(recs, np.array(preds)))
    assert "| de | 6 |" in text and "Too little" not in text


def test_repeated_ids_in_a_prediction_file_are_refused_with_both_lines(tmp_path, monkeypatch):
    recs = [rec(i, "en", (3.0,) * 4) for i in range(3)]
    judge = tmp_path / "judge.jsonl"
    judge.write_text("\n".join(json.dumps({"id": i, "labels": {"clarity": 3}}) for i in ("0", "1", "2", "1")))
    with pytest.raises(DataError, match=r"judge\.jsonl:4: id '1' repeats line 2"):
        load_predictions(judge, recs)
    monkeypatch.chdir(tmp_path)  # "./judge.jsonl" is read as "judge.jsonl": the line is still named
    with pytest.raises(DataError, match=r"judge\.jsonl:4: id '1' repeats line 2"):
        load_predictions("./judge.jsonl", recs)
