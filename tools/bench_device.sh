#!/usr/bin/env bash
# One command for a GPU session: the GPU-only tests, the peer (eager and --compile) and omnidistill's
# train/score benchmarks on the same machine, then the side-by-side table. Output goes to $OUT (or ./bench-out).
#
# Before the device run, here:   bash ../shared/bench/device_wheels.sh        # grain wheels -> .whl/
#                                cp ../shared/bench/peer_bench_torch.py ../shared/bench/score_lengths.txt .whl/  # the peer and its lengths travel too
# Device run (carry .whl):       bash tools/bench_device.sh [STAGES] [--only=mbert,ettin]
# STAGES (comma-separated, default all): tests, varlen (realistic-length scoring, first; the padded
# pass's op mix and device_busy in each line), fixed (the fixed-shape peer, eager and compiled),
# ours (omnidistill's fixed-shape train and score), levers
# (DeBERTa training with each variant of tools/bench_levers.py; ModernBERT and Ettin-32M training
# and --varlen scoring with cuDNN's mask array, against ours and varlen; BERT-large and ModernBERT
# training with cuBLAS for every matmul, and with cuBLASLt epilogues; mBERT and BERT-large training
# with per-element dropout draws, with masks kept for the backward pass, with the draws split
# without a concatenate, with a finiteness test per gradient array, with the optimizer's small
# arrays packed into one vector (with and without its barrier), and without dropout), large
# (mxbai-large at B64xS512 under remat). One 10-minute device command holds about two stages. pairs
# (not in all): per case, the compiled peer then our training, back to back, so a call cut short
# still leaves whole same-chip pairs (mbert, deberta and modernbert took 275 s on an H200; ettin-32m
# and bert-large 170 s). graphs (not in all; default --only=mbert,bert-large): realistic-length
# scoring with XLA's command buffers (CUDA graphs) as they are and off, and (mbert) recorded once
# (--xla-option), each profiled (enqueue time, device_busy, idle gaps), after the compiled peer; the
# Scorer's own loop (--scorer-loop, mbert) with two batches in flight and, by the lever
# scorer-reads-each-batch, with none; then (mbert) with the bf16 kernels cast per call
# (kernels-cast-per-call); last, `score`'s host work alone (bench_score_file.py --host-only, about
# 20 s). The eleventh lease's open questions (docs/benchmarks.md), most important
# first: about 9 minutes on an H200 by that lease's run times, so a call cut short loses the last.
# gaps (not in all; mbert and bert-large): the twelfth lease's open questions, most important first,
# about 9 minutes by its run times (the peer takes about 90 s a case), so one 10-minute call: the
# compiled peer's --varlen, which read mBERT 29% under its earlier leases; ours as the Scorer batches
# (with dispatch_ms_per_call, the host's cost of one run); fewer, larger runs (mBERT at --batch-tokens
# 32768), since the device's own gaps between kernels took a third of the pass; the Scorer's loop with
# two and (lever) four batches in flight; the peer's mBERT again, to tell a slow machine from a slow
# first run; last, the kernels and biases cast per call (lever kernels-cast-per-call).
# hostwork (not in all; no GPU needed, the machine's cores): score's host work alone with its input
# read in 0, 2 and 4 worker processes (score --input-workers), about 45 s: a second call after gaps.
# cache (not in all; about 2 minutes, with hostwork in the second call): `omnidistill score` of a random
# mBERT-shaped classifier on the sample, in fresh processes with the compilation cache off, cold and
# warm (tools/bench_compile_cache.py --bert-case mbert --repeat 1): what a second score saves here.
set -euo pipefail
stages="${1:-all}"
only="${2:-}"
[[ "$stages" == --only=* ]] && only="$stages" && stages=all
out="${OUT:-bench-out}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/machine.txt"
want() { [[ "$stages" == all || ",$stages," == *",$1,"* ]]; }
if want tests; then
  JAX_PLATFORMS=cuda python3 -m pytest -q -n0 -p no:cacheprovider tests/models/test_attention_gpu.py 2>&1 | tail -20 | tee "$out/gpu_tests.txt"
fi
if want varlen; then
  python3 tools/bench_score.py --varlen $only --profile /tmp/bench-varlen-prof | tee "$out/ours_varlen.jsonl"  # with each case's op mix
  python3 tools/bench_score.py --varlen --pack-length 512 $only | tee "$out/ours_varlen_packed.jsonl"
  python3 tools/bench_score.py --varlen --batch-tokens 16384 $only | tee "$out/ours_varlen_tokens.jsonl"
  python3 .whl/peer_bench_torch.py --varlen $only | tee "$out/peer_varlen_eager.jsonl"
  python3 .whl/peer_bench_torch.py --varlen --compile $only | tee "$out/peer_varlen_compile.jsonl"
