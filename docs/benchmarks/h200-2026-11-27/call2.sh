# Ninth lease, call 2, on call 1's machine while still warm: the compiled peer's BERT-large step (cut by
# call 1's time limit), then ours again, so that both BERT-large sides ran on one chip.
export PYTHONPATH=/tmp/site:$PWD:$PWD/tools PYTHONUNBUFFERED=1; T0=$SECONDS
timeout 150 python3 .whl/peer_bench_torch.py --compile --only=bert-large 2>&1 | grep '^{' | tee $OUT/peer_compile_bert_large.jsonl; echo "peer -> $((SECONDS-T0)) s"
timeout $((215-(SECONDS-T0))) python3 tools/bench_train.py --only=bert-large 2>&1 | grep '^{' | tee $OUT/ours_train_bert_large.jsonl; echo "done $((SECONDS-T0)) s"
