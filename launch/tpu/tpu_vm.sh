#!/usr/bin/env bash
# Train on a Cloud TPU VM or pod slice with gcloud: create (or reuse) the TPU, copy this checkout to
# every worker, install it, and start `omnidistill train` on all workers at once (JAX finds its peers
# on TPU VMs by itself, so no coordinator flags are needed).
#
#   launch/tpu/tpu_vm.sh --name od-v5p --zone us-east5-a --accelerator v5p-32 --create \
#       -- configs/mbert.yaml mesh.fsdp=16 train.output_dir=/mnt/gcs/runs/mbert
#
# Options:
#   --name NAME            TPU VM name (required)
#   --zone ZONE            zone (required)
#   --accelerator TYPE     e.g. v5p-32, v5litepod-16, v4-64 (required with --create/--queued)
#   --version VERSION      TPU software version (default: tpu-ubuntu2204-base)
#   --project PROJECT      GCP project (default: gcloud's configured project)
#   --create               create the TPU VM first
#   --queued               create it through a queued resource instead (waits for capacity)
#   --spot                 request spot capacity
#   --skip-install         do not copy and install the project (reuse what is on the workers)
#   --dry-run              print the commands instead of running them
# Everything after `--` is the training config and its overrides. train.output_dir should be on
# storage every worker shares (a gcsfuse mount or NFS); checkpoints are written from all workers.
set -euo pipefail
source "$(dirname "$0")/../common.sh"

NAME="" ZONE="" ACCEL="" VERSION="tpu-ubuntu2204-base" PROJECT="" CREATE=0 QUEUED=0 SPOT=0 INSTALL=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) NAME=$2; shift 2 ;;
    --zone) ZONE=$2; shift 2 ;;
    --accelerator) ACCEL=$2; shift 2 ;;
    --version) VERSION=$2; shift 2 ;;
    --project) PROJECT=$2; shift 2 ;;
    --create) CREATE=1; shift ;;
    --queued) QUEUED=1; shift ;;
    --spot) SPOT=1; shift ;;
    --skip-install) INSTALL=0; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    --) shift; break ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
[[ -n "$NAME" && -n "$ZONE" ]] || die "--name and --zone are required"
[[ $# -ge 1 ]] || die "give the training config after --, e.g. -- configs/mbert.yaml"
GC=(gcloud compute tpus)
PROJ=()
[[ -n "$PROJECT" ]] && PROJ=(--project "$PROJECT")
SPOT_FLAG=()
[[ "$SPOT" == 1 ]] && SPOT_FLAG=(--spot)

if [[ "$QUEUED" == 1 ]]; then
  [[ -n "$ACCEL" ]] || die "--accelerator is required with --queued"
  run "${GC[@]}" queued-resources create "$NAME-qr" --node-id "$NAME" --zone "$ZONE" --accelerator-type "$ACCEL" \
    --runtime-version "$VERSION" "${SPOT_FLAG[@]}" "${PROJ[@]}"
  run "${GC[@]}" queued-resources wait "$NAME-qr" --zone "$ZONE" --for-state ACTIVE "${PROJ[@]}" || true
elif [[ "$CREATE" == 1 ]]; then
  [[ -n "$ACCEL" ]] || die "--accelerator is required with --create"
  run "${GC[@]}" tpu-vm create "$NAME" --zone "$ZONE" --accelerator-type "$ACCEL" --version "$VERSION" "${SPOT_FLAG[@]}" "${PROJ[@]}"
fi

SSH=("${GC[@]}" tpu-vm ssh "$NAME" --zone "$ZONE" --worker=all "${PROJ[@]}")
if [[ "$INSTALL" == 1 ]]; then
  ARCHIVE=${TMPDIR:-/tmp}/omnidistill-src.tar.gz
  run git -C "$(dirname "$0")/../.." archive --format=tar.gz -o "$ARCHIVE" HEAD
  run "${GC[@]}" tpu-vm scp "$ARCHIVE" "$NAME:omnidistill-src.tar.gz" --zone "$ZONE" --worker=all "${PROJ[@]}"
  run "${SSH[@]}" --command "mkdir -p omnidistill && tar -xzf omnidistill-src.tar.gz -C omnidistill && cd omnidistill && pip install -q -e . 'jax[tpu]'"
fi
run "${SSH[@]}" --command "cd omnidistill && $(quoted_train_command "$@")"
