"""Optimizer rules: head vs encoder LR, frozen parameters, layer-wise decay, delayed encoder, schedules."""

import jax
import numpy as np
import pytest

from omnidistill.config import OptimConfig, ParamGroupRule
from omnidistill.train.optimizer import build_optimizer, lr_schedule, param_settings


def make_params(n_layers=3):
    return {
        "encoder": {
            "embeddings": {"word_embeddings": {"embedding": np.ones((4, 2))}},
            "layers": {i: {"query": {"kernel": np.ones((2, 2)), "bias": np.ones(2)}} for i in range(n_layers)},
        },
        "pooler": {"dense": {"kernel": np.ones((2, 2)), "bias": np.ones(2)}},
        "head": {"linear": {"kernel": np.ones((2, 4)), "bias": np.ones(4)}},
    }


def first_update(cfg, params, step_count=1):
    tx, schedules = build_optimizer(cfg, params, total_steps=100)
    state = tx.init(params)
    grads = jax.tree.map(np.ones_like, params)
    for _ in range(step_count):
        updates, state = tx.update(grads, state, params)
    return updates, schedules


def const(**kw):
    return OptimConfig(weight_decay=0.0, schedule="constant", grad_clip=None, **kw)


def test_head_and_encoder_learning_rates():
    updates, _ = first_update(const(lr=1e-3, head_lr=1e-1), make_params())
    # Adam's first step moves each parameter by -lr * sign(grad)
    np.testing.assert_allclose(updates["head"]["linear"]["kernel"], -1e-1, rtol=1e-4)
    np.testing.assert_allclose(updates["pooler"]["dense"]["bias"], -1e-1, rtol=1e-4)
    np.testing.assert_allclose(updates["encoder"]["layers"][0]["query"]["kernel"], -1e-3, rtol=1e-4)


def test_frozen_parameters_are_unchanged_after_a_step():
    cfg = const(lr=1e-3, param_groups=[ParamGroupRule(pattern="^encoder/embeddings/", frozen=True)])
    params = make_params()
    updates, _ = first_update(cfg, params)
    np.testing.assert_array_equal(updates["encoder"]["embeddings"]["word_embeddings"]["embedding"], 0.0)
    assert np.abs(updates["encoder"]["layers"][1]["query"]["kernel"]).min() > 0


def test_layer_wise_lr_decay_values():
    settings = param_settings(make_params(3), const(lr=1.0, head_lr=2.0, layer_decay=0.5))
    assert settings["encoder"]["layers"][2]["query"]["kernel"][0] == pytest.approx(0.5)  # top layer: decay^1
    assert settings["encoder"]["layers"][0]["query"]["kernel"][0] == pytest.approx(0.125)  # decay^3
    assert settings["encoder"]["embeddings"]["word_embeddings"]["embedding"][0] == pytest.approx(0.0625)  # decay^4
    assert settings["head"]["linear"]["kernel"][0] == pytest.approx(2.0)  # heads are not decayed


def test_encoder_frozen_for_first_steps_then_trained():
    cfg = const(lr=1e-3, head_lr=1e-2, freeze_encoder_steps=2)
    params = make_params()
    tx, _schedules = build_optimizer(cfg, params, total_steps=100)
    state = tx.init(params)
    grads = jax.tree.map(np.ones_like, params)
    moved = []
    for _ in range(3):
        updates, state = tx.update(grads, state, params)
        moved.append(
            (
                float(np.abs(updates["encoder"]["layers"][0]["query"]["kernel"]).max()),
                float(np.abs(updates["head"]["linear"]["kernel"]).max()),
            )
        )
    assert moved[0][0] == 0 and moved[1][0] == 0 and moved[2][0] > 0
    assert all(head > 0 for _, head in moved)


def test_weight_decay_only_on_matrices():
    cfg = OptimConfig(lr=1.0, head_lr=1.0, weight_decay=0.5, schedule="constant", grad_clip=None)
    params = make_params()
    tx, _ = build_optimizer(cfg, params, total_steps=10)
    updates, _ = tx.update(jax.tree.map(np.zeros_like, params), tx.init(params), params)
    np.testing.assert_allclose(updates["pooler"]["dense"]["kernel"], -0.5)
    np.testing.assert_allclose(updates["pooler"]["dense"]["bias"], 0.0)


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant", "wsd"])
def test_schedules_warm_up_then_decay(schedule):
    f = lr_schedule(1.0, 100, OptimConfig(schedule=schedule, warmup_ratio=0.2, decay_ratio=0.1))
    assert float(f(0)) == 0.0 and float(f(20)) == pytest.approx(1.0)
    end = float(f(100))
    assert end == pytest.approx(1.0) if schedule == "constant" else end == pytest.approx(0.0, abs=1e-6)
    if schedule == "wsd":
        assert float(f(89)) == pytest.approx(1.0) and float(f(95)) == pytest.approx(0.5)


def test_a_pretrained_pooler_trains_at_the_encoder_lr(tmp_path, tiny_tokenizer_dir):
    """BERT checkpoints carry pooler.dense: with ``pooling: cls`` it trains with the encoder, not at head_lr;
    a pooler that is new (no pooler in the checkpoint) stays in the head group."""
    from omnidistill.config import ModelConfig
    from omnidistill.models.loader import load_model
    from tests.models.hf_fixtures import save_tiny_bert

    pytest.importorskip("torch")
    with_pooler = save_tiny_bert(tmp_path / "bert", vocab_size=1024)
    model_cfg = ModelConfig(family="bert", pooling="cls", init_from=str(with_pooler), tokenizer=str(tiny_tokenizer_dir))
    loaded = load_model(model_cfg)
    assert loaded.pretrained_pooler
    assert load_model(model_cfg, shapes_only=True).pretrained_pooler  # a resumed run decides the same groups
    cfg = OptimConfig(lr=1.0, head_lr=2.0)
    settings = param_settings(make_params(), cfg, pretrained_pooler=loaded.pretrained_pooler)
    assert settings["pooler"]["dense"]["kernel"][0] == 1.0 and settings["head"]["linear"]["kernel"][0] == 2.0
    assert param_settings(make_params(), cfg)["pooler"]["dense"]["kernel"][0] == 2.0
    from safetensors.numpy import load_file, save_file

    tensors = {k: v for k, v in load_file(str(with_pooler / "model.safetensors")).items() if "pooler" not in k}
    save_file(tensors, str(with_pooler / "model.safetensors"))
    assert not load_model(model_cfg).pretrained_pooler
    assert not load_model(model_cfg, shapes_only=True).pretrained_pooler
    raw = load_model(ModelConfig(family="bert", pooling="cls_raw", init_from=str(with_pooler), tokenizer=str(tiny_tokenizer_dir)))
    assert not raw.pretrained_pooler
