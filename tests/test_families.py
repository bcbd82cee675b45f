"""Every encoder family trains through the same regressor, step and sharding, and exports verified."""

import importlib.util
import json

import pytest

from omnidistill.cli import main

pytest.importorskip("torch")
HAS_OMNISCORE = importlib.util.find_spec("omniscore") is not None


DECODER_POOLING = {"qwen3": "last_token", "gemma3": "mean"}  # only the omniscore format holds these


# XLM-R runs BERT's encoder and sharding rules, and Qwen2 Qwen3's: their own positions, weight tables and
# exports are pinned by their parity, packing-loss, import/export and omniscore-format tests
@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "modernbert", "deberta_v2", "qwen3", "gemma3"])
def test_tiny_default_switched_to_family_trains_and_exports(tmp_path, repo_root, family):
    decoder = family in DECODER_POOLING
    if decoder and not HAS_OMNISCORE:
        pytest.skip("the omniscore package is not installed")
    pooling = DECODER_POOLING.get(family, "cls_raw" if HAS_OMNISCORE else "cls")
    run = tmp_path / family
    args = [
        "train",
        str(repo_root / "configs" / "tiny.yaml"),
        f"model.family={family}",
        f"train.output_dir={run}",
        "train.max_steps=4",
        "train.eval_every_steps=4",
        "mesh.data=2",
        "mesh.fsdp=2",
        "mesh.tensor=2",
        "data.length_buckets=[192]",
        "eval.length_step=192",
        f"data.train=[{repo_root}/data/sample/train.jsonl]",
        f"data.dev=[{repo_root}/data/sample/dev.jsonl]",
        f"data.test=[{repo_root}/data/sample/test.jsonl]",
        f"model.tokenizer={repo_root}/assets/tiny-wordpiece",
        f"model.pooling={pooling}",
    ]
    if decoder:  # the Qwen and Gemma ports have no dropout, and refuse the tiny default's rate
        args += ["model.dropout=0"]
    if family == "gemma3":  # EmbeddingGemma's attention, local layers of +-2 tokens
        args += ["model.arch.use_bidirectional_attention=true", "model.arch.sliding_window=4"]
    assert main(args) == 0
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert any("dev_mae" in r for r in log)
    assert main(["export", str(run), str(tmp_path / f"{family}-out"), "--verify", "on"]) == 0
    config = json.loads((tmp_path / f"{family}-out" / "config.json").read_text())
    if HAS_OMNISCORE:  # the paper's head, checked against the omniscore package
        assert config["architectures"] == ["OmniScoreModel"] and config["pooling_strategy"] == DECODER_POOLING.get(family, "cls")
    else:
        assert config["architectures"][0].endswith("ForSequenceClassification")
