"""The Flax Qwen2 port (Qwen3's blocks with q/k/v biases and no q/k norms) reproduces Hugging Face ``Qwen2Model``."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.qwen2.config import Qwen2Config
from omnidistill.models.registry import get_family
from tests.models.hf_fixtures import assert_hidden_states_match, flax_from_folder, random_batch, save_tiny

torch = pytest.importorskip("torch")

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    pad_token_id=0,
)


def test_hidden_states_match_pytorch_on_a_padded_batch(tmp_path):
    folder = save_tiny(tmp_path / "qwen2", "Qwen2", TINY, perturb="bias")  # the q/k/v biases start at 0
    assert_hidden_states_match(folder, "qwen2", *random_batch(99))


def test_weight_table_has_qkv_biases_and_no_qk_norms():
    keys = {e.hf_key for e in get_family("qwen2").weight_table(Qwen2Config.from_hf({**TINY, "model_type": "qwen2"}))}
    assert "model.layers.0.self_attn.q_proj.bias" in keys and "model.layers.0.self_attn.o_proj.bias" not in keys
    assert not any("q_norm" in k for k in keys)


def test_last_token_state_matches_pytorch(tmp_path):
    import transformers

    folder = save_tiny(tmp_path / "qwen2", "Qwen2", TINY, perturb="bias")
    model = flax_from_folder(folder, "qwen2")
    ids, mask = random_batch(99)
    hf = transformers.AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        states = hf(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long()).last_hidden_state.numpy()
    pooled = np.asarray(model.pooling([model.encoder(ids, mask)], mask))
    np.testing.assert_allclose(pooled, states[np.arange(len(ids)), mask.sum(axis=1) - 1], atol=1e-4)


def test_sliding_window_is_refused_by_name():
    with pytest.raises(UnsupportedConfigError, match="use_sliding_window"):
        Qwen2Config.from_hf({**TINY, "model_type": "qwen2", "use_sliding_window": True})
