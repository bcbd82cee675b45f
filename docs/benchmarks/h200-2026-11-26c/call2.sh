set -uo pipefail
T0=$SECONDS; END=${END:-400}
left() { echo $((END - (SECONDS - T0))); }
export PYTHONPATH=/tmp/site:$PWD:$PWD/tools PYTHONUNBUFFERED=1
ls /tmp/site/grain >/dev/null 2>&1 || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
run() { local f=$1; shift; [ "$(left)" -gt 25 ] || { echo "skip $*"; return; }; timeout $(left) "$@" 2>&1 | grep '^{' | tee -a "$OUT/$f"; echo "$* -> $((SECONDS - T0)) s" | tee -a $OUT/times.txt; }
run levers.jsonl python3 -c 'import bench_levers as b; b.LEVERS["both"] = lambda: b.LEVERS["deberta-slices"]() + b.LEVERS["deberta-dot-order"](); b.main(["both", "train", "--only=deberta"])'
for c in ettin-32m bert-large; do
  run peer_compile.jsonl python3 .whl/peer_bench_torch.py --compile --only=$c
  run ours_train.jsonl python3 tools/bench_train.py --only=$c
done
run ours_varlen.jsonl python3 tools/bench_score.py --varlen --only=mbert,bert-large
run peer_varlen_compile.jsonl python3 .whl/peer_bench_torch.py --varlen --compile --only=mbert,bert-large
echo "done at $((SECONDS - T0)) s"
