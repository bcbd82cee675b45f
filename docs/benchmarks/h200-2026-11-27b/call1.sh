# Tenth lease, call 1: the optimizer's small arrays packed into one vector (packed-vectors, with and
# without the barrier), the dropout draws without a concatenate, and both, each against our mBERT step
# and the compiled peer on one machine; the best on BERT-large. Run from the repository root with .whl
# carried (bench_device.sh's header), as OUT=$OUT bash THIS. EXTRA=--tiny and PEER=: try it anywhere.
set -uo pipefail
T0=$SECONDS; END=${END:-470}
left() { echo $((END - (SECONDS - T0))); }
export PYTHONPATH=/tmp/site:$PWD:$PWD/tools PYTHONUNBUFFERED=1
OUT=${OUT:-bench-out}; EXTRA=${EXTRA:-}; PEER=${PEER:-python3 .whl/peer_bench_torch.py}
mkdir -p "$OUT"
ls /tmp/site/grain >/dev/null 2>&1 || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c "import jax,flax,optax,torch,transformers as t;print('jax',jax.__version__,'flax',flax.__version__,'optax',optax.__version__,'torch',torch.__version__,'transformers',t.__version__)"; date -u; } > "$OUT/machine.txt" 2>&1
run() { local f=$1; shift; [ "$(left)" -gt 25 ] || { echo "skip $*"; return; }; timeout "$(left)" "$@" 2>&1 | grep '^{' | tee -a "$OUT/$f"; echo "$* -> $((SECONDS - T0)) s" | tee -a "$OUT/times.txt"; }
run peer_compile.jsonl $PEER --compile --only=mbert
run ours_train.jsonl python3 tools/bench_train.py --only=mbert --profile /tmp/prof/ours $EXTRA
run levers.jsonl python3 tools/bench_levers.py packed-vectors train --only=mbert --profile /tmp/prof/packed-vectors $EXTRA
run levers.jsonl python3 tools/bench_levers.py packed-vectors-fusible train --only=mbert $EXTRA
run levers.jsonl python3 tools/bench_levers.py dropout-selected-draws train --only=mbert $EXTRA
run levers.jsonl python3 tools/bench_levers.py packed-vectors+dropout-selected-draws train --only=mbert $EXTRA
run ours_train.jsonl python3 tools/bench_train.py --only=mbert $EXTRA
best=$(python3 - "$OUT/levers.jsonl" "$OUT/ours_train.jsonl" <<'PY'
import json, sys
lever, best = None, {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    lever = d.get("lever", lever)
    if "train_tok_s" in d:
        best[lever] = d["train_tok_s"]
ours = max(json.loads(l).get("train_tok_s", 0) for l in open(sys.argv[2]))
name = max(best, key=best.get, default=None)
print(name if name and best[name] > 1.005 * ours else "")
PY
)
echo "best lever on mBERT: ${best:-none}" | tee -a "$OUT/times.txt"
if [ -n "$best" ]; then
  run ours_train.jsonl python3 tools/bench_train.py --only=bert-large $EXTRA
  run levers.jsonl python3 tools/bench_levers.py "$best" train --only=bert-large $EXTRA
  run peer_compile.jsonl $PEER --compile --only=bert-large
fi
for d in /tmp/prof/*/; do
  for h in "$d"*/step.hlo.txt; do
    [ -f "$h" ] || continue
    printf '%s: fusions %s, selects %s, reduces %s, concatenates %s\n' "$h" "$(grep -c ' fusion(' "$h")" \
      "$(grep -c 'loop_select_fusion[.0-9]* = ' "$h")" "$(grep -c 'reduce_fusion[.0-9]* = ' "$h")" "$(grep -c 'concatenate_fusion[.0-9]* = ' "$h")" | tee -a "$OUT/hlo_summary.txt"
  done
done
python3 tools/op_mix.py /tmp/prof/*/*/ --top 400 > "$OUT/ops.jsonl" 2>&1
tar czf "$OUT/hlo.tgz" -C /tmp/prof $(cd /tmp/prof && ls */*/step.hlo.txt) 2>&1 | tail -2
echo "done at $((SECONDS - T0)) s"
