"""Parameter groups: head vs encoder learning rates, regex rules, decay mask, schedules."""

import jax
import numpy as np
import optax
import pytest

from omnidistill.config import OptimConfig, ParamGroupRule
from omnidistill.train.optimizer import build_optimizer, group_rules, lr_schedule, param_group_labels

PARAMS = {
    "encoder": {"embeddings": {"word_embeddings": {"embedding": np.ones((4, 2))}}, "layers": {0: {"query": {"kernel": np.ones((2, 2))}}}},
    "pooler": {"dense": {"kernel": np.ones((2, 2)), "bias": np.ones(2)}},
    "head": {"linear": {"kernel": np.ones((2, 4)), "bias": np.ones(4)}},
}


def test_labels_follow_rules_in_order():
    cfg = OptimConfig(param_groups=[ParamGroupRule(pattern="^encoder/embeddings/", lr=0.0)])
    labels = param_group_labels(PARAMS, group_rules(cfg))
    assert labels["encoder"]["embeddings"]["word_embeddings"]["embedding"] == "group0"
    assert labels["encoder"]["layers"][0]["query"]["kernel"] == "default"
    assert labels["head"]["linear"]["kernel"] == "group1" and labels["pooler"]["dense"]["bias"] == "group1"


def test_head_and_encoder_learning_rates_apply():
    cfg = OptimConfig(
        lr=1e-3,
        head_lr=1e-1,
        weight_decay=0.0,
        schedule="constant",
        grad_clip=None,
        param_groups=[ParamGroupRule(pattern="^encoder/embeddings/", lr=0.0)],
    )
    tx, schedules = build_optimizer(cfg, PARAMS, total_steps=10)
    grads = jax.tree.map(np.ones_like, PARAMS)
    updates, _ = tx.update(grads, tx.init(PARAMS), PARAMS)
    # Adam's first step moves each parameter by -lr * sign(grad)
    np.testing.assert_allclose(updates["head"]["linear"]["kernel"], -1e-1, rtol=1e-4)
    np.testing.assert_allclose(updates["encoder"]["layers"][0]["query"]["kernel"], -1e-3, rtol=1e-4)
    np.testing.assert_allclose(updates["encoder"]["embeddings"]["word_embeddings"]["embedding"], 0.0)
    assert float(schedules["group1"](3)) == pytest.approx(1e-1)


def test_weight_decay_only_on_matrices():
    cfg = OptimConfig(lr=1.0, head_lr=1.0, weight_decay=0.5, schedule="constant", grad_clip=None)
    tx, _ = build_optimizer(cfg, PARAMS, total_steps=10)
    zeros = jax.tree.map(np.zeros_like, PARAMS)
    updates, _ = tx.update(zeros, tx.init(PARAMS), PARAMS)
    np.testing.assert_allclose(updates["pooler"]["dense"]["kernel"], -0.5)  # decayed
    np.testing.assert_allclose(updates["pooler"]["dense"]["bias"], 0.0)  # not decayed


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant"])
def test_schedules_warm_up_then_decay(schedule):
    cfg = OptimConfig(schedule=schedule, warmup_ratio=0.2)
    f = lr_schedule(1.0, 100, cfg)
    assert float(f(0)) == 0.0 and float(f(20)) == pytest.approx(1.0)
    end = float(f(100))
    assert end == pytest.approx(1.0) if schedule == "constant" else end == pytest.approx(0.0, abs=1e-6)
    assert isinstance(optax.global_norm({"a": np.ones(2)}), jax.Array)
