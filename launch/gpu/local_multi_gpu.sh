#!/usr/bin/env bash
# Train on the GPUs of one machine. By default one process drives every GPU (the usual JAX setup);
# --processes N starts N processes on 127.0.0.1, one per GPU group, joined through a local coordinator
# (the same code path as a multi-node run, handy for testing it).
#
#   launch/gpu/local_multi_gpu.sh -- configs/mbert.yaml mesh.data=8
#   launch/gpu/local_multi_gpu.sh --processes 2 --gpus 8 -- configs/mbert.yaml
#
# Options: --processes N (default 1), --gpus G (GPUs on the machine, default 8), --port P (coordinator
# port, default 12355), --dry-run.
set -euo pipefail
# shellcheck source=launch/common.sh
source "$(dirname "$0")/../common.sh"

PROCS=1 GPUS=8 PORT=12355
while [[ $# -gt 0 ]]; do
  case "$1" in
    --processes) PROCS=$2; shift 2 ;;
    --gpus) GPUS=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
[[ $# -ge 1 ]] || die "give the training config after --"
if [[ "$PROCS" == 1 ]]; then
  run omnidistill train "$@"
  exit 0
fi
(( GPUS % PROCS == 0 )) || die "--gpus $GPUS is not divisible by --processes $PROCS"
PER=$(( GPUS / PROCS ))
PIDS=()
for (( i = 0; i < PROCS; i++ )); do
  DEVICES=$(seq -s, $(( i * PER )) $(( (i + 1) * PER - 1 )))
  if [[ "$DRY_RUN" == 1 ]]; then
    run env CUDA_VISIBLE_DEVICES="$DEVICES" JAX_COORDINATOR_ADDRESS="127.0.0.1:$PORT" JAX_NUM_PROCESSES="$PROCS" JAX_PROCESS_ID="$i" omnidistill train "$@"
  else
    CUDA_VISIBLE_DEVICES="$DEVICES" JAX_COORDINATOR_ADDRESS="127.0.0.1:$PORT" JAX_NUM_PROCESSES="$PROCS" JAX_PROCESS_ID="$i" \
      omnidistill train "$@" &
    PIDS+=($!)
  fi
done
STATUS=0
for pid in "${PIDS[@]}"; do wait "$pid" || STATUS=$?; done
exit $STATUS
