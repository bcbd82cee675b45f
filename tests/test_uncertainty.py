"""A student trained on soft labels reports an uncertainty per item and dimension, the same in the
Scorer, ``omnidistill score``, ``eval`` and the exported ``hf`` folder read by plain ``transformers``
(the oracle: its 4 x 5 logits' softmax, computed here with torch and scipy, not with our code)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from omnidistill.cli import main
from omnidistill.data.sources import read_records
from omnidistill.export.model_card import EXAMPLE
from omnidistill.scorer import Scorer
from tests.export.card import card_scores
from tests.shared_runs import build_once, shared_root, tiny_run_args

SOFT = (
    "train.max_steps=6",
    "train.log_every_steps=3",
    "data.length_buckets=[192]",
    "eval.length_step=192",
    "model.pooling=cls",
    "model.head=classification",
    "loss.name=distribution",
    "loss.distribution_mse_weight=0.5",
)


@pytest.fixture(scope="module")
def soft_run(tmp_path_factory, worker_id, repo_root):
    def build(run):
        assert main(tiny_run_args(repo_root, run, *SOFT)) == 0
        assert main(["export", str(run), str(run.parent / f"{run.name}-hf"), "--verify", "on"]) == 0

    run = build_once(shared_root(tmp_path_factory, worker_id), "soft-run", build)
    return run, run.parent / f"{run.name}-hf"


def transformers_levels(folder, texts, max_length):
    """[N, 4, 5] level probabilities as plain transformers computes them from the exported folder."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    enc = tok(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**enc).logits.view(len(texts), 4, 5).softmax(-1).double().numpy()


def std_of(probs):
    levels = np.arange(1, 6)
    mean = (probs * levels).sum(-1)
    return np.sqrt((probs * (levels - mean[..., None]) ** 2).sum(-1)), mean


def test_scorer_and_card_report_the_uncertainty_transformers_gives(soft_run, repo_root):
    run, folder = soft_run
    records, _ = read_records([str(repo_root / "data" / "sample" / "dev.jsonl")])
    records = records[:24]
    scorer = Scorer.load(run)
    texts = [scorer.encoder.text(r) for r in records]
    want_std, want_mean = std_of(transformers_levels(folder, texts, scorer.max_length))
    predicted = scorer.predict(records)
    np.testing.assert_allclose(predicted.uncertainty, want_std, atol=1e-5)
    np.testing.assert_allclose(predicted.scores, want_mean, atol=1e-5)
    assert float(want_std.min()) > 0.05  # a real spread, not a collapsed one-hot
    # the exported folder, loaded back by omnidistill, and every snippet of its model card agree
    item = Scorer.load(folder).score(candidates=[EXAMPLE["candidate"]], sources=[EXAMPLE["source"]])[0]
    ours = [item["uncertainty"][d] for d in ("informativeness", "clarity", "plausibility", "faithfulness")]
    for values in card_scores(folder, "uncertainty"):
        np.testing.assert_allclose(values, ours, atol=1e-5)
    result = scorer.score([r.candidate for r in records[:3]], questions=[r.question for r in records[:3]])
    assert result.uncertainty.shape == (3, 4) and "uncertainty" in result.to_list()[0]
    config = json.loads((folder / "config.json").read_text())
    assert len(config["id2label"]) == 20 and config["id2label"]["7"] == "clarity=3"


def test_omniscore_export_of_a_distribution_head_is_refused_by_name(soft_run, tmp_path, capsys):
    run, _ = soft_run
    assert main(["export", str(run), str(tmp_path / "o"), "--format", "omniscore"]) == 2
    err = capsys.readouterr().err
    assert "model.head='classification'" in err and "export it with --format hf" in err
    assert not (tmp_path / "o").exists()


