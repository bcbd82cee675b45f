"""Score API and CLI: run directories and exported folders, determinism, input handling."""

import json
import logging

import numpy as np
import pytest

from omnidistill import Scorer
from omnidistill.cli import main


@pytest.fixture(scope="module")
def run_and_export(tmp_path_factory, repo_root):
    root = tmp_path_factory.mktemp("scorer")
    args = [
        "train",
        str(repo_root / "configs" / "tiny.yaml"),
        f"train.output_dir={root / 'run'}",
        "train.max_steps=4",
        "train.eval_every_steps=4",
        f"data.train=[{repo_root}/data/sample/train.jsonl]",
        f"data.dev=[{repo_root}/data/sample/dev.jsonl]",
        f"data.test=[{repo_root}/data/sample/test.jsonl]",
        f"model.tokenizer={repo_root}/assets/tiny-wordpiece",
    ]
    assert main(args) == 0
    assert main(["export", str(root / "run"), str(root / "hf"), "--verify", "off"]) == 0
    return root / "run", root / "hf"


INPUTS = dict(
    candidates=["Paris is the capital of France.", "", "Der Mond umkreist die Erde.", "Bees pollinate crops " * 80],
    questions=["What is the capital of France?", None, None, "Why are bees important?"],
    sources=[None, None, "The Moon orbits the Earth.", None],
    tasks=["qa", "qa", "mt", "chat"],
    langs=["en", "en", "de", "en"],
)


def test_run_dir_and_exported_folder_score_the_same(run_and_export, caplog):
    run, hf = run_and_export
    a, b = Scorer.load(run), Scorer.load(hf)
    with caplog.at_level(logging.WARNING):
        sa = a.score(**INPUTS)
    sb = b.score(**INPUTS)
    assert sa[1] is None and sb[1] is None  # empty candidate: no score
    assert "empty" in caplog.text and "truncated" in caplog.text
    for x, y in zip(sa, sb, strict=True):
        if x is not None:
            assert set(x) == {"informativeness", "clarity", "plausibility", "faithfulness"}
            np.testing.assert_allclose(list(x.values()), list(y.values()), atol=1e-5)
            assert all(1 <= v <= 5 for v in x.values())


def test_scores_are_deterministic_and_order_independent(run_and_export):
    scorer = Scorer.load(run_and_export[0])
    first = scorer.score(**INPUTS)
    assert scorer.score(**INPUTS) == first  # bit for bit
    reordered = scorer.score(**{k: v[::-1] for k, v in INPUTS.items()})[::-1]
    for x, y in zip(first, reordered, strict=True):
        if x is not None:
            np.testing.assert_allclose(list(x.values()), list(y.values()), atol=1e-6)
    with pytest.raises(ValueError, match="sources has 1 items"):
        scorer.score(candidates=["a", "b"], sources=["x"])


def test_score_cli_jsonl_and_csv(run_and_export, repo_root, tmp_path, capsys):
    run, hf = run_and_export
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(hf), "--input", str(repo_root / "data" / "sample" / "test.jsonl"), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 300 and set(rows[0]["scores"]) == {"informativeness", "clarity", "plausibility", "faithfulness"}
    printed = capsys.readouterr().out
    assert "mean scores" in printed and "| lang=hi |" in printed and "| task=qa |" in printed
    csv = tmp_path / "in.csv"
    csv.write_text("id,task,lang,question,candidate\na,qa,en,What is it?,Paris.\nb,qa,en,,Berlin.\n")
    assert main(["score", "--model", str(run), "--input", str(csv), "--output", str(tmp_path / "csv.jsonl")]) == 0
    assert len((tmp_path / "csv.jsonl").read_text().splitlines()) == 2


def test_score_cli_malformed_input_names_the_line(run_and_export, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"candidate": "fine"}\n{"candidate": ""}\n')
    assert main(["score", "--model", str(run_and_export[0]), "--input", str(bad), "--output", str(tmp_path / "o.jsonl")]) == 2
    assert "bad.jsonl:2: missing or empty 'candidate'" in capsys.readouterr().err


def test_one_compiled_function_per_length_bucket(run_and_export, repo_root):
    """Many batches of varied lengths compile once per bucket they use, never once per batch."""
    from omnidistill.data.sources import read_records

    records = read_records(repo_root / "data" / "sample" / "test.jsonl")[0]
    scorer = Scorer.load(run_and_export[0], batch_size=8)
    texts = [r.candidate for r in records]
    scorer.score(candidates=texts, sources=[r.source for r in records])
    batches = -(-len(texts) // 8)
    compiled = scorer._predict._cache_size()
    assert 1 <= compiled <= len(scorer.buckets) < batches
    scorer.score(candidates=texts[::-1], sources=[r.source for r in records][::-1])
    assert scorer._predict._cache_size() == compiled  # a second call reuses them
