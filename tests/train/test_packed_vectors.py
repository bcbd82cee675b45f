"""The packed-vectors lever: AdamW over the undecayed arrays as one vector, the norm in one reduction."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import omnidistill.train.optimizer as optimizer
import omnidistill.train.step as train_step
from omnidistill.config import LossConfig, OptimConfig
from omnidistill.train.packed_vectors import adamw_vectors_packed, packed_global_norm
from omnidistill.train.state import TrainState
from tests.train.helpers import batch_arrays, tiny_setup

OPTIM = OptimConfig(lr=1e-3, head_lr=1e-2, weight_decay=0.1, layer_decay=0.8, warmup_ratio=0.3, grad_clip=None)


def three_steps(repo_root):
    """Parameters and optimizer state after three jitted train steps of the tiny setup."""
    graphdef, params, tx, ds = tiny_setup(repo_root, optim=OPTIM)
    step = jax.jit(train_step.make_train_step(graphdef, tx, loss_cfg=LossConfig(), dropout=False))
    state = TrainState(jnp.int32(0), params, tx.init(params), jax.random.PRNGKey(0))
    for i in range(3):
        state, metrics = step(state, batch_arrays(ds[i]))
        assert bool(metrics["finite"])
    return state, float(metrics["grad_norm"])


def test_packed_vectors_train_as_adamw_per_array(repo_root, monkeypatch):
    """Three steps with every group's vectors packed (encoder layers at their layer-decayed learning
    rates, the head at its own, weight decay on matrices) give the per-array step's parameters; the
    moments of each group's vectors are one array."""
    want, want_norm = three_steps(repo_root)
    monkeypatch.setattr(optimizer, "group_adamw", adamw_vectors_packed)
    monkeypatch.setattr(train_step, "gradient_norm", packed_global_norm)
    got, got_norm = three_steps(repo_root)
    # atol: the key biases, whose true gradient is 0, move by rounding noise (|b| < 1e-7), which the
    # compiler's fusions may order differently; a real update here is 1e-4 or more.
    for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got_norm, want_norm, rtol=1e-6)

    vectors = [x.size for x in jax.tree.leaves(want.params) if x.ndim == 1]
    moments = lambda state: [x for p, x in jax.tree_util.tree_leaves_with_path(state.opt_state) if "mu" in jax.tree_util.keystr(p)]
    packed = [x for x in moments(got) if x.ndim == 1]
    assert sum(x.size for x in packed) == sum(vectors) and len(packed) < len(vectors) / 4
    assert len(moments(got)) == len(moments(want)) - len(vectors) + len(packed)


def test_packed_vectors_take_weight_decay_on_matrices_only():
    """One update from zero moments: a matrix moves by its weight decay, a vector does not."""
    params = {"w": jnp.ones((2, 3)), "b": jnp.ones(3), "scale": jnp.ones(2)}
    mask = {"w": True, "b": False, "scale": False}
    zeros = jax.tree.map(jnp.zeros_like, params)
    packed = [adamw_vectors_packed(0.1, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.5, mask=mask, barrier=b) for b in (True, False)]
    for tx in (optax.adamw(0.1, weight_decay=0.5, mask=mask), *packed):
        updates, _ = tx.update(zeros, tx.init(params), params)
        np.testing.assert_allclose(updates["w"], -0.05 * np.ones((2, 3)))
        np.testing.assert_array_equal(updates["b"], np.zeros(3))
        np.testing.assert_array_equal(updates["scale"], np.zeros(2))


def test_packed_global_norm_is_the_global_norm():
    rng = np.random.default_rng(0)
    tree = {"big": jnp.asarray(rng.standard_normal((300, 300)), jnp.float32), "b": jnp.asarray(rng.standard_normal(7), jnp.float32)}
    tree["half"] = jnp.asarray(rng.standard_normal((4, 5)), jnp.bfloat16)
    np.testing.assert_allclose(float(packed_global_norm(tree, small=1000)), float(optax.tree.norm(tree)), rtol=1e-6)
    for bad in (jnp.nan, jnp.inf):
        assert not np.isfinite(float(packed_global_norm({**tree, "b": tree["b"].at[3].set(bad)}, small=1000)))
