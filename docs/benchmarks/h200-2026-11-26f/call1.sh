set -uo pipefail
T0=$SECONDS; END=${END:-330}
left() { echo $((END - (SECONDS - T0))); }
export PYTHONPATH=/tmp/site:$PWD:$PWD/tools PYTHONUNBUFFERED=1
ls /tmp/site/grain >/dev/null 2>&1 || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c "import jax,flax,torch,transformers as t;print('jax',jax.__version__,'flax',flax.__version__,'torch',torch.__version__,'transformers',t.__version__)"; date -u; } > $OUT/machine.txt 2>&1
run() { local f=$1; shift; [ "$(left)" -gt 25 ] || { echo "skip $*"; return; }; timeout $(left) "$@" 2>&1 | grep '^{' | tee -a "$OUT/$f"; echo "$* -> $((SECONDS - T0)) s" | tee -a $OUT/times.txt; }
# profiles without command buffers, so that every kernel's event names its own HLO op
export XLA_FLAGS=--xla_gpu_enable_command_buffer=
run profile.jsonl python3 tools/bench_train.py --only=bert-large --profile /tmp/prof
run profile.jsonl python3 tools/bench_train.py --only=mbert --profile /tmp/prof
unset XLA_FLAGS
python3 - <<'PY' > $OUT/ops_full.jsonl 2>&1
import glob, json, pathlib, sys
sys.path.insert(0, "tools")
from op_mix import trace_op_mix
for d in sorted(glob.glob("/tmp/prof/*/")):
    p = pathlib.Path(d)
    if not (p / "step.hlo.txt").exists(): continue
    mix = trace_op_mix(p, (p / "step.hlo.txt").read_text(), steps=3, top=2000)
    print(json.dumps({"case": p.name, **mix}))
PY
tar czf $OUT/hlo.tgz -C /tmp/prof $(cd /tmp/prof && ls */step.hlo.txt) 2>&1 | tail -2
run levers.jsonl python3 tools/bench_levers.py dropout-redrawn-masks train --only=bert-large
run ours_train.jsonl python3 tools/bench_train.py --only=bert-large
run levers.jsonl python3 tools/bench_levers.py dropout-redrawn-masks train --only=mbert
run ours_train.jsonl python3 tools/bench_train.py --only=mbert
echo "done at $((SECONDS - T0)) s"
