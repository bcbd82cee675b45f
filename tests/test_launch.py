"""Launch scripts: their --dry-run prints exactly the gcloud / xpk / sbatch / process commands."""

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
    assert (
        lines[0]
        == "+ gcloud compute tpus tpu-vm create od --zone us-east5-a --accelerator-type v5p-32 --version tpu-ubuntu2204-base --spot"
    )
    assert lines[1].startswith("+ git -C ") and "archive --format=tar.gz" in lines[1]
    assert "tpu-vm scp" in lines[2] and "--worker=all" in lines[2]
    assert "pip install -q -e ." in lines[3] and "--worker=all" in lines[3]
    assert lines[4].startswith("+ gcloud compute tpus tpu-vm ssh od --zone us-east5-a --worker=all --command")
    assert "omnidistill train configs/mbert.yaml mesh.fsdp=16" in lines[4] and "runs/m b" in lines[4]


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
    assert "queued-resources wait od-qr" in lines[1]
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
