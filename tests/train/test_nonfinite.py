"""NaN/Inf losses never update parameters; the policy stops the run or skips and counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omnidistill import losses
from omnidistill.config import LossConfig, load_config
from omnidistill.train import sinks
from omnidistill.train.loop import TrainError, train
from omnidistill.train.state import TrainState
from omnidistill.train.step import make_train_step
from tests.train.helpers import batch_arrays, tiny_setup


def nan_loss(logits, scores, labels, mask, **_):
    total, count = losses.masked_mse(logits, scores, labels, mask)
    return total * jnp.nan, count


@pytest.fixture()
def nan_registered(monkeypatch):
    monkeypatch.setitem(losses.LOSSES, "nan_for_tests", nan_loss)


def first_step(repo_root, loss: LossConfig):
    """(initial train state, the un-jitted train step, the first batch) of the tiny setup."""
    graphdef, params, tx, ds = tiny_setup(repo_root)
    state = TrainState(jnp.int32(0), params, tx.init(params), jax.random.PRNGKey(0))
    return state, make_train_step(graphdef, tx, loss_cfg=loss, dropout=False), batch_arrays(ds[0])


def test_step_leaves_state_unchanged_on_nan(repo_root, nan_registered):
    state, step, batch = first_step(repo_root, LossConfig(name="nan_for_tests"))
    new, metrics = jax.jit(step)(state, batch)
    assert not bool(metrics["finite"])
    for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(state.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def nan_gradient_loss(logits, scores, labels, mask, **_):
    """A finite loss whose gradient is NaN: 0 · sqrt(|0|) is 0, and its derivative 0 · ∞."""
    total, count = losses.masked_mse(logits, scores, labels, mask)
    return total + 0.0 * jnp.sum(jnp.sqrt(jnp.abs(logits - jax.lax.stop_gradient(logits)))), count


def test_a_finite_loss_with_a_nan_gradient_leaves_state_unchanged(repo_root, monkeypatch):
    monkeypatch.setitem(losses.LOSSES, "nan_gradient_for_tests", nan_gradient_loss)
    state, step, batch = first_step(repo_root, LossConfig(name="nan_gradient_for_tests"))
    new, metrics = jax.jit(step)(state, batch)
    assert np.isfinite(float(metrics["loss"])) and not np.isfinite(float(metrics["grad_norm"]))
    assert not bool(metrics["finite"])
    for a, b in zip(jax.tree.leaves((new.params, new.opt_state)), jax.tree.leaves((state.params, state.opt_state)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_step_tests_finiteness_on_the_loss_and_the_gradient_norm_only(repo_root):
    """The gradients are read once for their global norm, which is also the finiteness test: no
    isfinite reduction per gradient array (``update_is_finite``), whatever the number of arrays."""
    state, step, batch = first_step(repo_root, LossConfig())
    jaxpr = jax.make_jaxpr(step)(state, batch)
    tests = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "is_finite"]
    assert len(jax.tree.leaves(state.params)) > 10
    assert [e.invars[0].aval.shape for e in tests] == [(), ()]


def tiny_cfg(repo_root, tmp_path, policy):
    return load_config(
        repo_root / "configs" / "tiny.yaml",
        [
            f"train.output_dir={tmp_path / policy}",
            "train.max_steps=3",
            "loss.name=nan_for_tests",
            f"train.nonfinite={policy}",
            f"data.train=[{repo_root}/data/sample/train.jsonl]",
            "data.dev=[]",
            "data.length_buckets=[192]",  # one compiled step shape
            f"model.tokenizer={repo_root}/assets/tiny-wordpiece",
        ],
    )


def test_stop_policy_raises_and_closes_the_sinks_as_failed(repo_root, tmp_path, nan_registered, monkeypatch):
    """The sinks are closed when training raises, told that it failed (W&B marks the run so); TensorBoard's
    writer was left to an exit hook that fails on Python >= 3.12 (no new threads at shutdown)."""
    closed, close = [], sinks.Sinks.close
    monkeypatch.setattr(sinks.Sinks, "close", lambda self, failed=False: closed.append(failed) or close(self, failed))
    with pytest.raises(TrainError, match="non-finite loss or gradient at step 1"):
        train(tiny_cfg(repo_root, tmp_path, "stop"))
    assert closed == [True]


def test_skip_policy_counts(repo_root, tmp_path, nan_registered):
    summary = train(tiny_cfg(repo_root, tmp_path, "skip"))
    assert summary["skipped_updates"] == 3 and summary["steps"] == 3
