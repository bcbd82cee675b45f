#!/usr/bin/env bash
# Submit a multi-node GPU training job with SLURM.
#
#   launch/gpu/submit_slurm.sh --nodes 2 --gpus-per-node 8 --partition gpu -- configs/mbert.yaml mesh.dcn_data=2
#
# Options: --nodes N (default 1), --gpus-per-node G (default 8), --partition P, --time HH:MM:SS,
# --job-name NAME, --dry-run (print the sbatch command instead of submitting).
set -euo pipefail
# shellcheck source=launch/common.sh
source "$(dirname "$0")/../common.sh"

NODES=1 GPUS=8 ARGS=() NAME=omnidistill
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) NODES=$2; shift 2 ;;
    --gpus-per-node) GPUS=$2; shift 2 ;;
    --partition) ARGS+=(--partition "$2"); shift 2 ;;
    --time) ARGS+=(--time "$2"); shift 2 ;;
    --job-name) NAME=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
[[ $# -ge 1 ]] || die "give the training config after --"
[[ "$DRY_RUN" == 1 ]] || mkdir -p logs
run sbatch --nodes "$NODES" --gpus-per-node "$GPUS" --job-name "$NAME" "${ARGS[@]}" "$(dirname "$0")/slurm.sbatch" "$@"