def test_score_writes_the_uncertainty(soft_run, repo_root, tmp_path):
    run, folder = soft_run
    out = tmp_path / "scored.jsonl"
    dev = repo_root / "data" / "sample" / "dev.jsonl"
    assert main(["score", "--model", str(folder), "--input", str(dev), "--output", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    records, _ = read_records([str(dev)])
    expected = Scorer.load(run).predict(records).uncertainty
    got = np.array([[line["uncertainty"][d] for d in ("informativeness", "clarity", "plausibility", "faithfulness")] for line in lines])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert "label_dist" not in lines[0] and "labels" not in lines[0]


def test_score_as_labels_writes_a_training_file_of_the_models_distributions(soft_run, repo_root, tmp_path):
    """``score --as-labels``: the training reader takes the output, its ``label_dist`` is the exported
    model's softmax as plain transformers computes it and its ``labels`` that distribution's means; a
    new student trains on it with the distribution loss; a resume without the flag is refused."""
    _, folder = soft_run
    out = tmp_path / "pseudo.jsonl"
    dev = repo_root / "data" / "sample" / "dev.jsonl"
    assert main(["score", "--model", str(folder), "--input", str(dev), "--output", str(out), "--as-labels"]) == 0
    records, _ = read_records([str(dev)])
    pseudo, skipped = read_records([str(out)])  # the schema's checks: labels in [1, 5], distributions summing to 1
    assert skipped == 0 and [r.id for r in pseudo] == [r.id for r in records]
    assert all(a.candidate == b.candidate and a.question == b.question and a.task == b.task for a, b in zip(pseudo, records, strict=True))
    scorer = Scorer.load(folder)
    probs = transformers_levels(folder, [scorer.encoder.text(r) for r in records], scorer.max_length)
    np.testing.assert_allclose(np.array([r.label_dist for r in pseudo]), probs, atol=1e-5)
    np.testing.assert_allclose(np.array([r.labels for r in pseudo]), std_of(probs)[1], atol=1e-5)
    assert not pseudo[0].annotations  # the humans' ratings are not the model's labels
    # the consumer: a new student trains on the model's distributions
    student = tmp_path / "student"
    overrides = ("train.max_steps=2", "train.eval_every_steps=2", "data.length_buckets=[192]", "eval.length_step=192")
    args = tiny_run_args(repo_root, student, *SOFT[4:], *overrides)
    assert main([*args, f"data.train=[{out}]"]) == 0
    assert json.loads((student / "best_metrics.json").read_text())["step"] == 2
    out.write_text(out.read_text().splitlines(keepends=True)[0])  # as if cut after one line
    assert main(["score", "--model", str(folder), "--input", str(dev), "--output", str(out), "--resume"]) == 2


def test_eval_reports_nll_calibration_and_spearman_as_scipy_computes_them(soft_run, repo_root, tmp_path):
    from scipy import stats

    run, folder = soft_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    assert main(["eval", str(copy), "--bootstrap", "0"]) == 0
    report = json.loads((copy / "eval" / "test.json").read_text())["uncertainty"]
    assert (copy / "eval" / "test_calibration.png").stat().st_size > 0
    assert "Calibration" in (copy / "eval" / "test.md").read_text()
    # the oracle: plain transformers' probabilities; the test items' gold is their two annotators
    records, _ = read_records([str(repo_root / "data" / "sample" / "test.jsonl")])
    scorer = Scorer.load(folder)
    probs = transformers_levels(folder, [scorer.encoder.text(r) for r in records], scorer.max_length)
    std, mean = std_of(probs)
    nll, err, spread = [], [], []
    for i, r in enumerate(records):
        for d in range(4):
            ratings = [a[d] for a in r.annotations]
            nll.append(-np.mean([np.log(probs[i, d, int(a) - 1]) for a in ratings]))  # integer ratings: one-hot each
            err.append(abs(mean[i, d] - r.labels[d]))
            spread.append(std[i, d])
    assert report["nll"] == pytest.approx(np.mean(nll), rel=1e-4)
    assert report["spearman"] == pytest.approx(stats.spearmanr(spread, err).statistic, abs=1e-4)
    bins = report["calibration"]
    assert len(bins) == 10 and sum(b["cells"] for b in bins) == len(err)
    ordered = np.sort(spread)
    assert bins[0]["std"] == pytest.approx(ordered[: bins[0]["cells"]].mean(), abs=1e-5)
    # The most confident bin's Acc@±1 is one that some order of the cells tied at its edge gives: the
    # oracle's floats differ from ours by ~1e-7, so the order of cells whose std ties (a barely
    # trained model gives nearly one std per dimension) and an error of exactly 1 can differ.
    n0, s, e, tol = bins[0]["cells"], np.asarray(spread), np.asarray(err), 1e-5
    edge = ordered[n0 - 1]
    inside, tied = s < edge - tol, np.abs(s - edge) <= tol
    surely, maybe = e <= 1.0 - tol, e <= 1.0 + tol
    free = n0 - int(inside.sum())
    fewest = int(surely[inside].sum()) + max(0, free - int((~surely[tied]).sum()))
    most = int(maybe[inside].sum()) + min(free, int(maybe[tied].sum()))
    assert fewest - 1e-6 <= bins[0]["acc1"] * n0 <= most + 1e-6
