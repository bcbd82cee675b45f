"""``optim.ema_decay``: a moving average of the weights, kept in the optimizer state, is what a run
evaluates, saves as best and scores with; the weights train exactly as without it."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from omnidistill.config import MeshConfig, OptimConfig
from omnidistill.models.registry import get_family
from omnidistill.parallel.mesh import build_mesh
from omnidistill.runs.checkpoint import read_state_arrays, restore_params, saved_steps, weights_to_evaluate
from omnidistill.train.optimizer import build_optimizer, weights_average
from omnidistill.train.setup import state_target
from tests.train.helpers import tiny_setup


def decay_at(decay: float, t: int) -> float:
    """The decay of update ``t`` (from 0): TensorFlow's ExponentialMovingAverage with num_updates."""
    return min(decay, (1 + t) / (10 + t))


def test_the_average_follows_its_recurrence_and_leaves_the_updates_as_they_are():
    rng = np.random.default_rng(0)
    params = {"a": rng.normal(size=(3, 2)).astype(np.float32), "b": {"c": rng.normal(size=4).astype(np.float32)}}
    tx, plain = optax.chain(optax.sgd(0.1), weights_average(0.6)), optax.sgd(0.1)
    state, plain_state = tx.init(params), plain.init(params)
    average = jax.tree.map(np.float64, params)  # starts as the initial weights
    decays = [decay_at(0.6, t) for t in range(30)]
    assert decays[0] == 0.1 and decays[12] < 0.6 == decays[13] == decays[-1]  # the warm-up, then the decay itself
    for d in decays:
        grads = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)
        updates, state = tx.update(grads, state, params)
        expected_updates, plain_state = plain.update(grads, plain_state, params)
        for u, e in zip(jax.tree.leaves(updates), jax.tree.leaves(expected_updates), strict=True):
            np.testing.assert_array_equal(u, e)  # passed through
        params = optax.apply_updates(params, updates)
        average = jax.tree.map(lambda a, w, d=d: d * a + (1 - d) * np.float64(w), average, params)
        found = weights_to_evaluate({"params": params, "opt_state": state})
        for got, want in zip(jax.tree.leaves(found), jax.tree.leaves(average), strict=True):
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)


def test_the_average_is_sharded_like_the_parameters(repo_root):
    """On an fsdp mesh each leaf of the average is sharded as its parameter is (a replicated copy would
    cost every device the full model)."""
    _, params, _, _ = tiny_setup(repo_root)
    tx, _ = build_optimizer(OptimConfig(ema_decay=0.99), params, total_steps=10)
    mesh = build_mesh(MeshConfig(data=1, fsdp=8))
    target = state_target(params, tx, mesh, get_family("bert").sharding_rules)
    average = weights_to_evaluate(target)
    assert average is not target.params
    pairs = zip(jax.tree.leaves(average), jax.tree.leaves(target.params), strict=True)
    assert all(a.sharding == p.sharding and a.shape == p.shape for a, p in pairs)
    assert any(not p.sharding.is_fully_replicated for p in jax.tree.leaves(target.params))
    tx_off, _ = build_optimizer(OptimConfig(), params, total_steps=10)  # off: the parameters themselves
    off = state_target(params, tx_off, mesh, get_family("bert").sharding_rules)
    assert weights_to_evaluate(off) is off.params


