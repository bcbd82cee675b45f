"""Training-step peak memory per case and remat policy, from shapes alone (XLA's estimate on this
backend): python tools/bench_memory.py --only=bert-large --batch 64 --seq 512 --remat none,full,dots"""

from bench_cases import run_cli

if __name__ == "__main__":
    run_cli("memory")
