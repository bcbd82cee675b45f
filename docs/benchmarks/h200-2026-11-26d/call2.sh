set -uo pipefail
T0=$SECONDS; END=${END:-360}
left() { echo $((END - (SECONDS - T0))); }
export PYTHONPATH=/tmp/site:$PWD:$PWD/tools PYTHONUNBUFFERED=1
ls /tmp/site/grain >/dev/null 2>&1 || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; date -u; } > $OUT/machine.txt 2>&1
run() { local f=$1; shift; [ "$(left)" -gt 25 ] || { echo "skip $*"; return; }; timeout $(left) "$@" 2>&1 | grep '^{' | tee -a "$OUT/$f"; echo "$* -> $((SECONDS - T0)) s" | tee -a $OUT/times.txt; }
run ours_varlen.jsonl python3 tools/bench_score.py --varlen --only=modernbert
run ours_train.jsonl python3 tools/bench_train.py --only=ettin-32m
run levers.jsonl python3 tools/bench_levers.py cudnn-mask-array train --only=ettin-32m
run peer_compile.jsonl python3 .whl/peer_bench_torch.py --compile --only=ettin-32m
run ours_varlen.jsonl python3 tools/bench_score.py --varlen --only=ettin-32m
run levers.jsonl python3 tools/bench_levers.py cudnn-mask-array score --varlen --only=ettin-32m
run peer_varlen_compile.jsonl python3 .whl/peer_bench_torch.py --varlen --compile --only=ettin-32m
run levers.jsonl python3 tools/bench_levers.py cublaslt-epilogues train --only=bert-large
echo "done at $((SECONDS - T0)) s"
