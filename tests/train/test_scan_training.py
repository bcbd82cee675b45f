"""``model.scan_layers=true`` end to end from the CLI: a sharded run trains to the same parameters as the
unrolled run, exports in the unrolled HF layout that the real consumer verifies, seeds an unrolled run
through ``model.init_from``, and a resume that changes the layout is refused by name."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from flax import nnx

from omnidistill.cli import main
from omnidistill.config import load_config
from omnidistill.models.scan import is_scanned, unstack_layers
from omnidistill.runs.load import load_trained
from omnidistill.train.setup import load_initial_model
from tests.shared_runs import TRAINED_TINY, tiny_run_args


def losses(run):
    return [r["loss"] for r in map(json.loads, (run / "train_log.jsonl").read_text().splitlines()) if "loss" in r]


@pytest.mark.slow
def test_scanned_training_matches_unrolled_and_converts_both_ways(tmp_path, repo_root, capsys, monkeypatch, trained_tiny):
    """The unrolled run is the session's shared one (tests/shared_runs.py: fsdp 8, dropout on); the
    scanned run repeats it with ``model.scan_layers=true``."""
    scanned, unrolled = tmp_path / "scanned", trained_tiny
    args = tiny_run_args(repo_root, scanned, *TRAINED_TINY)
    assert main([*args, "model.scan_layers=true"]) == 0

    # the same training, step for step, in the other parameter layout
    assert len(losses(scanned)) == 3
    np.testing.assert_allclose(losses(scanned), losses(unrolled), rtol=1e-5)
    _, _, params_s, _, _ = load_trained(scanned, "latest")
    _, _, params_u, _, _ = load_trained(unrolled, "latest")
    assert is_scanned(params_s) and not is_scanned(params_u)
    np.testing.assert_allclose(params_s["encoder"]["layers"]["blocks"][0]["output"]["kernel"].shape[0], 2)
    for a, b in zip(jax.tree.leaves(unstack_layers(params_s)), jax.tree.leaves(params_u), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)

    # export writes the unrolled layout; --verify scores it with the real consumer
    verify = "on" if _has_omniscore() else "off"
    assert main(["export", str(scanned), str(tmp_path / "out"), "--verify", verify]) == 0

    # a resume that changes the layout is refused, naming the field
    assert main([*args, "model.scan_layers=false", "train.max_steps=8", "--resume"]) == 2
    assert "model.scan_layers" in capsys.readouterr().err

    # model.init_from a scanned run starts an unrolled model from every one of its parameters
    cfg = load_config(repo_root / "configs" / "tiny.yaml", [f"model.init_from={scanned}", "model.tokenizer=null"])
    loaded = load_initial_model(cfg)
    _, _, best, _, _ = load_trained(scanned)
    started = nnx.to_pure_dict(nnx.state(loaded.model, nnx.Param))
    assert not is_scanned(started)
    flat_best = nnx.traversals.flatten_mapping(unstack_layers(best))
    flat_started = nnx.traversals.flatten_mapping(started)
    assert flat_best.keys() == flat_started.keys()
    for key, value in flat_best.items():
        np.testing.assert_array_equal(np.asarray(flat_started[key]), np.asarray(value), err_msg=str(key))

    # resuming such a run builds its model from shapes, and reads nothing of the init_from run's
    # checkpoint: its metadata decides which parameters it would give, hence the same LR groups
    def no_checkpoint(*_a, **_k):
        raise AssertionError("a resumed run read its init_from run's checkpoint")

    monkeypatch.setattr("omnidistill.train.setup.restore_params", no_checkpoint)
    monkeypatch.setattr("omnidistill.runs.load.restore_params", no_checkpoint)
    resumed = load_initial_model(cfg, shapes_only=True)
    assert resumed.pretrained_pooler == loaded.pretrained_pooler
    shapes = jax.tree.map(lambda x: x.shape, nnx.to_pure_dict(nnx.state(resumed.model, nnx.Param)))
    assert shapes == jax.tree.map(lambda x: x.shape, started)


def _has_omniscore() -> bool:
    import importlib.util

    return importlib.util.find_spec("omniscore") is not None
