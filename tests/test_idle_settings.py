"""Settings that another setting puts to use are named at training's start when that one is off, and
they do change nothing there: the model's parameters, the input text and the learning rates are the
same with or without them (and differ once their user is on)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from omnidistill.cli import main
from omnidistill.config import load_config
from omnidistill.config.unused import DEPENDENTS, idle_settings
from omnidistill.data.schema import Record
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.models.loader import load_model
from omnidistill.train.optimizer import lr_schedule

IDLE = {  # key -> (an override away from its default, the override that puts it to use)
    "model.head_hidden": ("model.head_hidden=512", "model.head=shared_mlp"),
    "model.head_dropout": ("model.head_dropout=0.3", "model.head=shared_mlp"),
    "data.layout": ("data.layout.task_prefix='Task:'", "data.input_format=omniscore"),
    "data.pack_max_segments": ("data.pack_max_segments=4", "data.pack_length=192"),
    "data.pack_bins": ("data.pack_bins=8", "data.pack_length=192"),
    "optim.decay_ratio": ("optim.decay_ratio=0.3", "optim.schedule=wsd"),
    "loss.huber_delta": ("loss.huber_delta=0.5", "loss.name=huber"),
    "loss.distribution_mse_weight": ("loss.distribution_mse_weight=0.5", "loss.name=distribution"),
    "data.pair_items": ("data.pair_items=[data/sample/train.jsonl]", "data.pairs=data/sample/pairs/train.jsonl"),
    "train.pair_batch_size": ("train.pair_batch_size=16", "data.pairs=data/sample/pairs/train.jsonl"),
    "loss.pair_weight": ("loss.pair_weight=0.5", "data.pairs=data/sample/pairs/train.jsonl"),
    "logging.wandb_mode": ("logging.wandb_mode=offline", "logging.wandb=project"),
    "train.early_stopping_metric": ("train.early_stopping_metric=dev_rmse", "train.early_stopping_patience=2"),
}


def tiny(repo_root, *overrides):
    return load_config(repo_root / "configs" / "tiny.yaml", [f"model.tokenizer={repo_root}/assets/tiny-wordpiece", *overrides])


def test_every_dependent_setting_is_covered():
    assert {d.key for d in DEPENDENTS} == set(IDLE)


@pytest.mark.parametrize("key", sorted(IDLE))
def test_a_setting_is_named_while_its_user_is_off(repo_root, key):
    setting, user = IDLE[key]
    assert idle_settings(tiny(repo_root)) == []
    (line,) = idle_settings(tiny(repo_root, setting))
    name = setting.split("=")[0]
    assert line.startswith(name + "=") and f"changes nothing: only {user.split('=')[0]}" in line
    assert idle_settings(tiny(repo_root, setting, user)) == []


def test_idle_settings_change_nothing_and_their_users_see_them(repo_root):
    def param_shapes(cfg):
        return jax.tree.map(np.shape, nnx.to_pure_dict(nnx.state(load_model(cfg.model, shapes_only=True).model, nnx.Param)))

    def text(cfg):
        tokenizer = load_model(cfg.model, shapes_only=True).tokenizer
        record = Record(id="x", task="qa", lang="en", question="Why?", candidate="Because.")
        return RecordEncoder.from_config(tokenizer, cfg.data).text(record)

    def rates(cfg):
        schedule = lr_schedule(1.0, 100, cfg.optim)
        return [float(schedule(step)) for step in range(0, 100, 5)]

    probes = ((param_shapes, "model.head_hidden"), (text, "data.layout"), (rates, "optim.decay_ratio"))
    for probe, key in probes:
        setting, user = IDLE[key]
        assert probe(tiny(repo_root, setting)) == probe(tiny(repo_root)), key
        assert probe(tiny(repo_root, setting, user)) != probe(tiny(repo_root, user)), key


def test_train_warns_at_its_start(repo_root, tmp_path, caplog):
    # a missing eval.lang_weights file stops the run right after the warnings, before any data is read
    args = ["train", str(repo_root / "configs" / "tiny.yaml"), f"train.output_dir={tmp_path / 'run'}", "optim.decay_ratio=0.3"]
    with caplog.at_level("WARNING", logger="omnidistill.train.setup"):
        assert main([*args, f"eval.lang_weights={tmp_path / 'missing.json'}"]) == 2
    assert "optim.decay_ratio=0.3 changes nothing: only optim.schedule=wsd uses it" in caplog.text
