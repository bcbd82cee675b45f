#!/usr/bin/env bash
# Train on a Cloud TPU VM or pod slice with gcloud: create the TPU (directly, or through a queued
# resource that this script waits on), copy this checkout to every worker, set up a Python >= 3.11
# environment there (launch/tpu/worker_setup.sh), optionally stage data and configs in a bucket, and
# start `omnidistill train` on all workers at once (on TPU VMs JAX finds its peers by itself).
#
#   launch/tpu/tpu_vm.sh --name od-v5p --zone us-east5-a --accelerator v5p-32 --create \
#       -- configs/mbert.yaml mesh.fsdp=16 train.output_dir=/mnt/gcs/runs/mbert
#
# Options:
#   --name NAME            TPU VM name (required)
#   --zone ZONE            zone (required)
#   --accelerator TYPE     e.g. v6e-8, v5p-32, v5litepod-16, v4-64 (required with --create/--queued)
#   --version VERSION      TPU software version (default: the one Cloud TPU documents for the generation:
#                          v6e v2-alpha-tpuv6e, v5p v2-alpha-tpuv5, v5e v2-alpha-tpuv5-lite,
#                          v4 and older tpu-ubuntu2204-base)
#   --project PROJECT      GCP project (default: gcloud's configured project)
#   --create               create the TPU VM first
#   --queued               create it through a queued resource, and wait until it is ACTIVE
#   --wait-timeout SECS    give up waiting for the queued resource after SECS (default 86400)
#   --spot                 request spot capacity
#   --python VERSION       Python on the workers (default 3.12; must be >= 3.11)
#   --stage GS_PREFIX      copy this checkout's data/ and configs/ to GS_PREFIX first (gcloud storage
#                          rsync); then name them as GS_PREFIX/data/... and GS_PREFIX/configs/...
#   --skip-install         do not copy and install the project (reuse what is on the workers)
#   --compile-cache URL    XLA's compilation cache in storage every worker reads, e.g. gs://BUCKET/xla:
#                          worker 0 writes the compiled programs and a later run on any worker loads
#                          them (default: each worker's own ~/.cache/omnidistill/xla, which only
#                          worker 0 fills; omnidistill/compile_cache.py)
#   --dry-run              print the commands instead of running them
# Everything after `--` is the training config and its overrides; gs:// paths are read directly.
# train.output_dir should be on storage every worker shares (a gcsfuse mount or NFS).
set -euo pipefail
# shellcheck source=launch/common.sh
source "$(dirname "$0")/../common.sh"
REPO=$(cd "$(dirname "$0")/../.." && pwd)

NAME="" ZONE="" ACCEL="" VERSION="" PROJECT="" CREATE=0 QUEUED=0 SPOT=0 INSTALL=1 PY=3.12 STAGE="" TIMEOUT=86400 CACHE=""
POLL=${OMNIDISTILL_POLL_SECONDS:-30}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) NAME=$2; shift 2 ;;
    --zone) ZONE=$2; shift 2 ;;
    --accelerator) ACCEL=$2; shift 2 ;;
    --version) VERSION=$2; shift 2 ;;
    --project) PROJECT=$2; shift 2 ;;
    --create) CREATE=1; shift ;;
    --queued) QUEUED=1; shift ;;
    --wait-timeout) TIMEOUT=$2; shift 2 ;;
    --spot) SPOT=1; shift ;;
    --python) PY=$2; shift 2 ;;
    --stage) STAGE=${2%/}; shift 2 ;;
    --skip-install) INSTALL=0; shift ;;
    --compile-cache) CACHE=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
[[ -n "$NAME" && -n "$ZONE" ]] || die "--name and --zone are required"
[[ $# -ge 1 ]] || die "give the training config after --, e.g. -- configs/mbert.yaml"
[[ "$PY" =~ ^3\.([0-9]+)$ && ${BASH_REMATCH[1]} -ge 11 ]] || die "--python $PY: omnidistill needs Python 3.11 or newer"
[[ -z "$STAGE" || "$STAGE" == gs://* ]] || die "--stage takes a gs:// prefix, got $STAGE"

# The runtime image per TPU generation (Cloud TPU "TPU software versions" page, PyTorch and JAX).
runtime_for() {
  case "$1" in
    v6e-*) echo v2-alpha-tpuv6e ;;
    v5p-*) echo v2-alpha-tpuv5 ;;
    v5litepod-*|v5e-*) echo v2-alpha-tpuv5-lite ;;
    v4-*|v3-*|v2-*) echo tpu-ubuntu2204-base ;;
    *) return 1 ;;
  esac
}