fi
if [[ ",$stages," == *",graphs,"* ]]; then
  cases="${only:---only=mbert,bert-large}"
  python3 .whl/peer_bench_torch.py --varlen --compile $cases | tee -a "$out/peer_varlen_compile.jsonl"
  python3 tools/bench_score.py --varlen $cases --profile /tmp/bench-graphs/default | tee -a "$out/ours_graphs.jsonl"
  python3 tools/bench_score.py --varlen --only=mbert --scorer-loop | tee -a "$out/ours_graphs.jsonl"  # the Scorer's own loop
  python3 tools/bench_score.py --varlen $cases --xla-option xla_gpu_enable_command_buffer= --profile /tmp/bench-graphs/off | tee -a "$out/ours_graphs.jsonl" || true
  # an option this JAX lacks stops only its own run (these two)
  python3 tools/bench_score.py --varlen --only=mbert --xla-option xla_gpu_command_buffer_update_mode=NEVER_UPDATE \
    --profile /tmp/bench-graphs/never-update | tee -a "$out/ours_graphs.jsonl" || true
  python3 tools/bench_levers.py scorer-reads-each-batch score --varlen --only=mbert --scorer-loop | tee -a "$out/ours_graphs.jsonl"
  python3 tools/bench_levers.py kernels-cast-per-call score --varlen --only=mbert | tee -a "$out/ours_graphs.jsonl"  # the Scorer's kernel cast undone
  # score's host work alone on this machine's cores (no device): is a file's scoring bound by its host?
  python3 tools/bench_score_file.py --tokenizer assets/tiny-wordpiece --host-only --lines 100000 | tee "$out/score_host_only.jsonl" || true
fi
if [[ ",$stages," == *",gaps,"* ]]; then
  cases="${only:---only=mbert,bert-large}"
  python3 .whl/peer_bench_torch.py --varlen --compile $cases | tee -a "$out/peer_varlen_compile.jsonl"
  python3 tools/bench_score.py --varlen $cases | tee -a "$out/ours_gaps.jsonl"
  python3 tools/bench_score.py --varlen --batch-tokens 32768 --only=mbert | tee -a "$out/ours_gaps.jsonl"
  python3 tools/bench_score.py --varlen --only=mbert --scorer-loop | tee -a "$out/ours_gaps.jsonl"
  python3 tools/bench_levers.py scorer-four-in-flight score --varlen --only=mbert --scorer-loop | tee -a "$out/ours_gaps.jsonl"
  python3 .whl/peer_bench_torch.py --varlen --compile --only=mbert | tee -a "$out/peer_varlen_compile_again.jsonl"
  python3 tools/bench_levers.py kernels-cast-per-call score --varlen --only=mbert | tee -a "$out/ours_gaps.jsonl"  # kernels and biases cast per call
fi
if [[ ",$stages," == *",hostwork,"* ]]; then
  # score's host work alone with the input read in 0, 2 and 4 worker processes: does --input-workers lift the host bound?
  python3 tools/bench_score_file.py --tokenizer assets/tiny-wordpiece --host-only --lines 100000 --input-workers 0 2 4 | tee "$out/score_host_workers.jsonl"
fi
if [[ ",$stages," == *",cache,"* ]]; then
  python3 tools/bench_compile_cache.py --bert-case mbert --repeat 1 -- score --model '{model}' --input data/sample/test.jsonl \
    --output '{out}' | tee "$out/compile_cache.jsonl"
fi
if [[ ",$stages," == *",pairs,"* ]]; then
  cases="${only#--only=}"
  cases="${cases:-mbert,deberta,modernbert,ettin-32m,bert-large}"
  for case in ${cases//,/ }; do
    python3 .whl/peer_bench_torch.py --compile --only="$case" | tee -a "$out/peer_compile.jsonl"
    python3 tools/bench_train.py --only="$case" | tee -a "$out/ours_train.jsonl"
  done
fi
if want fixed; then
  python3 .whl/peer_bench_torch.py $only | tee "$out/peer_eager.jsonl"
  python3 .whl/peer_bench_torch.py --compile $only | tee "$out/peer_compile.jsonl"
fi
if want ours; then
  python3 tools/bench_train.py $only --profile /tmp/bench-prof | tee "$out/ours_train.jsonl"  # with each case's op mix
  tar czf "$out/train_traces.tgz" -C /tmp bench-prof  # the traces and HLO behind the op mix: here, untar and run tools/op_mix.py bench-prof/*/ --top 2000
  python3 tools/bench_score.py $only | tee "$out/ours_score.jsonl"
fi
if want levers; then
  for lever in deberta-cpu-layout deberta-rows-gathered deberta-product-einsum; do
    python3 tools/bench_levers.py "$lever" train --only=deberta | tee -a "$out/levers.jsonl"
  done
  python3 tools/bench_levers.py cudnn-mask-array train --only=modernbert,ettin-32m | tee -a "$out/levers.jsonl"
  python3 tools/bench_levers.py cudnn-mask-array score --varlen --only=modernbert,ettin-32m | tee -a "$out/levers.jsonl"
  for lever in cublas-gemms cublaslt-epilogues; do  # XLA flags: a flag this JAX lacks stops only its own run
    python3 tools/bench_levers.py "$lever" train --only=bert-large,modernbert | tee -a "$out/levers.jsonl" || true
  done
  for lever in dropout-per-element dropout-kept-masks dropout-selected-draws finite-per-array packed-vectors packed-vectors-fusible; do
    python3 tools/bench_levers.py "$lever" train --only=mbert,bert-large | tee -a "$out/levers.jsonl"
  done
  python3 tools/bench_train.py --only=mbert,bert-large --no-dropout | tee -a "$out/levers.jsonl"
fi
if want large; then
  python3 tools/bench_train.py --only=bert-large --batch 64 --remat full,dots | tee "$out/ours_large_b64.jsonl"
fi
tables=()
for f in peer_eager peer_compile ours_train ours_score peer_varlen_eager peer_varlen_compile ours_varlen ours_varlen_packed ours_varlen_tokens; do
  [[ -s "$out/$f.jsonl" ]] && tables+=("$out/$f.jsonl")
done
python3 tools/bench_compare.py "${tables[@]}" | tee "$out/table.md"
