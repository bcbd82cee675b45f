"""Throughput benchmarks with the same cases, shapes and JSON fields as the PyTorch peer
(``shared/bench/peer_bench_torch.py``): random weights, training tokens/s at B32xS512 in bf16 with
AdamW, inference examples/s at B128xS256. Used by ``tools/bench_train.py`` and ``tools/bench_score.py``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from omnidistill.config import LossConfig, MeshConfig, ModelConfig, OptimConfig
from omnidistill.models.regressor import build_regressor
from omnidistill.train.loop import init_state
from omnidistill.train.mesh import batch_sharding, build_mesh, global_batch_array, replicated
from omnidistill.train.optimizer import build_optimizer
from omnidistill.train.step import make_predict_fn, make_train_step

PEAK_FLOPS = 989e12  # H100 dense bf16, the peer's MFU reference
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "mbert": ("bert", dict(vocab_size=119547, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)),
    "bert-large(mxbai)": (
        "bert",
        dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
    ),
    "deberta-v3-base": (
        "deberta_v2",
        dict(
            vocab_size=128100,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            relative_attention=True,
            position_buckets=256,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
            pos_att_type=["p2c", "c2p"],
            position_biased_input=False,
            max_relative_positions=-1,
            type_vocab_size=0,
            layer_norm_eps=1e-7,
        ),
    ),
    "modernbert-base(ettin-150m-like)": (
        "modernbert",
        dict(vocab_size=50368, hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152),
    ),
    "ettin-32m-like": (
        "modernbert",
        dict(vocab_size=50368, hidden_size=384, num_hidden_layers=10, num_attention_heads=6, intermediate_size=576),
    ),
}
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=1000)


def _model(name: str, tiny: bool, dtype: str, attention: str):
    family, hf = CASES[name]
    hf = {**hf, **TINY} if tiny else dict(hf)
    cfg = ModelConfig(family=family, attention=attention, dropout=0.0)
    model = build_regressor(cfg, hf, dtype={"bfloat16": jnp.bfloat16, "float32": jnp.float32}[dtype])
    return model, hf


def _param_counts(params: Any) -> tuple[int, int]:
    total = emb = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        n = int(np.prod(leaf.shape))
        total += n
        if "embed" in jax.tree_util.keystr(path) or "rel_embeddings" in jax.tree_util.keystr(path):
            emb += n
    return total, emb


def _peak_gb() -> float | None:
    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return round(peak / 1e9, 1) if peak else None


def bench_train(
    name: str, *, batch: int = 32, seq: int = 512, steps: int = 20, dtype: str = "bfloat16", attention: str = "xla", tiny: bool = False
) -> dict:
    model, hf = _model(name, tiny, dtype, attention)
    graphdef, state = nnx.split(model, nnx.Param)
    params = state.to_pure_dict()
    mesh = build_mesh(MeshConfig())
    tx, _ = build_optimizer(OptimConfig(lr=2e-5, head_lr=2e-5, weight_decay=0.01, grad_clip=None), params, 1000)
    train_state = init_state(params, tx, 0, mesh, ())
    shardings = jax.tree.map(lambda x: x.sharding, train_state)
    step = jax.jit(
        make_train_step(graphdef, tx, loss_cfg=LossConfig(), dropout=False),
        in_shardings=(shardings, batch_sharding(mesh)),
        out_shardings=(shardings, replicated(mesh)),
        donate_argnums=0,
    )
    rng = np.random.default_rng(0)
    host = {
        "input_ids": rng.integers(5, hf["vocab_size"], (batch, seq)).astype(np.int32),
        "attention_mask": np.ones((batch, seq), np.int32),
        "labels": rng.uniform(1, 5, (batch, 4)).astype(np.float32),
        "label_mask": np.ones((batch, 4), np.float32),
        "example_mask": np.ones((batch,), np.float32),
    }
    data = {k: global_batch_array(v, batch_sharding(mesh)) for k, v in host.items()}
    for _ in range(3):
        train_state, metrics = step(train_state, data)
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(steps):
        train_state, metrics = step(train_state, data)
    jax.block_until_ready(metrics)
    dt = (time.perf_counter() - start) / steps
    total, emb = _param_counts(params)
    n, layers, h = total - emb, hf["num_hidden_layers"], hf["hidden_size"]
    tok_s = batch * seq / dt
    return dict(
        model=name,
        framework="omnidistill-jax",
        dtype=dtype,
        attention=attention,
        params_M=round(total / 1e6, 1),
        nonemb_M=round(n / 1e6, 1),
        train_B=batch,
        train_S=seq,
        step_ms=round(dt * 1e3, 2),
        train_tok_s=round(tok_s),
        mfu_vs_989=round(tok_s * (6 * n + 12 * layers * h * seq) / PEAK_FLOPS, 3),
        peak_GB=_peak_gb(),
        device=jax.devices()[0].device_kind,
    )


def bench_score(
    name: str, *, batch: int = 128, seq: int = 256, steps: int = 20, dtype: str = "bfloat16", attention: str = "xla", tiny: bool = False
) -> dict:
    model, hf = _model(name, tiny, dtype, attention)
    graphdef, state = nnx.split(model, nnx.Param)
    predict = jax.jit(make_predict_fn(graphdef))
    params = state.to_pure_dict()
    rng = np.random.default_rng(0)
    data = {
        "input_ids": jnp.asarray(rng.integers(5, hf["vocab_size"], (batch, seq)), jnp.int32),
        "attention_mask": jnp.ones((batch, seq), jnp.int32),
    }
    for _ in range(3):
        out = predict(params, data)
    jax.block_until_ready(out)
    start = time.perf_counter()
    for _ in range(steps):
        out = predict(params, data)
    jax.block_until_ready(out)
    dt = (time.perf_counter() - start) / steps
    return dict(
        model=name,
        framework="omnidistill-jax",
        dtype=dtype,
        attention=attention,
        infer_B=batch,
        infer_S=seq,
        infer_ex_s=round(batch / dt),
        s_per_1000=round(1000 * dt / batch, 3),
        peak_GB=_peak_gb(),
        device=jax.devices()[0].device_kind,
    )


def run_cli(kind: str, argv: list[str] | None = None) -> None:
    """Shared argument parsing of the two bench tools; prints one JSON line per case."""
    import argparse

    default_attention = "cudnn" if jax.devices()[0].platform == "gpu" else "xla"
    p = argparse.ArgumentParser(description=f"omnidistill {kind} throughput, one JSON line per case (peer format)")
    p.add_argument("--only", default="", help="comma-separated substrings of case names, e.g. mbert,ettin")
    p.add_argument("--batch", type=int, default=32 if kind == "train" else 128)
    p.add_argument("--seq", type=int, default=512 if kind == "train" else 256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--attention", default=default_attention, choices=["xla", "cudnn"])
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test that runs anywhere)")
    args = p.parse_args(argv)
    print(json.dumps(dict(jax=jax.__version__, device=jax.devices()[0].device_kind, devices=jax.device_count())), flush=True)
    fn = bench_train if kind == "train" else bench_score
    for name in CASES:
        if args.only and not any(s in name for s in args.only.split(",")):
            continue
        try:
            result = fn(name, batch=args.batch, seq=args.seq, steps=args.steps, dtype=args.dtype, attention=args.attention, tiny=args.tiny)
        except Exception as err:  # report and go on, as the peer does
            result = dict(model=name, error=repr(err)[:300])
        print(json.dumps(result), flush=True)
