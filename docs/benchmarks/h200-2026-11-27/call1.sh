# Ninth lease, call 1: four ways to take the layer norms and two XLA fusion flags, each against our
# training step on one machine, with the compiled peer; the best on BERT-large and on realistic-length
# scoring. Run from the repository root with .whl carried (bench_device.sh's header). EXTRA=--tiny and
# PEER=: try the script anywhere.
set -uo pipefail
T0=$SECONDS; END=${END:-575}
left() { echo $((END - (SECONDS - T0))); }
export PYTHONPATH=/tmp/site:$PWD:$PWD/tools PYTHONUNBUFFERED=1
OUT=${OUT:-bench-out}; EXTRA=${EXTRA:-}; PEER=${PEER:-python3 .whl/peer_bench_torch.py}
mkdir -p "$OUT"
ls /tmp/site/grain >/dev/null 2>&1 || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c "import jax,flax,torch,transformers as t;print('jax',jax.__version__,'flax',flax.__version__,'torch',torch.__version__,'transformers',t.__version__)"; date -u; } > "$OUT/machine.txt" 2>&1
run() { local f=$1; shift; [ "$(left)" -gt 25 ] || { echo "skip $*"; return; }; timeout "$(left)" "$@" 2>&1 | grep '^{' | tee -a "$OUT/$f"; echo "$* -> $((SECONDS - T0)) s" | tee -a "$OUT/times.txt"; }
run peer_compile.jsonl $PEER --compile --only=mbert
run ours_train.jsonl python3 tools/bench_train.py --only=mbert --profile /tmp/prof/ours $EXTRA
for lever in layernorm-two-pass cudnn-layernorm triton-block-fusion triton-heroless-fusion; do
  run levers.jsonl python3 tools/bench_levers.py $lever train --only=mbert --profile /tmp/prof/$lever $EXTRA
done
norms=$(cat /tmp/prof/cudnn-layernorm/*/step.hlo.txt 2>/dev/null | grep -c 'custom_call_target="__cudnn$norm"')
echo "cudnn-layernorm: $norms cuDNN norm calls" | tee -a "$OUT/times.txt"
if [ "$norms" = 0 ]; then
  run levers.jsonl python3 tools/bench_levers.py cudnn-layernorm-moments train --only=mbert --profile /tmp/prof/cudnn-layernorm-moments $EXTRA
fi
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
print(name if name and best[name] > ours else "")
PY
)
echo "best lever on mBERT: ${best:-none}" | tee -a "$OUT/times.txt"
run ours_train.jsonl python3 tools/bench_train.py --only=bert-large $EXTRA
[ -n "$best" ] && run levers.jsonl python3 tools/bench_levers.py "$best" train --only=bert-large $EXTRA
run ours_varlen.jsonl python3 tools/bench_score.py --varlen --only=mbert $EXTRA
[ -n "$best" ] && run levers.jsonl python3 tools/bench_levers.py "$best" score --varlen --only=mbert $EXTRA
run peer_compile.jsonl $PEER --compile --only=bert-large
for d in /tmp/prof/*/; do
  for h in "$d"*/step.hlo.txt; do
    [ -f "$h" ] || continue
    printf '%s: fusions %s, cuDNN norms %s, kinds %s\n' "$h" "$(grep -c ' fusion(' "$h")" "$(grep -c 'custom_call_target="__cudnn$norm"' "$h")" \
      "$(grep -o '"kind":"__[a-z_]*"' "$h" | sort | uniq -c | tr -s ' \n' ' ')" | tee -a "$OUT/hlo_summary.txt"
  done
done
python3 tools/op_mix.py /tmp/prof/*/*/ --top 400 > "$OUT/ops.jsonl" 2>&1
tar czf "$OUT/hlo.tgz" -C /tmp/prof $(cd /tmp/prof && ls */*/step.hlo.txt) 2>&1 | tail -2
echo "done at $((SECONDS - T0)) s"
