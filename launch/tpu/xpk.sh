#!/usr/bin/env bash
# Train on a GKE TPU cluster through xpk (one or several slices). With --build, the image is built from
# launch/tpu/Dockerfile (this checkout, JAX for TPU, gcsfs) and pushed first; xpk then runs it on every
# host of every slice. JAX discovers the slices itself, and mesh.dcn_data splits the data axis across them.
#
#   launch/tpu/xpk.sh --cluster od-cluster --workload mbert-1 --tpu-type v5p-128 --num-slices 2 \
#       --image us-docker.pkg.dev/my-project/od/omnidistill:v1 --build -- configs/mbert.yaml mesh.dcn_data=2 mesh.fsdp=32
#
# Options: --cluster, --workload, --tpu-type, --image (required); --build builds and pushes --image
# from launch/tpu/Dockerfile first (docker must be logged in to the registry: gcloud auth
# configure-docker); --num-slices N (default 1); --project, --zone (passed to xpk); --compile-cache
# URL puts XLA's compilation cache in storage every host reads, e.g. gs://BUCKET/xla (host 0 writes it,
# a later run on any host loads it; omnidistill/compile_cache.py); --dry-run prints the commands
# instead of running them.
set -euo pipefail
# shellcheck source=launch/common.sh
source "$(dirname "$0")/../common.sh"
REPO=$(cd "$(dirname "$0")/../.." && pwd)

CLUSTER="" WORKLOAD="" TPU="" IMAGE="" SLICES=1 BUILD=0 EXTRA=() CACHE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cluster) CLUSTER=$2; shift 2 ;;
    --workload) WORKLOAD=$2; shift 2 ;;
    --tpu-type) TPU=$2; shift 2 ;;
    --image) IMAGE=$2; shift 2 ;;
    --build) BUILD=1; shift ;;
    --num-slices) SLICES=$2; shift 2 ;;
    --project|--zone) EXTRA+=("$1" "$2"); shift 2 ;;
    --compile-cache) CACHE=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
[[ -n "$CLUSTER" && -n "$WORKLOAD" && -n "$TPU" && -n "$IMAGE" ]] || die "--cluster, --workload, --tpu-type and --image are required"
[[ $# -ge 1 ]] || die "give the training config after --"
if [[ "$BUILD" == 1 ]]; then
  run docker build -f "$REPO/launch/tpu/Dockerfile" -t "$IMAGE" "$REPO"
  run docker push "$IMAGE"
fi
run xpk workload create --cluster "$CLUSTER" --workload "$WORKLOAD" --tpu-type "$TPU" --num-slices "$SLICES" \
  --docker-image "$IMAGE" "${EXTRA[@]}" --command "$(compile_cache_env "$CACHE")$(quoted_train_command "$@")"
