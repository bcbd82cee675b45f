# Lease of 2026-11-26 (afternoon): same-chip training ratios against compiled PyTorch, each pair
# (peer compiled, then ours) run back to back so a cut call still leaves whole pairs; then the
# two DeBERTa levers; then our fixed-shape scoring if time is left.
set -uo pipefail
T0=$SECONDS; END=${END:-550}
left() { echo $((END - (SECONDS - T0))); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD:$PWD/tools PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/machine.txt
python3 -c 'import jax, flax, torch, transformers; print("jax", jax.__version__, "flax", flax.__version__, "torch", torch.__version__, "transformers", transformers.__version__)' | tee -a $OUT/machine.txt
run() { local f=$1; shift; [ "$(left)" -gt 25 ] || { echo "skip $*"; return; }; timeout $(left) "$@" 2>&1 | grep '^{' | tee -a "$OUT/$f"; echo "$* -> $((SECONDS - T0)) s" | tee -a $OUT/times.txt; }
for c in mbert deberta modernbert; do
  run peer_compile.jsonl python3 .whl/peer_bench_torch.py --compile --only=$c
  run ours_train.jsonl python3 tools/bench_train.py --only=$c
done
for lever in deberta-slices deberta-dot-order; do
  run levers.jsonl python3 tools/bench_levers.py $lever train --only=deberta
done
run ours_score.jsonl python3 tools/bench_score.py --only=mbert,deberta,modernbert
echo "done at $((SECONDS - T0)) s"
