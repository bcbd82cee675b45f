#!/usr/bin/env bash
# One command for a GPU session: the peer (eager and --compile) and omnidistill's train/score/memory
# benchmarks on the same machine, then the side-by-side table. Output goes to $OUT (or ./bench-out).
#
# Before the device run, here:   bash ../shared/bench/device_wheels.sh        # grain wheels -> .whl/
#                                cp ../shared/bench/peer_bench_torch.py .whl/ # the peer travels too
# Device run (carry .whl):       bash tools/bench_device.sh [--only=mbert,ettin]
set -euo pipefail
only="${1:-}"
out="${OUT:-bench-out}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/machine.txt"
# realistic-length scoring first (the first measurement), then the fixed shapes
python3 .whl/peer_bench_torch.py --varlen $only | tee "$out/peer_varlen_eager.jsonl"
python3 .whl/peer_bench_torch.py --varlen --compile $only | tee "$out/peer_varlen_compile.jsonl"
python3 tools/bench_score.py --varlen $only | tee "$out/ours_varlen.jsonl"
python3 tools/bench_score.py --varlen --pack-length 512 $only | tee "$out/ours_varlen_packed.jsonl"
python3 .whl/peer_bench_torch.py $only | tee "$out/peer_eager.jsonl"
python3 .whl/peer_bench_torch.py --compile $only | tee "$out/peer_compile.jsonl"
python3 tools/bench_train.py $only | tee "$out/ours_train.jsonl"
python3 tools/bench_score.py $only | tee "$out/ours_score.jsonl"
python3 tools/bench_train.py --only=bert-large --batch 64 --remat full,dots | tee "$out/ours_large_b64.jsonl"
python3 tools/bench_compare.py "$out"/peer_eager.jsonl "$out"/peer_compile.jsonl "$out"/ours_train.jsonl "$out"/ours_score.jsonl \
  "$out"/peer_varlen_eager.jsonl "$out"/peer_varlen_compile.jsonl "$out"/ours_varlen.jsonl "$out"/ours_varlen_packed.jsonl | tee "$out/table.md"
