"""Training throughput vs the PyTorch peer: python tools/bench_train.py [--only=mbert,ettin] [--tiny]"""

from bench_cases import run_cli

if __name__ == "__main__":
    run_cli("train")
