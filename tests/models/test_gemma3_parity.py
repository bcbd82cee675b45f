"""The Flax Gemma 3 port reproduces Hugging Face ``Gemma3TextModel`` (fp32, 1e-4): scaled embeddings, sandwich
norms stored as offsets from 1, local and global layers with their own RoPE bases and the query scale, both
bidirectional (EmbeddingGemma) and causal, on padded and packed batches, with mean and last-token pooling."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.gemma3.config import Gemma3Config
from tests.models.hf_fixtures import assert_hidden_states_match, flax_from_folder, random_batch, save_tiny

torch = pytest.importorskip("torch")

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,  # grouped-query attention
    head_dim=16,  # not hidden_size / heads
    max_position_embeddings=64,
    query_pre_attn_scalar=24,  # not head_dim: the score scale comes from this field
    sliding_window=6,  # shorter than the batch, so the local layers' window matters
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 50.0},
    },
    use_bidirectional_attention=True,
    pad_token_id=0,
)


def _hf_states(folder, ids, mask):
    import transformers

    hf = transformers.AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        return hf(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long()).last_hidden_state.numpy()


@pytest.mark.parametrize("bidirectional", [True, False])
def test_hidden_states_match_pytorch_on_a_padded_batch(tmp_path, bidirectional):
    folder = save_tiny(tmp_path / "gemma3", "Gemma3Text", TINY, perturb="norm", use_bidirectional_attention=bidirectional)
    assert_hidden_states_match(folder, "gemma3", *random_batch(99))


def test_linear_rope_scaling_and_attention_biases_match_pytorch(tmp_path):
    rope = {**TINY["rope_parameters"], "full_attention": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 4.0}}
    folder = save_tiny(tmp_path / "gemma3", "Gemma3Text", TINY, perturb="proj", rope_parameters=rope, attention_bias=True)
    assert_hidden_states_match(folder, "gemma3", *random_batch(99))


def test_local_layers_see_only_their_window():
    """With one local layer, the first state ignores a token beyond sliding_window // 2 and sees one inside it."""
    from omnidistill.config import ModelConfig
    from omnidistill.models.regressor import build_regressor

    cfg = {**TINY, "model_type": "gemma3_text", "num_hidden_layers": 1, "layer_types": ["sliding_attention"]}
    model = build_regressor(ModelConfig(family="gemma3", pooling="mean"), cfg)
    ids, mask = random_batch(99, batch=1, seq=12, pad=False)
    reach = TINY["sliding_window"] // 2
    outside, inside = ids.copy(), ids.copy()
    outside[0, reach + 1] = (ids[0, reach + 1] % 98) + 1
    inside[0, reach] = (ids[0, reach] % 98) + 1
    base = np.asarray(model.encoder(ids, mask))[0, 0]
    np.testing.assert_array_equal(np.asarray(model.encoder(outside, mask))[0, 0], base)
    assert not np.allclose(np.asarray(model.encoder(inside, mask))[0, 0], base)


def test_mean_pooling_matches_the_pytorch_masked_mean_under_left_padding(tmp_path):
    folder = save_tiny(tmp_path / "gemma3", "Gemma3Text", TINY, perturb="norm")
    model = flax_from_folder(folder, "gemma3", pooling="mean")
    ids, mask = random_batch(99)
    ids, mask = ids[:, ::-1].copy(), mask[:, ::-1].copy()  # left padding
    states = _hf_states(folder, ids, mask)
    expected = (states * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    pooled = np.asarray(model.pooling([model.encoder(ids, mask)], mask))
    np.testing.assert_allclose(pooled, expected, atol=1e-4)


def test_last_token_of_a_causal_gemma_matches_the_pytorch_state(tmp_path):
    folder = save_tiny(tmp_path / "gemma3", "Gemma3Text", TINY, perturb="norm", use_bidirectional_attention=False)
    model = flax_from_folder(folder, "gemma3", pooling="last_token")
    ids, mask = random_batch(99)
    states = _hf_states(folder, ids, mask)
    pooled = np.asarray(model.pooling([model.encoder(ids, mask)], mask))
    np.testing.assert_allclose(pooled, states[np.arange(len(ids)), mask.sum(1) - 1], atol=1e-4)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_packed_rows_equal_each_example_alone(tmp_path, bidirectional):
    folder = save_tiny(tmp_path / "gemma3", "Gemma3Text", TINY, perturb="norm", use_bidirectional_attention=bidirectional)
    model = flax_from_folder(folder, "gemma3", pooling="mean")
    (a, b), _ = random_batch(99, batch=2, seq=9, pad=False, seed=4)
    row = np.concatenate([a, b[:5], [0, 0]])[None]
    segments = np.array([[1] * 9 + [2] * 5 + [0, 0]])
    packed = np.asarray(model.encoder(row, (segments > 0).astype(np.int32), segment_ids=segments))
    np.testing.assert_allclose(packed[0, :9], np.asarray(model.encoder(a[None], np.ones((1, 9), np.int32)))[0], atol=1e-5)
    np.testing.assert_allclose(packed[0, 9:14], np.asarray(model.encoder(b[None, :5], np.ones((1, 5), np.int32)))[0], atol=1e-5)


def test_the_config_round_trips_through_transformers():
    import transformers

    ours = Gemma3Config.from_hf({**TINY, "model_type": "gemma3_text"})
    hf = transformers.Gemma3TextConfig(**ours.to_hf())
    assert Gemma3Config.from_hf(hf.to_dict()) == ours
    assert hf.sliding_window == TINY["sliding_window"] // 2 + 1  # transformers' own bidirectional reading


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("attn_logit_softcapping", 50.0),
        ("attention_dropout", 0.1),
        ("rope_parameters", {"full_attention": {"rope_type": "yarn", "factor": 4.0}}),
        ("layer_types", ["chunked_attention"] * 3),
        ("model_type", "gemma2"),
        ("sliding_window", None),  # transformers' own forward fails on it; 4096 was taken in its place
        ("sliding_window", 0),
        ("query_pre_attn_scalar", 24.5),  # was read as 24
    ],
)
def test_unsupported_fields_are_refused_by_name(field, value):
    with pytest.raises(UnsupportedConfigError, match=field.split("_parameters")[0]):
        Gemma3Config.from_hf({**TINY, "model_type": "gemma3_text", field: value})


def test_a_null_window_is_taken_where_no_layer_is_local():
    full = {**TINY, "model_type": "gemma3_text", "sliding_window": None, "layer_types": ["full_attention"] * 3}
    assert Gemma3Config.from_hf(full).layer_types == ("full_attention",) * 3


def test_the_cls_pooler_is_refused():
    from omnidistill.config import ModelConfig
    from omnidistill.models.regressor import build_regressor

    with pytest.raises(ValueError, match="mean"):
        build_regressor(ModelConfig(family="gemma3", pooling="cls"), {**TINY, "model_type": "gemma3_text"})
