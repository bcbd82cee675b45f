set -uo pipefail
T0=$SECONDS; END=${END:-510}
left() { echo $((END - (SECONDS - T0))); }
export PYTHONPATH=/tmp/site:$PWD:$PWD/tools PYTHONUNBUFFERED=1
ls /tmp/site/grain >/dev/null 2>&1 || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c "import jax,flax,torch,transformers as t;print('jax',jax.__version__,'flax',flax.__version__,'torch',torch.__version__,'transformers',t.__version__)"; date -u; } > $OUT/machine.txt 2>&1
run() { local f=$1; shift; [ "$(left)" -gt 25 ] || { echo "skip $*"; return; }; timeout $(left) "$@" 2>&1 | grep '^{' | tee -a "$OUT/$f"; echo "$* -> $((SECONDS - T0)) s" | tee -a $OUT/times.txt; }
run peer_compile.jsonl python3 .whl/peer_bench_torch.py --compile --only=mbert
run ours_train.jsonl python3 tools/bench_train.py --only=mbert
run levers.jsonl python3 tools/bench_levers.py finite-per-array train --only=mbert
run peer_compile.jsonl python3 .whl/peer_bench_torch.py --compile --only=bert-large
run ours_train.jsonl python3 tools/bench_train.py --only=bert-large
run levers.jsonl python3 tools/bench_levers.py finite-per-array train --only=bert-large
run ours_train.jsonl python3 tools/bench_train.py --only=mbert
echo "done at $((SECONDS - T0)) s"
