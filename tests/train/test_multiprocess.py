"""Real multi-process training on CPU: 2 JAX processes (coordinator on 127.0.0.1) x 2 devices each, data
sharded across processes, equal to one process with 4 devices."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from omnidistill.runs.checkpoint import read_state_arrays

STEPS = 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(repo_root, run, *extra):
    return [
        sys.executable,
        "-m",
        "omnidistill",
        "train",
        str(repo_root / "configs" / "tiny.yaml"),
        f"train.output_dir={run}",
        f"train.max_steps={STEPS}",
        "train.eval_every_steps=6",
        "checkpoint.every_steps=3",
        "train.log_every_steps=1",
        f"data.train=[{repo_root}/data/sample/train.jsonl]",
        f"data.dev=[{repo_root}/data/sample/dev.jsonl]",
        f"model.tokenizer={repo_root}/assets/tiny-wordpiece",
        "model.dropout=0.0",
        *extra,
    ]


def env(devices: int, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    e.update({"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}", "JAX_PLATFORMS": "cpu", **extra})
    return e


def run_multi(repo_root, run, *extra) -> None:
    port = free_port()
    procs = [
        subprocess.Popen(
            command(repo_root, run, *extra),
            env=env(2, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=400)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]


def final_params(run):
    return jax.tree.leaves(read_state_arrays(run / "checkpoints", STEPS))


@pytest.fixture(scope="module")
def single(tmp_path_factory, repo_root):
    run = tmp_path_factory.mktemp("mp") / "single"
    done = subprocess.run(command(repo_root, run), env=env(4), capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def test_two_processes_equal_one(tmp_path, repo_root, single):
    """Hybrid mesh: data parallel across the 2 processes (DCN granules) x 2 devices within each."""
    run = tmp_path / "multi"
    run_multi(repo_root, run, "mesh.data=2", "mesh.dcn_data=2")
    for a, b in zip(final_params(run), final_params(single), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-5)
    multi_dev = json.loads((run / "best_metrics.json").read_text())["dev_mae"]
    single_dev = json.loads((single / "best_metrics.json").read_text())["dev_mae"]
    assert multi_dev == pytest.approx(single_dev, abs=1e-5)
    names = sorted(p.name for p in (run / "checkpoints" / str(STEPS) / "data").iterdir() if p.name.startswith("process_"))
    assert names == ["process_0-of-2.json", "process_1-of-2.json"]  # one grain iterator state per process
