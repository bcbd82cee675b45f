"""Pooling and head math: each registry entry alone."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from omnidistill.config import ModelConfig
from omnidistill.models.heads import ClassificationHead, LayerMix, MeanPooling, OrdinalHead, SharedMLPHead, masked_mean
from omnidistill.models.regressor import build_regressor

ARCH = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)


def test_mean_pooling_ignores_padding():
    h = jnp.array([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = jnp.array([[1, 1, 0]])
    np.testing.assert_allclose(masked_mean(h, mask), [[2.0, 3.0]])
    np.testing.assert_allclose(MeanPooling(1, rngs=nnx.Rngs(0))([h], mask), [[2.0, 3.0]])


def test_layer_mix_is_softmax_weighted_sum():
    mix = LayerMix(3, rngs=nnx.Rngs(0))
    mix.weights[...] = jnp.array([0.0, jnp.log(3.0), -1e9])
    mix.gamma[...] = jnp.array(2.0)
    states = [jnp.full((1, 2, 1), v) for v in (1.0, 5.0, 1000.0)]
    # weights softmax -> [0.25, 0.75, 0]; mix = 2 * (0.25 + 3.75) = 8
    np.testing.assert_allclose(mix(states, jnp.ones((1, 2))), [[8.0]], rtol=1e-6)


def test_ordinal_expectation_and_monotone_thresholds():
    head = OrdinalHead(3, rngs=nnx.Rngs(0))
    t = np.asarray(head.thresholds())
    assert (np.diff(t, axis=1) > 0).all()
    very_high = jnp.full((1, 4, 4), 50.0)
    very_low = jnp.full((1, 4, 4), -50.0)
    np.testing.assert_allclose(head.scores(very_high), 5.0)
    np.testing.assert_allclose(head.scores(very_low), 1.0)
    half = jnp.zeros((1, 4, 4))  # P(y>k) = 0.5 for every k -> 1 + 4 * 0.5
    np.testing.assert_allclose(head.scores(half), 3.0)


def test_classification_expectation():
    head = ClassificationHead(3, rngs=nnx.Rngs(0))
    logits = jnp.log(jnp.array([0.1, 0.2, 0.4, 0.2, 0.1]))[None, None].repeat(4, axis=1)
    np.testing.assert_allclose(head.scores(logits), 0.1 + 0.4 + 1.2 + 0.8 + 0.5, rtol=1e-6)


def test_shared_mlp_dropout_only_with_rng():
    head = SharedMLPHead(8, hidden=16, dropout_rate=0.5, rngs=nnx.Rngs(0))
    x = jnp.ones((2, 8))
    np.testing.assert_array_equal(head(x), head(x))
    assert not np.allclose(head(x, jax.random.PRNGKey(1)), head(x))


@pytest.mark.parametrize("pooling", ["cls", "cls_raw", "mean", "layer_mix_cls", "layer_mix_mean"])
@pytest.mark.parametrize("head", ["linear_sigmoid", "shared_mlp", "ordinal", "classification"])
def test_every_combination_scores_in_range(pooling, head):
    model = build_regressor(ModelConfig(pooling=pooling, head=head), ARCH)
    ids = jnp.array([[2, 5, 6, 3, 0], [2, 7, 3, 0, 0]])
    scores = model.scores(model(ids, (ids > 0).astype(jnp.int32)))
    assert scores.shape == (2, 4) and bool(((scores >= 1) & (scores <= 5)).all())
    assert ("pooler" in nnx.to_pure_dict(nnx.state(model, nnx.Param))) == (pooling == "cls")


def test_last_token_pooling_picks_the_last_real_token_under_any_padding_and_packing():
    from omnidistill.models.heads import LastTokenPooling

    pool = LastTokenPooling(1, rngs=nnx.Rngs(0))
    h = jnp.arange(2 * 5, dtype=jnp.float32).reshape(2, 5, 1)  # state = 5 * row + position
    right = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = jnp.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]])
    np.testing.assert_array_equal(pool([h], right)[:, 0], [2.0, 9.0])
    np.testing.assert_array_equal(pool([h], left)[:, 0], [4.0, 9.0])
    # packed rows: segments 1 and 2 of row 0 end at positions 1 and 3; row 1 holds one segment ending at 4
    segments = jnp.array([[1, 1, 2, 2, 0], [1, 1, 1, 1, 1]])
    out = pool([h], (segments > 0).astype(jnp.int32), segments, num_segments=2)
    np.testing.assert_array_equal(out[:, 0], [1.0, 3.0, 9.0, 5.0])  # the empty slot of row 1 is unused


def test_a_bias_free_head_is_linear_sigmoid_only():
    model = build_regressor(ModelConfig(family="bert", head_bias=False), {**ARCH, "model_type": "bert"})
    assert "bias" not in nnx.to_pure_dict(nnx.state(model.head, nnx.Param))["linear"]
    with pytest.raises(ValueError, match="head_bias=false applies to the linear_sigmoid head only"):
        build_regressor(ModelConfig(family="bert", head="ordinal", head_bias=False), {**ARCH, "model_type": "bert"})


MODERNBERT_ARCH = dict(
    model_type="modernbert", vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
)


@pytest.mark.parametrize(
    ("family", "arch", "model_cfg", "rate"),
    [
        ("bert", ARCH, {}, 0.1),  # BERT's hidden_dropout_prob
        ("bert", ARCH, {"dropout": 0.0}, 0.0),
        ("modernbert", MODERNBERT_ARCH, {}, 0.0),  # ModernBERT's rates are all 0
        ("modernbert", MODERNBERT_ARCH, {"head": "shared_mlp", "head_dropout": 0.2}, 0.2),
        ("modernbert", {**MODERNBERT_ARCH, "attention_dropout": 0.05}, {}, 0.05),
        ("modernbert", {**MODERNBERT_ARCH, "classifier_dropout": 0.3}, {"pooling": "cls"}, 0.3),
    ],
)
def test_training_applies_every_dropout_the_model_has(family, arch, model_cfg, rate):
    """``Regressor.dropout_rate`` (whether a training step passes a dropout RNG) sees the head's
    dropout and every rate the backbone applies. A ``shared_mlp`` head on ModernBERT, whose backbone
    rates are 0, and a ModernBERT config with only attention or classifier dropout, trained with none."""
    model = build_regressor(ModelConfig(family=family, **model_cfg), arch)
    assert model.dropout_rate == pytest.approx(rate)
