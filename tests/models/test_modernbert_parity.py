"""The Flax ModernBERT port reproduces Hugging Face PyTorch (fp32, 1e-4), local windows and padding included."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.modernbert.config import ModernBertConfig
from tests.models.hf_fixtures import assert_hidden_states_match, assert_logits_match, flax_from_folder, random_batch, save_tiny

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    global_attn_every_n_layers=3,
    local_attention=8,
    max_position_embeddings=128,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    cls_token_id=1,
    sep_token_id=2,
)


def save_tiny_modernbert(folder, classification=False, **overrides):
    return save_tiny(folder, "ModernBert", TINY, classification=classification, perturb="norm", **overrides)


def flax_model(folder):
    return flax_from_folder(folder, "modernbert")


@pytest.mark.parametrize("biases", [False, True])
@pytest.mark.parametrize("pad", [False, True])
def test_hidden_states_match_pytorch(tmp_path, biases, pad):
    extra = dict(norm_bias=True, attention_bias=True, mlp_bias=True) if biases else {}
    folder = save_tiny_modernbert(tmp_path / "mb", **extra)
    ids, mask = random_batch(99, batch=3, seq=24, pad=pad)  # 24 tokens > local window of 8
    ids[:, 0] = 1
    assert_hidden_states_match(folder, "modernbert", ids, mask)


def test_local_window_limits_the_receptive_field(tmp_path):
    """With only local layers (window 4 each side, 4 layers) a token 38 positions away has no influence."""
    folder = save_tiny_modernbert(tmp_path / "mb", layer_types=["sliding_attention"] * 4)
    model = flax_model(folder)
    ids, mask = random_batch(99, batch=1, seq=40, pad=False)
    changed = ids.copy()
    changed[0, -1] = (changed[0, -1] % 97) + 1
    a, b = np.asarray(model.encoder(ids, mask)), np.asarray(model.encoder(changed, mask))
    np.testing.assert_array_equal(a[0, :20], b[0, :20])  # receptive field 4 x 4 = 16 < 38
    assert np.abs(a[0, 30] - b[0, 30]).max() > 0


def test_classification_head_matches_pytorch(tmp_path):
    folder = save_tiny_modernbert(tmp_path / "cls", classification=True)
    ids, mask = random_batch(99, batch=3, seq=20)
    ids[:, 0] = 1
    assert_logits_match(folder, "modernbert", ids, mask)


def test_v5_config_round_trip_and_rejections():
    cfg = ModernBertConfig.from_hf({**TINY, "model_type": "modernbert"})
    assert cfg.layer_types == ("full_attention", "sliding_attention", "sliding_attention", "full_attention")
    again = ModernBertConfig.from_hf(cfg.to_hf())
    assert again == cfg
    with pytest.raises(UnsupportedConfigError, match="rope_type"):
        ModernBertConfig.from_hf({**TINY, "rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 2.0}}})
    with pytest.raises(UnsupportedConfigError, match="hidden_activation"):
        ModernBertConfig.from_hf({**TINY, "hidden_activation": "mish"})
