"""Real multi-process training on CPU: 2 JAX processes (coordinator on 127.0.0.1) x 2 devices each, data
sharded across processes (each reading its own rows from the token cache), equal to one process with
8 devices tokenizing on the fly (the session's shared run)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from omnidistill.runs.checkpoint import read_state_arrays
from tests.shared_runs import TRAINED_TINY, tiny_run_args
from tests.xla_env import child_env

STEPS = 6  # the shared run's (tests/shared_runs.py: TRAINED_TINY)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(repo_root, run, *extra):
    """The session's shared ``trained_tiny`` run (6 steps, dev evaluations at 3 and 6, the tiny default's
    dropout), here checkpointed at 3 and 6 (step 6 is saved as best and as latest at once: their
    barriers must not collide) with one compiled dev-evaluation shape."""
    overrides = ("checkpoint.every_steps=3", "train.log_every_steps=1", "eval.length_step=192")
    return [sys.executable, "-m", "omnidistill", *tiny_run_args(repo_root, run, *TRAINED_TINY, *overrides, *extra)]


def run_pair(cmd: list[str], devices: int, timeout: float = 400, **env: str) -> list[str]:
    """Run ``cmd`` as the 2 processes of one JAX job (coordinator on 127.0.0.1) with ``devices`` CPU
    devices each; their outputs, after both ended with status 0 (a hang fails after ``timeout`` s)."""
    port = free_port()
    procs = [
        subprocess.Popen(
            cmd,
            env=child_env(devices, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i), **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"the two processes of {cmd[1:3]} did not end in {timeout} s (a hang)")
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    return outs


def run_multi(repo_root, run, *extra) -> None:
    run_pair(command(repo_root, run, *extra), 2)


def final_params(run):
    return jax.tree.leaves(read_state_arrays(run / "checkpoints", STEPS))


@pytest.mark.slow
def test_two_processes_equal_one_and_resume_exactly(tmp_path, repo_root, trained_tiny):
    """Hybrid mesh: data parallel across the 2 processes (DCN granules) x FSDP over the 2 devices within
    each. The two processes read the token cache (both build it at once on first use; one rename wins)
    and each collates only its own rows; the shared run (one process, 8 devices, the same dropout masks:
    they do not depend on the sharding) tokenized the whole batch on the fly. Both processes resumed
    from step 3 end bit-identical to their uninterrupted run."""
    run, mesh = tmp_path / "multi", ("mesh.data=1", "mesh.fsdp=2", "mesh.dcn_data=2", f"data.token_cache={tmp_path / 'tokens'}")
    run_multi(repo_root, run, *mesh)
    assert len(list((tmp_path / "tokens").glob("train-*/tokens.npy"))) == 1  # one finished cache, no leftovers
    assert not [p for p in (tmp_path / "tokens").iterdir() if p.name.startswith(".")]
    for a, b in zip(final_params(run), final_params(trained_tiny), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-5)
    multi_dev = json.loads((run / "best_metrics.json").read_text())["dev_mae"]
    single_dev = json.loads((trained_tiny / "best_metrics.json").read_text())["dev_mae"]
    assert multi_dev == pytest.approx(single_dev, abs=1e-5)
    names = sorted(p.name for p in (run / "checkpoints" / str(STEPS) / "data").iterdir() if p.name.startswith("process_"))
    assert names == ["process_0-of-2.json", "process_1-of-2.json"]  # one grain iterator state per process

    resumed = tmp_path / "resumed"
    shutil.copytree(run, resumed)
    shutil.rmtree(resumed / "checkpoints" / str(STEPS))  # as if both processes had died after step 3's checkpoint
    run_multi(repo_root, resumed, *mesh, "--resume")
    for a, b in zip(final_params(resumed), final_params(run), strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))


CACHED_PSUM = """
import json, jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from omnidistill.train.distributed import maybe_initialize_distributed
hits = []
jax.monitoring.register_event_listener(lambda event, **_: hits.append(event) if event.endswith("/cache_hits") else None)
assert maybe_initialize_distributed()
mesh = jax.make_mesh((2,), ("data",), devices=jax.devices())
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), np.arange(4.0, dtype=np.float32) + 4 * jax.process_index(), (8,))
total = jax.device_get(jax.jit(lambda x: jnp.sum(2 * x))(x))
print(json.dumps({"sum": float(total), "cache_hits": len(hits), "cache_on": bool(jax.config.jax_enable_compilation_cache)}))
"""


def test_a_second_cpu_job_with_the_compilation_cache_does_not_hang(tmp_path):
    """A sum across 2 processes, twice, with a persistent compilation cache. In the second job process 0
    loads the program from the cache and process 1 (whose cache key differs: no hit) compiles it; on
    jaxlib 0.12.1 that job hung (train/distributed.py: CACHED_CPU_COLLECTIVES_HANG), so there the cache
    is now off in multi-process CPU jobs, while older jaxlibs keep it."""
    from omnidistill.train.distributed import CACHED_CPU_COLLECTIVES_HANG, jaxlib_version

    cache = {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "xla"), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    cache["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"  # keep the tiny program
    jobs = [run_pair([sys.executable, "-c", CACHED_PSUM], 1, timeout=90, **cache) for _ in range(2)]
    results = [[json.loads(out.strip().splitlines()[-1]) for out in outs] for outs in jobs]
    assert [r["sum"] for job in results for r in job] == [2 * sum(range(8))] * 4
    if jaxlib_version() >= CACHED_CPU_COLLECTIVES_HANG:
        assert not any(r["cache_on"] for job in results for r in job)
        assert all("compilation cache off for this run" in out for outs in jobs for out in outs)
    else:  # the second job's process 0 ran the cached program: the path that hangs on later jaxlibs
        assert [r["cache_hits"] for r in results[1]] == [1, 0]


def test_jaxlib_versions_compare_by_their_first_three_numbers():
    from omnidistill.train.distributed import CACHED_CPU_COLLECTIVES_HANG, jaxlib_version

    assert jaxlib_version("0.12.0.1") == (0, 12, 0) < CACHED_CPU_COLLECTIVES_HANG
    assert jaxlib_version("0.12.1") == CACHED_CPU_COLLECTIVES_HANG
    assert jaxlib_version("0.13.0rc1") == (0, 13, 0) > CACHED_CPU_COLLECTIVES_HANG
    assert jaxlib_version("0.12.10.dev20261201") == (0, 12, 10)


def test_slurm_one_task_per_node_sees_every_local_gpu():
    from omnidistill.train.distributed import slurm_local_device_ids

    node = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "8"}
    assert slurm_local_device_ids(node) == list(range(8))
    assert slurm_local_device_ids({**node, "SLURM_NTASKS": "16"}) is None  # one task per GPU: JAX's own choice is right
    assert slurm_local_device_ids({**node, "JAX_LOCAL_DEVICE_IDS": "0,1"}) is None
    assert slurm_local_device_ids({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}) == [0, 1, 2, 3]
    assert slurm_local_device_ids({}) is None


SLURM_PROBE = """
import json, jax
from omnidistill.train.distributed import maybe_initialize_distributed
from omnidistill.config import MeshConfig
from omnidistill.parallel.mesh import build_mesh
assert maybe_initialize_distributed()
mesh = build_mesh(MeshConfig(data=-1))
print(json.dumps({"process": jax.process_index(), "processes": jax.process_count(),
                  "visible": jax.config.values.get("jax_cuda_visible_devices"),
                  "local_in_mesh": sorted(d.id for d in mesh.devices.flat if d.process_index == jax.process_index()),
                  "local": sorted(d.id for d in jax.local_devices()), "mesh_size": int(mesh.devices.size)}))
