"""Launch scripts: their --dry-run prints exactly the gcloud / xpk / sbatch / process commands."""

import os
import shlex
import stat
import subprocess

import pytest


def dry(repo_root, script, *args):
    done = subprocess.run(["bash", str(repo_root / "launch" / script), *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("+ ")]


def test_tpu_vm_create_install_train(repo_root):
    lines = dry(
        repo_root,
        "tpu/tpu_vm.sh",
        "--name",
        "od",
        "--zone",
        "us-east5-a",
        "--accelerator",
        "v5p-32",
        "--create",
        "--spot",
        "--dry-run",
        "--",
        "configs/mbert.yaml",
        "mesh.fsdp=16",
        "train.output_dir=/mnt/gcs/runs/m b",
    )
    assert lines[0] == "+ gcloud compute tpus tpu-vm create od --zone us-east5-a --accelerator-type v5p-32 --version v2-alpha-tpuv5 --spot"
    assert lines[1].startswith("+ git -C ") and "archive --format=tar.gz" in lines[1]
    assert "tpu-vm scp" in lines[2] and "--worker=all" in lines[2]
    assert "worker_setup.sh $HOME/omnidistill $HOME/omnidistill-venv 3.12" in lines[3] and "--worker=all" in lines[3]
    assert lines[4].startswith("+ gcloud compute tpus tpu-vm ssh od --zone us-east5-a --worker=all --command")
    assert "omnidistill-venv/bin/omnidistill train configs/mbert.yaml mesh.fsdp=16" in lines[4] and "runs/m b" in lines[4]


def test_tpu_queued_resource_and_reuse(repo_root):
    lines = dry(
        repo_root,
        "tpu/tpu_vm.sh",
        "--name",
        "od",
        "--zone",
        "z",
        "--accelerator",
        "v4-64",
        "--queued",
        "--project",
        "p",
        "--skip-install",
        "--dry-run",
        "--",
        "configs/tiny.yaml",
    )
    assert lines[0] == (
        "+ gcloud compute tpus queued-resources create od-qr --node-id od --zone z --accelerator-type v4-64 "
        "--runtime-version tpu-ubuntu2204-base --project p"
    )
    assert lines[1] == "+ gcloud compute tpus queued-resources describe od-qr --zone z --project p --format 'value(state.state)'"
    assert len(lines) == 3 and "omnidistill train configs/tiny.yaml" in lines[2]


def test_xpk_multislice(repo_root):
    (line,) = dry(
        repo_root,
        "tpu/xpk.sh",
        "--cluster",
        "c",
        "--workload",
        "w",
        "--tpu-type",
        "v5p-128",
        "--num-slices",
        "2",
        "--image",
        "img:1",
        "--dry-run",
        "--",
        "configs/mbert.yaml",
        "mesh.dcn_data=2",
    )
    assert line.startswith(
        "+ xpk workload create --cluster c --workload w --tpu-type v5p-128 --num-slices 2 --docker-image img:1 --command"
    )
    assert "mesh.dcn_data=2" in line


def test_xpk_gives_the_containers_training_process_the_shared_compilation_cache(repo_root, tmp_path):
    """The workload's --command, run by a shell as the container runs it (a stand-in ``omnidistill`` on
    the PATH prints what it got): with --compile-cache it trains with OMNIDISTILL_COMPILE_CACHE set."""
    fake = tmp_path / "bin" / "omnidistill"
    fake.parent.mkdir()
    fake.write_text('#!/usr/bin/env bash\necho "cache=${OMNIDISTILL_COMPILE_CACHE-unset} args=$*"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    base = ["--cluster", "c", "--workload", "w", "--tpu-type", "v5p-8", "--image", "img:1", "--dry-run"]
    for extra, expected in ((["--compile-cache", "gs://b/xla cache"], "cache=gs://b/xla cache"), ([], "cache=unset")):
        (line,) = dry(repo_root, "tpu/xpk.sh", *base, *extra, "--", "configs/mbert.yaml", "mesh.fsdp=4")
        words = shlex.split(line[2:])
        command = words[words.index("--command") + 1]
        env = {"PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
        ran = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=30)
        assert ran.stdout.strip() == f"{expected} args=train configs/mbert.yaml mesh.fsdp=4", ran.stderr


def test_xpk_builds_the_shipped_dockerfile_and_runs_that_image(repo_root):
    build, push, create = dry(
        repo_root,
        "tpu/xpk.sh",
        "--cluster",
        "c",
        "--workload",
        "w",
        "--tpu-type",
        "v6e-16",
        "--image",
        "r/od:1",
        "--build",
        "--dry-run",
        "--",
        "configs/tiny.yaml",
    )
    assert build == f"+ docker build -f {repo_root}/launch/tpu/Dockerfile -t r/od:1 {repo_root}"
    assert push == "+ docker push r/od:1" and "--docker-image r/od:1" in create


def test_the_dockerfile_copies_only_what_the_repository_has(repo_root):
    """Every COPY source exists, and the extras it installs are declared in pyproject.toml."""
    import re
    import tomllib

    text = (repo_root / "launch" / "tpu" / "Dockerfile").read_text()
    sources = [src for line in text.splitlines() if line.startswith("COPY ") for src in line.split()[1:-1]]
    assert sources and all((repo_root / src).exists() for src in sources), sources
    extras = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (wanted,) = re.findall(r"pip install '\.\[(\w+)\]'", text)
    assert wanted in extras


def test_slurm_submit(repo_root):
    (line,) = dry(
        repo_root,
        "gpu/submit_slurm.sh",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--partition",
        "gpu",
        "--dry-run",
        "--",
        "configs/mbert.yaml",
        "mesh.dcn_data=2",
    )
    assert line.startswith("+ sbatch --nodes 2 --gpus-per-node 8 --job-name omnidistill --partition gpu ")
    assert line.endswith("launch/gpu/slurm.sbatch configs/mbert.yaml mesh.dcn_data=2")
    assert "srun" in (repo_root / "launch" / "gpu" / "slurm.sbatch").read_text()


def test_local_multi_gpu_processes(repo_root):
    assert dry(repo_root, "gpu/local_multi_gpu.sh", "--dry-run", "--", "configs/mbert.yaml") == ["+ omnidistill train configs/mbert.yaml"]
    lines = dry(repo_root, "gpu/local_multi_gpu.sh", "--processes", "2", "--gpus", "8", "--dry-run", "--", "configs/mbert.yaml")
    assert lines == [
        "+ env CUDA_VISIBLE_DEVICES=0,1,2,3 JAX_COORDINATOR_ADDRESS=127.0.0.1:12355 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 "
        "omnidistill train configs/mbert.yaml",
        "+ env CUDA_VISIBLE_DEVICES=4,5,6,7 JAX_COORDINATOR_ADDRESS=127.0.0.1:12355 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=1 "
        "omnidistill train configs/mbert.yaml",
    ]


@pytest.mark.parametrize(
    "script,args", [("tpu/tpu_vm.sh", ["--zone", "z"]), ("tpu/xpk.sh", ["--cluster", "c"]), ("gpu/submit_slurm.sh", ["--bogus"])]
)
def test_bad_arguments_fail_clearly(repo_root, script, args):
    done = subprocess.run(["bash", str(repo_root / "launch" / script), *args, "--dry-run"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stderr.startswith("error:")


@pytest.mark.parametrize("script", ["tpu/tpu_vm.sh", "tpu/xpk.sh", "gpu/submit_slurm.sh", "gpu/local_multi_gpu.sh"])
def test_help_prints_the_scripts_usage_and_runs_nothing(repo_root, script):
    path = repo_root / "launch" / script
    header = [line[2:] for line in path.read_text().splitlines()[1:] if line.startswith("# ")]
    for flag in ("-h", "--help"):
        done = subprocess.run(["bash", str(path), flag], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and not done.stderr, done.stderr
        assert done.stdout.splitlines()[0] == header[0] and "--dry-run" in done.stdout and "+ " not in done.stdout
