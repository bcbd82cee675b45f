"""Exact resume after SIGKILL / SIGTERM in a real subprocess, corrupted checkpoints, mesh changes."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omnidistill.config import MeshConfig
from omnidistill.parallel.mesh import build_mesh, param_shardings
from omnidistill.runs.checkpoint import CheckpointError, RunCheckpoints, assert_finite, read_state_arrays
from omnidistill.train.state import TrainState
from tests.xla_env import child_env  # one CPU device: fast start-up

STEPS = 10


def train_cmd(repo_root: Path, run: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "omnidistill",
        "train",
        str(repo_root / "configs" / "tiny.yaml"),
        f"train.output_dir={run}",
        f"train.max_steps={STEPS}",
        "checkpoint.every_steps=1",
        "checkpoint.keep=3",
        "data.dev=[]",
        "data.length_buckets=[192]",  # one compiled step shape per process
        "model.attention=xla",  # cheaper under the suite's fast-compile flags, as TRAINED_TINY says (tests/shared_runs.py)
        "train.log_every_steps=1",
        f"data.train=[{repo_root}/data/sample/train.jsonl]",
        f"model.tokenizer={repo_root}/assets/tiny-wordpiece",
        *extra,
    ]


def finished_steps(run: Path) -> list[int]:
    ckpt = run / "checkpoints"
    return sorted(int(p.name) for p in ckpt.iterdir() if p.name.isdigit()) if ckpt.exists() else []


def final_params(run: Path, step: int = STEPS):
    return jax.tree.leaves(read_state_arrays(run / "checkpoints", step))


def interrupt(repo_root, run, sig, target, *extra) -> tuple[int, str]:
    """Start (or resume) the run, send ``sig`` once a checkpoint at step >= target exists."""
    proc = subprocess.Popen([*train_cmd(repo_root, run), *extra], env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not [s for s in finished_steps(run) if s >= target]:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted:\n" + proc.stdout.read().decode()[-2000:]
    proc.send_signal(sig)
    return proc.wait(timeout=240), proc.stdout.read().decode()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, repo_root):
    run = tmp_path_factory.mktemp("resume") / "straight"
    # the same run without the checkpoint at every step (checkpoints do not change the numbers)
    done = subprocess.run(
        [*train_cmd(repo_root, run), f"checkpoint.every_steps={STEPS}"], env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return final_params(run)


def assert_bit_identical(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_sigterm_then_sigkill_then_resume_is_bit_identical(tmp_path, repo_root, uninterrupted):
    """Preempted (SIGTERM: checkpoint + clean exit), resumed, killed hard (SIGKILL), resumed: the final
    parameters equal an uninterrupted run's bit for bit. The interruption steps are random."""
    rng = random.Random(7)
    run = tmp_path / "run"
    code, out = interrupt(repo_root, run, signal.SIGTERM, rng.randint(2, 3))
    step = max(finished_steps(run))
    assert code == 0 and f"preempted at step {step}" in out and step < STEPS
    code, _ = interrupt(repo_root, run, signal.SIGKILL, rng.randint(step + 2, step + 3), "--resume")
    assert code == -signal.SIGKILL and max(finished_steps(run)) < STEPS
    resumed = subprocess.run([*train_cmd(repo_root, run), "--resume"], env=child_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert max(finished_steps(run)) == STEPS
    assert_bit_identical(final_params(run), uninterrupted)
    # the log tells the run once: every step exactly once, in order, although steps were re-done
    logged = [json.loads(line)["step"] for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert logged == list(range(1, STEPS + 1))


# ---------------------------------------------------------------- in-process checkpoint behaviour


def small_state(mesh, value=1.0):
    params = {"w": jnp.full((8, 4), value), "b": jnp.zeros(4)}
    params = jax.device_put(params, param_shardings(params, mesh, []))
    return TrainState(step=jnp.int32(0), params=params, opt_state={"mu": params}, rng=jax.random.PRNGKey(0))


def data_iter():
    return iter(grain.MapDataset.range(100).shuffle(seed=0).repeat(None).batch(2).to_iter_dataset())


# orbax restores on an event loop of its own and closes it at the first unreadable array, while
# tensorstore reads of the same step are still in flight; under CPU load one finishes later, and
# tensorstore's native callback posts it to the closed loop ("Event loop is closed", raised from
# call_soon_threadsafe with no Python caller: an unraisable exception, not an error of this code)
@pytest.mark.filterwarnings("ignore:Exception ignored in. None:pytest.PytestUnraisableExceptionWarning")
def test_corrupted_latest_step_falls_back_to_previous(tmp_path, caplog):
    mesh = build_mesh(MeshConfig(data=8))
    ckpts = RunCheckpoints(tmp_path, keep=3)
    it = data_iter()
    ckpts.save(1, small_state(mesh, 1.0), it)
    next(it)
    ckpts.save(2, small_state(mesh, 2.0), it)
    ckpts.wait()
    for f in (tmp_path / "checkpoints" / "2" / "state").rglob("*"):
        if f.is_file() and f.name != "_METADATA":
            f.write_bytes(b"garbage")
    (tmp_path / "checkpoints" / "3.orbax-checkpoint-tmp-1234").mkdir()  # an unfinished write is ignored
    it2 = data_iter()
    resumed = RunCheckpoints(tmp_path, keep=3)
    state, step = resumed.restore(small_state(mesh, 0.0), it2)
    assert step == 1 and float(state.params["w"][0, 0]) == 1.0
    assert "unreadable" in caplog.text
    np.testing.assert_array_equal(next(it2), next(data_iter()))  # iterator restored to step 1's position
    # the unreadable step is set aside, not deleted, and the resumed run can write step 2 again
    assert (tmp_path / "checkpoints_unreadable" / "2" / "state").is_dir()
    resumed.save(2, small_state(mesh, 4.0), it2)
    resumed.wait()
    assert resumed.latest_step() == 2
    resumed.close()
    ckpts.close()


def test_restore_onto_a_different_mesh(tmp_path):
    saved = small_state(build_mesh(MeshConfig(data=8)), 3.0)
    ckpts = RunCheckpoints(tmp_path)
    ckpts.save(5, saved, data_iter())
    ckpts.wait()
    ckpts.close()
    fsdp_mesh = build_mesh(MeshConfig(data=1, fsdp=8))
    restored = RunCheckpoints(tmp_path)
    state, step = restored.restore(small_state(fsdp_mesh, 0.0), data_iter())
    restored.close()
    assert step == 5 and float(state.params["w"].sum()) == 3.0 * 32
    assert state.params["w"].sharding.spec[0] == "fsdp"


def test_nan_parameters_are_never_saved(tmp_path):
    bad = small_state(build_mesh(MeshConfig(data=8)), float("nan"))
    ckpts = RunCheckpoints(tmp_path)
    with pytest.raises(CheckpointError, match="non-finite"):
        ckpts.save(1, bad, data_iter())
    ckpts.close()


def test_one_process_saves_replicated_arrays_without_compiling(tmp_path):
    """One process holds every replica: a state replicated over 8 devices is written from its first
    replica, with no compiled program per array and replica (orbax's replica-parallel slices)."""
    from jax._src.dispatch import BACKEND_COMPILE_EVENT

    mesh = build_mesh(MeshConfig(data=8))
    params = {"w": jnp.full((24, 5), 2.0), "b": jnp.ones(5), "v": jnp.ones((16, 3))}  # shapes no other test saves
    state = TrainState(jnp.int32(0), jax.device_put(params, param_shardings(params, mesh, [])), {}, jax.random.PRNGKey(0))
    ckpts = RunCheckpoints(tmp_path)
    assert_finite(state.params, "parameters")  # its one program compiled before counting
    compiles = []

    def listen(event: str, seconds: float, **_) -> None:
        if event == BACKEND_COMPILE_EVENT:
            compiles.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        ckpts.save(1, state, data_iter())
        ckpts.wait()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    ckpts.close()
    assert compiles == []
    assert float(read_state_arrays(tmp_path / "checkpoints", 1)["params"]["w"].sum()) == 2.0 * 24 * 5


def test_saving_from_one_process_logs_no_handler_override_warning(caplog):
    """Every run logged orbax's "Type handler registry ... overriding" WARNING at its first save: the
    override (whole arrays from one process) is ours and meant, so it is registered quietly."""
    import logging

    import orbax.checkpoint as ocp

    from omnidistill.runs import checkpoint

    ocp.type_handlers.register_type_handler(jax.Array, ocp.type_handlers.ArrayHandler(), override=True)  # orbax's own back
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        checkpoint._whole_arrays_from_one_process()
    assert ocp.type_handlers.get_type_handler(jax.Array) is checkpoint._WHOLE_ARRAYS
    assert [r.getMessage() for r in caplog.records if "Type handler registry" in r.getMessage()] == []
    with caplog.at_level(logging.WARNING):  # the filter is gone afterwards: orbax's other warnings still show
        ocp.type_handlers.register_type_handler(jax.Array, ocp.type_handlers.ArrayHandler(), override=True)
    assert any("Type handler registry" in r.getMessage() for r in caplog.records)
    checkpoint._whole_arrays_from_one_process()
