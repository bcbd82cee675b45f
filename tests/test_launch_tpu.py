"""tpu_vm.sh run for real against a stub ``gcloud`` that fails where the real one would: the runtime image
per generation, the wait for a queued resource (loud on FAILED, on timeout, on a failing gcloud), and no
step after a failed one. The stub records every call; ``git`` is stubbed to write the archive."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

GCLOUD = r"""#!/usr/bin/env bash
printf '%s\n' "$*" >> "$STUB/calls"
prev=""; for a in "$@"; do [[ "$prev" == --command ]] && printf '%s\n' "$a" >> "$STUB/commands"; prev=$a; done
if [[ -n "${STUB_FAIL:-}" && "$*" == *"$STUB_FAIL"* ]]; then echo "ERROR: (gcloud) stub refuses: $*" >&2; exit 1; fi
case "$*" in
  "compute tpus queued-resources describe"*)
    state=$(head -n1 "$STUB/states")
    if [[ $(wc -l < "$STUB/states") -gt 1 ]]; then sed -i 1d "$STUB/states"; fi
    [[ "$state" == ACTIVE ]] && touch "$STUB/exists"
    echo "$state" ;;
  "compute tpus tpu-vm create"*) touch "$STUB/exists" ;;
  "compute tpus tpu-vm ssh"*|"compute tpus tpu-vm scp"*)
    [[ -e "$STUB/exists" ]] || { echo "ERROR: (gcloud.compute.tpus.tpu-vm) NOT_FOUND: node not found" >&2; exit 1; } ;;
