"""The Flax Qwen3 port reproduces Hugging Face ``Qwen3Model`` (fp32, 1e-4): causal attention, RoPE, grouped-query
attention with q/k norms, on right-padded batches, under packing, and with last-token pooling."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.qwen3.config import Qwen3Config
from tests.models.hf_fixtures import assert_hidden_states_match, flax_from_folder, random_batch, save_tiny

torch = pytest.importorskip("torch")

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # grouped-query attention
    head_dim=16,  # not hidden_size / heads
    max_position_embeddings=64,
    rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    pad_token_id=0,
)


@pytest.mark.parametrize("bias", [False, True])
def test_hidden_states_match_pytorch_on_a_padded_batch(tmp_path, bias):
    folder = save_tiny(tmp_path / "qwen3", "Qwen3", TINY, perturb="norm", attention_bias=bias)
    assert_hidden_states_match(folder, "qwen3", *random_batch(99))


def test_attention_is_causal(tmp_path):
    """Changing a later token leaves every earlier state unchanged (and changes the later ones)."""
    folder = save_tiny(tmp_path / "qwen3", "Qwen3", TINY)
    model = flax_from_folder(folder, "qwen3", pooling="last_token")
    ids, mask = random_batch(99, batch=1, seq=9, pad=False)
    changed = ids.copy()
    changed[0, 6] = (changed[0, 6] % 98) + 1
    a, b = np.asarray(model.encoder(ids, mask)), np.asarray(model.encoder(changed, mask))
    np.testing.assert_array_equal(a[0, :6], b[0, :6])
    assert not np.allclose(a[0, 6:], b[0, 6:])


def test_last_token_scores_match_the_pytorch_last_real_state(tmp_path):
    """The regressor pools the last non-padding token: its input to the head equals PyTorch's state there."""
    import transformers

    folder = save_tiny(tmp_path / "qwen3", "Qwen3", TINY, perturb="norm")
    model = flax_from_folder(folder, "qwen3", pooling="last_token")
    ids, mask = random_batch(99)
    hf = transformers.AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        states = hf(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long()).last_hidden_state.numpy()
    last = mask.sum(axis=1) - 1
    pooled = np.asarray(model.pooling([model.encoder(ids, mask)], mask))
    np.testing.assert_allclose(pooled, states[np.arange(len(ids)), last], atol=1e-4)


def test_packed_rows_equal_each_example_alone(tmp_path):
    folder = save_tiny(tmp_path / "qwen3", "Qwen3", TINY, perturb="norm")
    model = flax_from_folder(folder, "qwen3", pooling="last_token")
    (a, b), _ = random_batch(99, batch=2, seq=7, pad=False, seed=4)
    row = np.concatenate([a, b[:5], [0, 0]])[None]
    segments = np.array([[1] * 7 + [2] * 5 + [0, 0]])
    packed = np.asarray(model.encoder(row, (segments > 0).astype(np.int32), segment_ids=segments))
    np.testing.assert_allclose(packed[0, :7], np.asarray(model.encoder(a[None], np.ones((1, 7), np.int32)))[0], atol=1e-5)
    np.testing.assert_allclose(packed[0, 7:12], np.asarray(model.encoder(b[None, :5], np.ones((1, 5), np.int32)))[0], atol=1e-5)


@pytest.mark.parametrize(
    ("field", "value"),
    [("use_sliding_window", True), ("rope_parameters", {"rope_type": "yarn", "factor": 4.0}), ("model_type", "qwen2")],
)
def test_unsupported_fields_are_refused_by_name(field, value):
    with pytest.raises(UnsupportedConfigError, match=field.split("_parameters")[0]):
        Qwen3Config.from_hf({**TINY, "model_type": "qwen3", field: value})


def test_the_cls_pooler_is_refused():
    from omnidistill.config import ModelConfig
    from omnidistill.models.regressor import build_regressor

    with pytest.raises(ValueError, match="last_token"):
        build_regressor(ModelConfig(family="qwen3", pooling="cls"), {**TINY, "model_type": "qwen3"})
