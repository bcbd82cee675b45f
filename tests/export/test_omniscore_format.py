"""``export --format omniscore``: the real ``omniscore`` package loads the folder and scores like omnidistill,
for every family, pooling and tokenizer kind; the model card's snippets agree; the folder imports back."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import numpy as np
import pytest

from omnidistill.cli import main
from omnidistill.config import DataConfig, PromptLayout
from omnidistill.data.sources import read_records
from omnidistill.export.hf_export import export_run
from omnidistill.export.hf_import import import_hf
from omnidistill.export.model_card import EXAMPLE
from omnidistill.scorer import Scorer
from tests.export.card import card_scores
from tests.export.tiny_runs import BACKBONES, RELEASED, make_run
from tests.models.test_qwen3_parity import TINY as QWEN3

torch = pytest.importorskip("torch")
# the package is imported by the test that uses it, not here: its model code takes about 1.6 s to import,
# which every parallel worker paid while collecting the suite
if importlib.util.find_spec("omniscore") is None:
    pytest.skip("the omniscore package is not installed", allow_module_level=True)

CASES = [
    ("bert", "cls_raw", DataConfig(input_format="sep", max_length=128)),
    ("bert", "mean", DataConfig(input_format="omniscore", max_length=128, truncation="right")),
    ("modernbert", "cls_raw", DataConfig(input_format="omniscore", max_length=128)),
    ("modernbert", "mean", DataConfig(input_format="sep", max_length=128, truncation="right")),
    ("deberta_v2", "cls_raw", DataConfig(input_format="omniscore", layout=RELEASED, max_length=128, truncation="right")),
    ("deberta_v2", "mean", DataConfig(input_format="sep", max_length=128)),
    ("xlm_roberta", "cls_raw", DataConfig(input_format="omniscore", max_length=126, truncation="right")),
    ("bert", "last_token", DataConfig(input_format="sep", max_length=128, truncation="right")),
    ("qwen3", "last_token", DataConfig(input_format="omniscore", max_length=128, truncation="right")),
    ("qwen2", "mean", DataConfig(input_format="omniscore", max_length=128, truncation="right")),
    ("gemma3", "mean", DataConfig(input_format="omniscore", max_length=128, truncation="right")),
]


@pytest.mark.parametrize(("family", "pooling", "data"), CASES, ids=[f"{f}-{p}-{d.input_format}-{d.truncation}" for f, p, d in CASES])
def test_omniscore_package_scores_the_export_like_omnidistill(tmp_path, tokenizer_dirs, sample_dir, family, pooling, data):
    data = dataclasses.replace(data, test=[str(sample_dir / "test.jsonl")])
    run = make_run(tmp_path / "run", family, pooling, tokenizer_dirs[BACKBONES[family][2]], data)
    summary = export_run(run, tmp_path / "os", verify=True)  # auto picks omniscore for these heads
    assert summary["format"] == "omniscore" and summary["verified_with"] == "omniscore.OmniScorer"
    assert summary["max_abs_diff"] < 1e-4

    # the package's own loader finds every tensor it builds
    import omniscore

    _, info = omniscore.OmniScoreModel.from_pretrained(tmp_path / "os", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]

    # the package's scorer on records the verification did not see, within max_length or (under right) beyond
    records = read_records(sample_dir / "dev.jsonl")[0][:24]
    scorer = Scorer.load(run)
    ours = scorer.score_records(records)
    layout = scorer.encoder.layout
    package = omniscore.OmniScorer(str(tmp_path / "os"), device="cpu", max_length=data.max_length)
    from omnidistill.data.input_text import clean, source_text

    theirs = package.score(
        [r.candidate for r in records],
        sources=[source_text(r, layout.separator) or None for r in records],
        references=[clean(r.reference) or None for r in records],
        tasks=[r.task for r in records] if layout.task_line else None,
    ).scores
    within = np.array([n <= data.max_length or data.truncation == "right" for n in scorer.encoder.full_lengths(records)])
    assert within.sum() >= 6
    np.testing.assert_allclose(theirs[within], ours[within], atol=1e-4)

    # the folder imports back as a run that scores the same and keeps the input settings
    assert import_hf(str(tmp_path / "os"), tmp_path / "back")["format"] == "omniscore"
    back = Scorer.load(tmp_path / "back")
    assert (back.data.input_format, back.data.truncation, back.data.max_length, back.data.layout) == (
        data.input_format,
        data.truncation,
        data.max_length,
        data.layout,
    )
    np.testing.assert_allclose(back.score_records(records), ours, atol=1e-5)


CARD_CASES = [(family, "cls_raw") for family in sorted(BACKBONES) if family not in ("qwen2", "qwen3", "gemma3")] + [
    ("bert", "mean"),
    ("bert", "last_token"),
    ("qwen3", "last_token"),
]


@pytest.mark.parametrize(("family", "pooling"), CARD_CASES)
def test_every_model_card_snippet_prints_the_same_scores(tmp_path, tokenizer_dirs, family, pooling):
    data = DataConfig(input_format="omniscore", layout=RELEASED if family == "deberta_v2" else PromptLayout(), max_length=120)
    run = make_run(tmp_path / "run", family, pooling, tokenizer_dirs[BACKBONES[family][2]], data, seed=3)
    export_run(run, tmp_path / "os", verify=False)
    task = ["qa"] if family == "deberta_v2" else None
    ours = list(Scorer.load(run).score(candidates=[EXAMPLE["candidate"]], sources=[EXAMPLE["source"]], tasks=task)[0].values())
    outputs = card_scores(tmp_path / "os")
    assert len(outputs) == 3  # omniscore package, plain transformers, omnidistill
    for scores in outputs:
        np.testing.assert_allclose(scores, ours, atol=1e-4)
    config = json.loads((tmp_path / "os" / "config.json").read_text())
    assert config["omnidistill"]["input_format"] == "omniscore" and config["omnidistill"]["truncation"] == "context_first"


def test_heads_are_refused_for_the_format_that_cannot_hold_them(tmp_path, tokenizer_dirs, capsys):
    raw = make_run(tmp_path / "raw", "bert", "cls_raw", tokenizer_dirs["wordpiece"], DataConfig(max_length=128))
    assert main(["export", str(raw), str(tmp_path / "out"), "--format", "hf"]) == 2
    assert "--format omniscore" in capsys.readouterr().err
    pooled = make_run(tmp_path / "pooled", "bert", "cls", tokenizer_dirs["wordpiece"], DataConfig(max_length=128))
    assert main(["export", str(pooled), str(tmp_path / "out"), "--format", "omniscore"]) == 2
    assert "--format hf" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_training_can_start_from_an_imported_run(tmp_path, tokenizer_dirs, sample_dir, repo_root):
    """``model.init_from: runs/NAME`` starts from every parameter of that run (encoder and heads):
    with learning rates of 0 the new run scores exactly as the source run."""
    import yaml

    source = make_run(tmp_path / "source", "bert", "cls_raw", tokenizer_dirs["wordpiece"], DataConfig(max_length=128), seed=5)
    export_run(source, tmp_path / "os", verify=False)
    import_hf(str(tmp_path / "os"), tmp_path / "imported")
    config = {
        "model": {"family": "bert", "init_from": str(tmp_path / "imported")},
        "data": {"train": [str(sample_dir / "dev.jsonl")], "dev": [str(sample_dir / "dev.jsonl")], "max_length": 128},
        "optim": {"lr": 0.0, "head_lr": 0.0},
        "train": {"output_dir": str(tmp_path / "continued"), "max_steps": 1, "batch_size": 8, "compute_dtype": "float32"},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", str(tmp_path / "c.yaml")]) == 0
    records = read_records(sample_dir / "dev.jsonl")[0][:16]
    np.testing.assert_allclose(
        Scorer.load(tmp_path / "continued").score_records(records), Scorer.load(source).score_records(records), atol=1e-6
    )


def test_a_bias_free_decoder_head_exports_both_ways(tmp_path, tiny_tokenizer_dir):
    """A Qwen3ForSequenceClassification imports as last_token + head_bias=false; it exports back as hf
    (transformers checks it) and as omniscore, whose score_head gets a zero bias (OmniScorer checks it)."""
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer

    from tests.models.hf_fixtures import save_tiny

    folder = save_tiny(tmp_path / "hf", "Qwen3", QWEN3, classification=True, perturb="norm", vocab_size=1024)
    AutoTokenizer.from_pretrained(tiny_tokenizer_dir).save_pretrained(folder)
    import_hf(str(folder), tmp_path / "run")
    from omnidistill.config import load_config

    model = load_config(tmp_path / "run" / "config.yaml").model
    assert (model.pooling, model.head_bias) == ("last_token", False)
    assert export_run(tmp_path / "run", tmp_path / "hf-out", verify=True)["format"] == "hf"
    summary = export_run(tmp_path / "run", tmp_path / "os", verify=True, folder_format="omniscore")
    assert summary["verified_with"] == "omniscore.OmniScorer" and summary["max_abs_diff"] < 1e-4
    assert not load_file(str(tmp_path / "os" / "model.safetensors"))["score_head.bias"].any()
