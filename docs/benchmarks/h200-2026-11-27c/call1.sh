# Eleventh lease: realistic-length scoring (--varlen) on mBERT and BERT-large, the compiled peer first,
# then ours as the Scorer batches by default (profiled: op mix and device_busy), with batches padded to
# multiples of 8 tokens (eval.length_step: 8), with token-budget batches (eval.batch_tokens), and packed
# (eval.pack_length: 512). Run from the repository root with .whl carried, as OUT=$OUT bash THIS.
# EXTRA=--tiny and PEER=: try it anywhere.
set -uo pipefail
T0=$SECONDS; END=${END:-470}
left() { echo $((END - (SECONDS - T0))); }
export PYTHONPATH=/tmp/site:$PWD:$PWD/tools PYTHONUNBUFFERED=1
OUT=${OUT:-bench-out}; EXTRA=${EXTRA:-}; PEER=${PEER:-python3 .whl/peer_bench_torch.py}
mkdir -p "$OUT"
ls /tmp/site/grain >/dev/null 2>&1 || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c "import jax,flax,optax,torch,transformers as t;print('jax',jax.__version__,'flax',flax.__version__,'optax',optax.__version__,'torch',torch.__version__,'transformers',t.__version__)"; date -u; } > "$OUT/machine.txt" 2>&1
run() { local f=$1; shift; [ "$(left)" -gt 25 ] || { echo "skip $*"; return; }; timeout "$(left)" "$@" 2>&1 | grep '^{' | tee -a "$OUT/$f"; echo "$* -> $((SECONDS - T0)) s" | tee -a "$OUT/times.txt"; }
run peer_varlen.jsonl $PEER --varlen --compile --only=mbert,bert-large
run ours_varlen.jsonl python3 tools/bench_score.py --varlen --only=mbert,bert-large --profile /tmp/vprof $EXTRA
run ours_varlen.jsonl python3 tools/bench_score.py --varlen --length-step 8 --only=mbert,bert-large $EXTRA
run ours_varlen.jsonl python3 tools/bench_score.py --varlen --batch-tokens 32768 --only=mbert,bert-large $EXTRA
run ours_varlen.jsonl python3 tools/bench_score.py --varlen --pack-length 512 --only=mbert,bert-large $EXTRA
run ours_varlen.jsonl python3 tools/bench_score.py --varlen --batch-tokens 65536 --only=mbert $EXTRA
run ours_varlen.jsonl python3 tools/bench_score.py --varlen --length-step 8 --batch 256 --only=mbert $EXTRA
tar czf "$OUT/vprof_hlo.tgz" -C /tmp/vprof $(cd /tmp/vprof && ls */program_*.hlo.txt) 2>&1 | tail -2
echo "done at $((SECONDS - T0)) s"
