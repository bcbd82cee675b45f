"""Packed rows (several examples per row, block-diagonal attention, per-segment pooling) give the
same loss and gradients as the same examples one per row, for every family and pooling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from omnidistill.config import LossConfig, ModelConfig
from omnidistill.models.regressor import build_regressor
from omnidistill.train.step import make_loss_fn

BASE = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, max_position_embeddings=40)
ARCHS = {
    "bert": {"model_type": "bert"},
    # relative attention with log buckets and absolute positions too: both must restart per segment
    "deberta_v2": {
        "model_type": "deberta-v2",
        "relative_attention": True,
        "position_buckets": 8,
        "max_relative_positions": 16,
        "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": True,
    },
    # a sliding window of +-2 on every other layer, RoPE positions per segment
    "modernbert": {"model_type": "modernbert", "local_attention": 4, "global_attn_every_n_layers": 2},
    # RoBERTa positions count from pad + 1 over non-padding tokens, restarting per segment
    "xlm_roberta": {"model_type": "xlm-roberta", "pad_token_id": 0},
    # causal attention within each segment, grouped-query heads, RoPE restarting per segment
    "qwen3": {"model_type": "qwen3", "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8},
    "qwen2": {"model_type": "qwen2", "num_attention_heads": 4, "num_key_value_heads": 2},
    # bidirectional within each segment, a local window on the first layer, two RoPE bases
    "gemma3": {
        "model_type": "gemma3_text",
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"],
        "use_bidirectional_attention": True,
    },
}
LENGTHS = [5, 9, 3, 7, 4]
ROWS = [[0, 1], [2, 3, 4]]  # which examples share a packed row
SLOTS, PACK_LEN = 4, 16


def batches(seed=0):
    rng = np.random.default_rng(seed)
    ids = [rng.integers(3, 60, n).astype(np.int32) for n in LENGTHS]
    labels = rng.uniform(1, 5, (len(LENGTHS), 4)).astype(np.float32)
    label_mask = np.ones_like(labels)
    label_mask[1, 2] = label_mask[3, 0] = 0.0  # a few missing labels
    label_dist = rng.dirichlet(np.ones(5), (len(LENGTHS), 4)).astype(np.float32)
    label_dist[0, 1] = label_dist[4, 3] = 0.0  # a few missing distributions
    width = max(LENGTHS)
    plain = {
        "input_ids": np.zeros((len(LENGTHS), width), np.int32),
        "attention_mask": np.zeros((len(LENGTHS), width), np.int32),
        "labels": labels,
        "label_mask": label_mask,
        "label_dist": label_dist,
        "example_mask": np.ones(len(LENGTHS), np.float32),
    }
    for i, x in enumerate(ids):
        plain["input_ids"][i, : len(x)] = x
        plain["attention_mask"][i, : len(x)] = 1
    packed = {
        "input_ids": np.zeros((len(ROWS), PACK_LEN), np.int32),
        "segment_ids": np.zeros((len(ROWS), PACK_LEN), np.int32),
        "labels": np.zeros((len(ROWS), SLOTS, 4), np.float32),
        "label_mask": np.zeros((len(ROWS), SLOTS, 4), np.float32),
        "label_dist": np.zeros((len(ROWS), SLOTS, 4, 5), np.float32),
        "example_mask": np.zeros((len(ROWS), SLOTS), np.float32),
    }
    for r, members in enumerate(ROWS):
        at = 0
        for slot, i in enumerate(members):
            packed["input_ids"][r, at : at + LENGTHS[i]] = ids[i]
            packed["segment_ids"][r, at : at + LENGTHS[i]] = slot + 1
            packed["labels"][r, slot] = labels[i]
            packed["label_mask"][r, slot] = label_mask[i]
            packed["label_dist"][r, slot] = label_dist[i]
            packed["example_mask"][r, slot] = 1.0
            at += LENGTHS[i]
    packed["attention_mask"] = (packed["segment_ids"] > 0).astype(np.int32)
    return plain, packed


def loss_and_grads(family, pooling, batch, loss_cfg, head="linear_sigmoid"):
    model = build_regressor(ModelConfig(family=family, pooling=pooling, head=head, dropout=0.0), {**BASE, **ARCHS[family]}, seed=3)
    graphdef, state = nnx.split(model, nnx.Param)
    fn = jax.jit(jax.value_and_grad(make_loss_fn(graphdef, loss_cfg), has_aux=True))  # compiled: 4x faster than op by op
    (total, aux), grads = fn(nnx.to_pure_dict(state), jax.tree.map(jnp.asarray, batch), None)
    return float(total), float(aux["cells"]), float(aux["abs_err"]), grads


@pytest.mark.slow
# every family once, with its usual pooling, and the other poolings on one family each (the scoring
# path's packed forward of every family is pinned again in tests/test_packed_scoring.py)
@pytest.mark.parametrize(
    "family,pooling",
    [
        ("bert", "cls"),
        ("bert", "layer_mix_cls"),
        ("deberta_v2", "cls"),
        ("modernbert", "cls"),
        ("modernbert", "layer_mix_mean"),
        ("xlm_roberta", "cls_raw"),
        ("qwen3", "last_token"),
        ("qwen2", "last_token"),
        ("gemma3", "mean"),
    ],
)
def test_packed_rows_give_the_unpacked_loss_and_gradients(family, pooling):
    plain, packed = batches()
    loss_cfg = LossConfig(ranking_weight=0.5)
    t0, c0, a0, g0 = loss_and_grads(family, pooling, plain, loss_cfg)
    t1, c1, a1, g1 = loss_and_grads(family, pooling, packed, loss_cfg)
    assert c0 == c1 == 18
    np.testing.assert_allclose([t1, a1], [t0, a0], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=2e-4, atol=2e-6)


def test_segments_do_not_see_each_other():
    """Changing one example's tokens changes only its own slot's output."""
    _, packed = batches()
    model = build_regressor(ModelConfig(family="bert", pooling="mean", dropout=0.0), {**BASE, **ARCHS["bert"]}, seed=3)

    def outputs(ids):
        return np.asarray(
            model(
                jnp.asarray(ids), jnp.asarray(packed["attention_mask"]), segment_ids=jnp.asarray(packed["segment_ids"]), num_segments=SLOTS
            )
        )

    before = outputs(packed["input_ids"])
    changed = packed["input_ids"].copy()
    changed[0, 5:14] = 7  # the second example of row 0
    after = outputs(changed).reshape(2, SLOTS, -1)
    before = before.reshape(2, SLOTS, -1)
    assert not np.allclose(after[0, 1], before[0, 1])
    np.testing.assert_allclose(after[0, 0], before[0, 0], atol=1e-6)
    np.testing.assert_allclose(after[1], before[1], atol=1e-6)


def test_packed_rows_give_the_unpacked_distribution_loss():
    """The soft labels (``label_dist``) of each segment slot meet that segment's level softmax; the
    two cells without a distribution are masked (20 cells - 2 = 18, +0.5 MSE on the 18 labelled)."""
    plain, packed = batches()
    loss_cfg = LossConfig(name="distribution", distribution_mse_weight=0.5)
    t0, c0, a0, g0 = loss_and_grads("bert", "cls", plain, loss_cfg, head="classification")
    t1, c1, a1, g1 = loss_and_grads("bert", "cls", packed, loss_cfg, head="classification")
    assert c0 == c1 == 20 and t0 > 0  # a cell counts with a distribution or a label; (0,1) and (4,3) are labelled
    np.testing.assert_allclose([t1, a1], [t0, a0], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=2e-4, atol=2e-6)
