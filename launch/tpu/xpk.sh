#!/usr/bin/env bash
# Train on a GKE TPU cluster through xpk (one or several slices). The image must contain this project
# (e.g. built from a Dockerfile that runs `pip install -e . 'jax[tpu]'`); JAX discovers the slices
# itself, and mesh.dcn_data splits the data axis across them.
#
#   launch/tpu/xpk.sh --cluster od-cluster --workload mbert-1 --tpu-type v5p-128 --num-slices 2 \
#       --image gcr.io/me/omnidistill:latest -- configs/mbert.yaml mesh.dcn_data=2 mesh.fsdp=32
#
# Options: --cluster, --workload, --tpu-type, --image (required); --num-slices N (default 1);
# --project, --zone (passed to xpk); --dry-run prints the command instead of running it.
set -euo pipefail
source "$(dirname "$0")/../common.sh"

CLUSTER="" WORKLOAD="" TPU="" IMAGE="" SLICES=1 EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cluster) CLUSTER=$2; shift 2 ;;
    --workload) WORKLOAD=$2; shift 2 ;;
    --tpu-type) TPU=$2; shift 2 ;;
    --image) IMAGE=$2; shift 2 ;;
    --num-slices) SLICES=$2; shift 2 ;;
    --project|--zone) EXTRA+=("$1" "$2"); shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --) shift; break ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
[[ -n "$CLUSTER" && -n "$WORKLOAD" && -n "$TPU" && -n "$IMAGE" ]] || die "--cluster, --workload, --tpu-type and --image are required"
[[ $# -ge 1 ]] || die "give the training config after --"
run xpk workload create --cluster "$CLUSTER" --workload "$WORKLOAD" --tpu-type "$TPU" --num-slices "$SLICES" \
  --docker-image "$IMAGE" "${EXTRA[@]}" --command "$(quoted_train_command "$@")"
