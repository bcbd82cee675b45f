"""The train step's XLA options: on CPU the donated optimizer state is updated in place, not copied
first (``train/step.py: TRAIN_STEP_COMPILER_OPTIONS``), with the same values to the bit."""

import re

import jax
import numpy as np
import pytest

from omnidistill.config import MeshConfig, load_config
from omnidistill.parallel.mesh import batch_sharding, build_mesh, global_batch_array, replicated
from omnidistill.train.setup import check_run_config, init_state
from omnidistill.train.step import TRAIN_STEP_COMPILER_OPTIONS, make_train_step, train_step_compiler_options
from tests.train.helpers import batch_arrays, tiny_setup
from tests.xla_env import emitters_as_users_compile


def copied_arguments(hlo: str) -> int:
    """How many ``copy`` instructions of the compiled program copy one of its entry parameters."""
    entry = hlo[hlo.index("\nENTRY ") :]
    params = set(re.findall(r"%(\S+) = \S+ parameter\(\d+\)", entry))
    copies = re.findall(r"= \S+ copy\(%([^,)\s]+)\)", entry)
    return sum(operand in params for operand in copies)


def test_the_donated_state_is_updated_in_place_with_the_same_values(repo_root):
    mesh = build_mesh(MeshConfig(), devices=jax.devices()[:1])
    graphdef, params, tx, ds = tiny_setup(repo_root)
    batch = {k: global_batch_array(v, batch_sharding(mesh)) for k, v in batch_arrays(ds[0]).items()}
    # XLA's CPU fusion emitters, as users compile: with the suite's older emitters at level 0
    # (tests/xla_env.py) the in-place update rounds one value a float32 ulp apart
    emitters = emitters_as_users_compile()
    results = {}
    for name, options in (("xla default", emitters), ("the step's", {**train_step_compiler_options(), **emitters})):
        state = init_state(params, tx, 0, mesh, ())
        shardings = jax.tree.map(lambda x: x.sharding, state)
        step = jax.jit(
            make_train_step(graphdef, tx, dropout=False),
            in_shardings=(shardings, batch_sharding(mesh)),
            out_shardings=(shardings, replicated(mesh)),
            donate_argnums=0,
            compiler_options=options,
        )
        with jax.set_mesh(mesh):
            compiled = step.lower(state, batch).compile()
            for _ in range(2):
                state, metrics = compiled(state, batch)
        results[name] = (copied_arguments(compiled.as_text()), jax.tree.map(np.asarray, (state, metrics)))
    # XLA's default copies every moment of AdamW (two per parameter array) before it updates it
    assert results["xla default"][0] >= 2 * len(jax.tree.leaves(params))
    assert results["the step's"][0] == 0
    for a, b in zip(jax.tree.leaves(results["xla default"][1]), jax.tree.leaves(results["the step's"][1]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_train_compiler_options_go_over_the_defaults_and_are_checked_by_name(repo_root, monkeypatch):
    undone = {"xla_cpu_copy_insertion_use_region_analysis": False}
    assert train_step_compiler_options(undone) == {**TRAIN_STEP_COMPILER_OPTIONS, **undone} == undone
    monkeypatch.chdir(repo_root)
    cfg = load_config("configs/tiny.yaml")
    cfg.train.compiler_options = {"xla_cpu_no_such_option": True}
    with pytest.raises(ValueError, match=r"train.compiler_options: .*xla_cpu_no_such_option"):
        check_run_config(cfg)