esac
"""
GIT = """#!/usr/bin/env bash
printf 'git %s\\n' "$*" >> "$STUB/calls"
out=""; while [[ $# -gt 0 ]]; do [[ "$1" == -o ]] && out=$2; shift; done
[[ -n "$out" ]] && : > "$out"
"""


@pytest.fixture()
def stub(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("gcloud", GCLOUD), ("git", GIT)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "states").write_text("ACTIVE\n")
    return tmp_path


def launch(repo_root, stub, *args, states=("ACTIVE",), fail=""):
    (stub / "states").write_text("".join(f"{s}\n" for s in states))
    env = {
        **os.environ,
        "PATH": f"{stub / 'bin'}:{os.environ['PATH']}",
        "STUB": str(stub),
        "STUB_FAIL": fail,
        "OMNIDISTILL_POLL_SECONDS": "1",
        "TMPDIR": str(stub),
    }
    done = subprocess.run(
        ["bash", str(repo_root / "launch" / "tpu" / "tpu_vm.sh"), "--name", "od", "--zone", "z", *args, "--", "configs/tiny.yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    calls = (stub / "calls").read_text().splitlines() if (stub / "calls").exists() else []
    return done, calls


def test_queued_resource_is_waited_for_until_active_then_installed_and_trained(repo_root, stub):
    done, calls = launch(
        repo_root, stub, "--accelerator", "v5litepod-16", "--queued", states=("WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE")
    )
    assert done.returncode == 0, done.stderr
    kinds = [" ".join(c.split()[:4]) for c in calls]
    assert kinds == [
        "compute tpus queued-resources create",
        *["compute tpus queued-resources describe"] * 3,
        "git -C " + str(repo_root) + " archive",
        "compute tpus tpu-vm scp",
        "compute tpus tpu-vm ssh",
        "compute tpus tpu-vm ssh",
    ]
    assert "--runtime-version v2-alpha-tpuv5-lite" in calls[0]
    assert "WAITING_FOR_RESOURCES" in done.stderr and "is ACTIVE" in done.stderr
    assert "worker_setup.sh" in calls[-2] and "omnidistill-venv/bin/omnidistill train configs/tiny.yaml" in calls[-1]


@pytest.mark.parametrize("state", ["FAILED", "SUSPENDED"])
def test_a_queued_resource_that_cannot_become_active_stops_the_launch(repo_root, stub, state):
    done, calls = launch(repo_root, stub, "--accelerator", "v6e-8", "--queued", states=("WAITING_FOR_RESOURCES", state))
    assert done.returncode != 0 and f"od-qr is {state}" in done.stderr
    assert not any("tpu-vm" in c for c in calls)


def test_waiting_past_the_timeout_fails_and_says_how_to_clean_up(repo_root, stub):
    done, calls = launch(repo_root, stub, "--accelerator", "v5p-8", "--queued", "--wait-timeout", "1", states=("WAITING_FOR_RESOURCES",))
    assert done.returncode != 0 and "still WAITING_FOR_RESOURCES after 1s" in done.stderr
    assert "queued-resources delete od-qr" in done.stderr
    assert not any("tpu-vm" in c for c in calls)


def test_a_failing_gcloud_call_is_not_swallowed(repo_root, stub):
    done, calls = launch(repo_root, stub, "--accelerator", "v5p-8", "--queued", fail="queued-resources describe")
    assert done.returncode != 0 and "could not describe queued resource od-qr" in done.stderr
    done, calls = launch(repo_root, stub, "--accelerator", "v4-8", "--create", fail="tpu-vm create")
    assert done.returncode != 0 and not any("ssh" in c for c in calls)
    done, calls = launch(repo_root, stub, "--accelerator", "v4-8", "--create", fail="worker_setup.sh")
    assert done.returncode != 0 and not any("omnidistill train" in c for c in calls)


def test_training_an_absent_tpu_fails_as_gcloud_does(repo_root, stub):
    done, _ = launch(repo_root, stub, "--skip-install")
    assert done.returncode != 0 and "NOT_FOUND" in done.stderr


# Cloud TPU's "TPU software versions" page: the image for PyTorch and JAX per generation.
DOCUMENTED_RUNTIME = {
    "v6e-8": "v2-alpha-tpuv6e",
    "v5p-32": "v2-alpha-tpuv5",
    "v5litepod-16": "v2-alpha-tpuv5-lite",
    "v4-64": "tpu-ubuntu2204-base",
    "v3-8": "tpu-ubuntu2204-base",
}


@pytest.mark.parametrize("accelerator", sorted(DOCUMENTED_RUNTIME))
def test_each_generation_gets_its_documented_runtime(repo_root, stub, accelerator):
    done, calls = launch(repo_root, stub, "--accelerator", accelerator, "--create", "--skip-install")
    assert done.returncode == 0, done.stderr
    assert calls[0].endswith(f"--accelerator-type {accelerator} --version {DOCUMENTED_RUNTIME[accelerator]}")


def test_unknown_generation_and_old_python_are_refused(repo_root, stub):
    done, calls = launch(repo_root, stub, "--accelerator", "v9x-8", "--create")
    assert done.returncode == 2 and "pass --version" in done.stderr and calls == []
    done, calls = launch(repo_root, stub, "--accelerator", "v4-8", "--create", "--python", "3.10")
    assert done.returncode == 2 and "3.11 or newer" in done.stderr and calls == []


def test_staging_copies_data_and_configs_to_the_bucket_before_training(repo_root, stub):
    done, calls = launch(repo_root, stub, "--accelerator", "v4-8", "--create", "--skip-install", "--stage", "gs://b/od/")
    assert done.returncode == 0, done.stderr
    assert calls[1:3] == [
        f"storage rsync --recursive {repo_root}/data gs://b/od/data",
        f"storage rsync --recursive {repo_root}/configs gs://b/od/configs",
    ]


def test_worker_setup_builds_a_python_3_11_plus_environment_with_uv(repo_root, tmp_path):
    """With uv present (stubbed: it records its calls and makes the venv's python), no installer is fetched.

    The stub's python is a script that runs the interpreter under test by its own path: a symlink to
    it would lose a virtual environment's packages (Python finds ``pyvenv.cfg`` beside the link)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text(
        '#!/usr/bin/env bash\nprintf "uv %s\\n" "$*" >> "$LOG"\n'
        'if [[ "$1" == venv ]]; then mkdir -p "${@: -1}/bin"\n'
        '  printf \'#!/usr/bin/env bash\\nexec "%s" "$@"\\n\' "$PYEXE" > "${@: -1}/bin/python"; chmod +x "${@: -1}/bin/python"; fi\n'
    )
    uv.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "LOG": str(tmp_path / "log"),
        "HOME": str(tmp_path),
        "PYEXE": sys.executable,
    }
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["bash", str(repo_root / "launch" / "tpu" / "worker_setup.sh"), str(repo_root), str(venv), "3.12"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr  # the dev Python is >= 3.11, so the final check passes
    assert (tmp_path / "log").read_text().splitlines() == [
        f"uv venv --allow-existing --python 3.12 {venv}",
        f"uv pip install --python {venv}/bin/python -e {repo_root}[gcs] jax[tpu]",
    ]


def test_a_shared_compilation_cache_reaches_the_training_process_of_every_worker(repo_root, stub, tmp_path):
    """The ssh command, run as a worker's shell runs it (a stand-in ``omnidistill`` in the worker's venv
    prints what it got), trains with ``OMNIDISTILL_COMPILE_CACHE`` set to the bucket; without the option,
    the variable is not set."""
    worker = tmp_path / "worker"
    (worker / "omnidistill").mkdir(parents=True)
    fake = worker / "omnidistill-venv" / "bin" / "omnidistill"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/usr/bin/env bash\necho "cache=${OMNIDISTILL_COMPILE_CACHE-unset} args=$*"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    for extra, expected in ((["--compile-cache", "gs://b/xla cache"], "cache=gs://b/xla cache"), ([], "cache=unset")):
        (stub / "exists").touch()  # the TPU VM is there already
        done, _ = launch(repo_root, stub, "--skip-install", *extra)
        assert done.returncode == 0, done.stderr
        command = (stub / "commands").read_text().splitlines()[-1]
        env = {"PATH": os.environ["PATH"], "HOME": str(worker)}
        ran = subprocess.run(["bash", "-c", command], cwd=worker, env=env, capture_output=True, text=True, timeout=30)
        assert ran.stdout.strip() == f"{expected} args=train configs/tiny.yaml", ran.stderr