@pytest.mark.slow
def test_a_run_evaluates_and_releases_the_average_and_trains_as_without_it(tmp_path, repo_root, trained_tiny):
    """The shared run's training with ``optim.ema_decay=0.5`` and a checkpoint at every step: its weights
    at steps 3 and 6 equal the shared run's (to float32 rounding); the average of each step follows the recurrence
    from the step before's, in numpy; the best checkpoint holds the average of its step, and
    ``--checkpoint latest`` reads the average too; resumed from step 3, the run ends with the same
    weights and average to the bit."""
    import shutil

    from omnidistill.cli import main
    from omnidistill.runs.load import load_trained
    from tests.shared_runs import TRAINED_TINY, tiny_run_args

    run = tmp_path / "ema"
    extra = ("optim.ema_decay=0.5", "checkpoint.every_steps=1", "checkpoint.keep=6")
    assert main(tiny_run_args(repo_root, run, *TRAINED_TINY, *extra)) == 0
    assert saved_steps(run) == [1, 2, 3, 4, 5, 6]
    states = {step: read_state_arrays(run / "checkpoints", step) for step in range(1, 7)}
    # the weights train as without the average, to float32 rounding: XLA compiles the step otherwise.
    # An attention key bias has a gradient of rounding noise only (softmax ignores it), which AdamW
    # scales up: it moves by ~1e-8 and differs by as much, more on another CPU. A step that trained
    # the average instead of the weights would differ by ~1e-3 (the learning rate).
    for step in (3, 6):
        shared = read_state_arrays(trained_tiny / "checkpoints", step)["params"]
        for a, b in zip(jax.tree.leaves(states[step]["params"]), jax.tree.leaves(shared), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    for step in range(2, 7):  # update t = step - 1 made step's weights
        d = decay_at(0.5, step - 1)
        before, now = weights_to_evaluate(states[step - 1]), weights_to_evaluate(states[step])
        weights = states[step]["params"]
        for a, w, got in zip(jax.tree.leaves(before), jax.tree.leaves(weights), jax.tree.leaves(now), strict=True):
            want = d * np.float64(np.asarray(a)) + (1 - d) * np.float64(np.asarray(w))
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-7)
    differ = lambda x, y: any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True))
    assert differ(weights_to_evaluate(states[6]), states[6]["params"])
    cfg, _, best, _, best_step = load_trained(run)
    assert best_step in (3, 6) and cfg.optim.ema_decay == 0.5
    assert by_path(best) == by_path(weights_to_evaluate(states[best_step]))  # the best checkpoint is the average
    latest, step = restore_params(run / "checkpoints", best)
    assert step == 6 and by_path(latest) == by_path(weights_to_evaluate(states[6]))
    # resumed from step 3, the run ends with the same weights and the same average, to the bit
    resumed = tmp_path / "resumed"
    shutil.copytree(run, resumed)
    for step in (4, 5, 6):
        shutil.rmtree(resumed / "checkpoints" / str(step))
    assert main([*tiny_run_args(repo_root, resumed, *TRAINED_TINY, *extra), "--resume"]) == 0
    again = read_state_arrays(resumed / "checkpoints", 6)
    assert by_path(again["params"]) == by_path(states[6]["params"])
    assert by_path(weights_to_evaluate(again)) == by_path(weights_to_evaluate(states[6]))


def by_path(tree) -> dict:
    """Leaves by path text (a checkpoint read back keys layers by ``'0'``, a model by ``0``), as bytes."""
    return {tuple(map(str, k)): np.asarray(v).tobytes() for k, v in nnx.traversals.flatten_mapping(tree).items()}


def test_the_model_card_says_the_weights_are_an_average(repo_root):
    """A card of a run with ``optim.ema_decay`` says that the released weights are the average, and one
    without says nothing of it."""
    from omnidistill.config import load_config
    from omnidistill.export.card_metadata import CardInfo, DataSummary, training_summary

    data = DataSummary(train_items=10, dev_items=5, languages=("en",), teachers=())
    for decay, said in [(0.99, "the weights released are their moving average (EMA, decay 0.99)"), (None, None)]:
        cfg = load_config(repo_root / "configs" / "tiny.yaml", [f"optim.ema_decay={'null' if decay is None else decay}"])
        optimiser = next(line for line in training_summary(cfg, 6, data, CardInfo(), None).splitlines() if "**Optimiser:**" in line)
        assert (said in optimiser) if said else ("moving average" not in optimiser)


@pytest.mark.slow
def test_resuming_with_another_optimizer_state_names_the_setting_and_keeps_the_checkpoints(tmp_path, repo_root, trained_tiny, capsys):
    """Turning ``optim.ema_decay`` on for a run trained without it changes the optimizer state's arrays.
    Every step then failed to restore alike, each logged as unreadable with orbax's tree dump, and the
    error said only ``none of the checkpoints [6, 3] could be restored``. It is now refused before any
    step is tried, naming the setting, and the checkpoints stay where they are."""
    import shutil

    from omnidistill.cli import main
    from tests.shared_runs import TRAINED_TINY, tiny_run_args

    run = tmp_path / "run"
    shutil.copytree(trained_tiny, run)
    assert main([*tiny_run_args(repo_root, run, *TRAINED_TINY, "optim.ema_decay=0.9", "train.max_steps=9"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"{run}: its checkpoints hold another train state than this config makes (arrays only in the checkpoint: opt_state/" in err
    assert "optim.ema_decay: checkpoint None != config 0.9: resume with the settings the run was trained with" in err
    assert "could be restored" not in err
    assert saved_steps(run) == [3, 6] and not (run / "checkpoints_unreadable").exists()