"""


def test_simulated_slurm_job_puts_every_local_device_in_the_mesh():
    """Two processes with a SLURM job's environment (one task per node, 2 devices each): JAX's own
    detection would restrict each to device SLURM_LOCALID=0; every local device must be in the mesh."""
    rng = np.random.default_rng()
    for _ in range(100):  # JAX derives the coordinator port from the job id (61440 + id % 4096): pick a free one
        port = int(rng.integers(61440, 65536))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
    job = str(port - 61440)
    procs = []
    for i in range(2):
        slurm = {"SLURM_JOB_ID": job, "SLURM_STEP_NODELIST": "127.0.0.1", "SLURM_NTASKS": "2", "SLURM_PROCID": str(i),
                 "SLURM_LOCALID": "0", "SLURM_STEP_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "2", "OMNIDISTILL_DISTRIBUTED": "1"}  # fmt: skip
        procs.append(
            subprocess.Popen([sys.executable, "-c", SLURM_PROBE], env=child_env(2, **slurm), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        )
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()[-3000:]
    results = [json.loads(out.decode().strip().splitlines()[-1]) for out, _ in outs]
    for r in results:
        assert r["processes"] == 2 and r["mesh_size"] == 4
        assert r["visible"] == "0,1"  # without the fix JAX sets "0" (SLURM_LOCALID): one GPU per node
        assert r["local_in_mesh"] == r["local"] and len(r["local"]) == 2


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("sweep", ["configs/ablations/heads.yaml", "--output-dir", "OUT"]),
        ("eval", ["OUT"]),
        ("score", ["--model", "OUT", "--input", "data/sample/test.jsonl", "--output", "OUT/scores.jsonl"]),
    ],
)
def test_one_process_commands_refuse_several_processes(tmp_path, repo_root, command, args):
    """Without a distributed start every process of a pod would do all of a sweep's, eval's or score's
    work on its own and write the same files; each joins the processes, sees several, and refuses."""
    port = free_port()
    out = str(tmp_path / "out")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "omnidistill", command, *(a.replace("OUT", out) for a in args)],
            env=child_env(1, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=repo_root,
        )
        for i in range(2)
    ]
    for p in procs:
        output = p.communicate(timeout=180)[0]
        assert p.returncode == 2, output[-3000:]
        assert f"{command} runs in one process, and this is one of 2" in output
    assert not (tmp_path / "out").exists()
