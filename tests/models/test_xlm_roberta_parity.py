"""The Flax XLM-RoBERTa port reproduces Hugging Face PyTorch (fp32, 1e-4) on padded and packed batches."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.xlm_roberta.config import XlmRobertaConfig
from tests.models.hf_fixtures import TINY_BERT, assert_hidden_states_match, assert_logits_match, flax_from_folder, save_tiny

torch = pytest.importorskip("torch")

# the real models' numbering: <pad> = 1, so positions start at 2 (max_position_embeddings = 512 + 2)
TINY = {**TINY_BERT, "max_position_embeddings": 66, "type_vocab_size": 1, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}


def padded_batch(vocab: int, pad_id: int, batch: int = 3, seq: int = 17, seed: int = 0):
    """Right-padded ids (padding = ``pad_id``, real ids never equal to it) and their attention mask."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(pad_id + 1, vocab, size=(batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    for row in range(batch):
        length = max(2, seq - 5 * row)
        mask[row, length:] = 0
        ids[row, length:] = pad_id
    return ids, mask


@pytest.mark.parametrize("pad_id", [1, 0])
def test_hidden_states_match_pytorch_on_a_padded_batch(tmp_path, pad_id):
    folder = save_tiny(tmp_path / "xlmr", "XLMRoberta", TINY, perturb="LayerNorm", pad_token_id=pad_id)
    assert_hidden_states_match(folder, "xlm_roberta", *padded_batch(99, pad_id))


def test_classification_head_matches_pytorch(tmp_path):
    folder = save_tiny(tmp_path / "xlmr", "XLMRoberta", TINY, classification=True, perturb="LayerNorm")
    assert_logits_match(folder, "xlm_roberta", *padded_batch(99, 1))


def test_packed_rows_score_each_example_as_alone(tmp_path):
    """Two examples packed in one row get the positions (2, 3, ...) and states they get alone."""
    folder = save_tiny(tmp_path / "xlmr", "XLMRoberta", TINY, perturb="LayerNorm")
    model = flax_from_folder(folder, "xlm_roberta")
    (a, b), _ = padded_batch(99, 1, batch=2, seq=7, seed=3)
    row = np.concatenate([a, b[:5], [1, 1]])[None]
    segments = np.array([[1] * 7 + [2] * 5 + [0, 0]])
    packed = np.asarray(model.encoder(row, (segments > 0).astype(np.int32), segment_ids=segments))
    alone_a = np.asarray(model.encoder(a[None], np.ones((1, 7), np.int32)))
    alone_b = np.asarray(model.encoder(b[None, :5], np.ones((1, 5), np.int32)))
    np.testing.assert_allclose(packed[0, :7], alone_a[0], atol=1e-5)
    np.testing.assert_allclose(packed[0, 7:12], alone_b[0], atol=1e-5)


def test_sequence_length_is_bounded_by_the_shifted_positions(tmp_path):
    folder = save_tiny(tmp_path / "xlmr", "XLMRoberta", TINY)
    model = flax_from_folder(folder, "xlm_roberta")
    assert model.arch.max_sequence_length == 64
    ids = np.full((1, 65), 5, np.int32)
    with pytest.raises(ValueError, match="exceeds"):
        model.encoder(ids, np.ones_like(ids))


def test_unsupported_fields_are_refused_by_name():
    hf = {**TINY, "model_type": "xlm-roberta", "position_embedding_type": "relative_key"}
    with pytest.raises(UnsupportedConfigError, match="position_embedding_type"):
        XlmRobertaConfig.from_hf(hf)
    with pytest.raises(UnsupportedConfigError, match="model_type"):
        XlmRobertaConfig.from_hf({**TINY, "model_type": "bert"})