GC=(gcloud compute tpus)
PROJ=()
[[ -n "$PROJECT" ]] && PROJ=(--project "$PROJECT")
SPOT_FLAG=()
[[ "$SPOT" == 1 ]] && SPOT_FLAG=(--spot)
if [[ "$CREATE" == 1 || "$QUEUED" == 1 ]]; then
  [[ -n "$ACCEL" ]] || die "--accelerator is required with --create or --queued"
  [[ -n "$VERSION" ]] || VERSION=$(runtime_for "$ACCEL") || die "no known runtime for --accelerator $ACCEL: pass --version"
fi

# Poll the queued resource until it is ACTIVE; a state that cannot become ACTIVE, a failing gcloud
# call, or the timeout stops the script with the reason.
wait_for_active() {
  local qr=$1 waited=0 state
  while true; do
    if [[ "$DRY_RUN" == 1 ]]; then
      run "${GC[@]}" queued-resources describe "$qr" --zone "$ZONE" "${PROJ[@]}" --format "value(state.state)"
      return 0
    fi
    state=$("${GC[@]}" queued-resources describe "$qr" --zone "$ZONE" "${PROJ[@]}" --format "value(state.state)") \
      || die "gcloud could not describe queued resource $qr"
    case "$state" in
      ACTIVE) echo "queued resource $qr is ACTIVE" >&2; return 0 ;;
      CREATING|ACCEPTED|WAITING_FOR_RESOURCES|PROVISIONING) ;;
      *) die "queued resource $qr is ${state:-in no state} and will not become ACTIVE (gcloud compute tpus queued-resources describe $qr --zone $ZONE)" ;;
    esac
    (( waited >= TIMEOUT )) && die "queued resource $qr still $state after ${TIMEOUT}s (--wait-timeout); it stays queued: delete it with gcloud compute tpus queued-resources delete $qr --zone $ZONE"
    echo "queued resource $qr: $state (waited ${waited}s)" >&2
    sleep "$POLL"
    waited=$((waited + POLL))
  done
}

if [[ "$QUEUED" == 1 ]]; then
  run "${GC[@]}" queued-resources create "$NAME-qr" --node-id "$NAME" --zone "$ZONE" --accelerator-type "$ACCEL" \
    --runtime-version "$VERSION" "${SPOT_FLAG[@]}" "${PROJ[@]}"
  wait_for_active "$NAME-qr"
elif [[ "$CREATE" == 1 ]]; then
  run "${GC[@]}" tpu-vm create "$NAME" --zone "$ZONE" --accelerator-type "$ACCEL" --version "$VERSION" "${SPOT_FLAG[@]}" "${PROJ[@]}"
fi

if [[ -n "$STAGE" ]]; then
  run gcloud storage rsync --recursive "$REPO/data" "$STAGE/data"
  run gcloud storage rsync --recursive "$REPO/configs" "$STAGE/configs"
fi

# shellcheck disable=SC2016  # $HOME is expanded on each worker, not here
VENV='$HOME/omnidistill-venv'
SSH=("${GC[@]}" tpu-vm ssh "$NAME" --zone "$ZONE" --worker=all "${PROJ[@]}")
if [[ "$INSTALL" == 1 ]]; then
  ARCHIVE=${TMPDIR:-/tmp}/omnidistill-src.tar.gz
  run git -C "$REPO" archive --format=tar.gz -o "$ARCHIVE" HEAD
  run "${GC[@]}" tpu-vm scp "$ARCHIVE" "$NAME:omnidistill-src.tar.gz" --zone "$ZONE" --worker=all "${PROJ[@]}"
  run "${SSH[@]}" --command "mkdir -p omnidistill && tar -xzf omnidistill-src.tar.gz -C omnidistill && bash omnidistill/launch/tpu/worker_setup.sh \$HOME/omnidistill $VENV $PY"
fi
run "${SSH[@]}" --command "cd omnidistill && $(compile_cache_env "$CACHE")$VENV/bin/$(quoted_train_command "$@")"
