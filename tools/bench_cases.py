"""Throughput benchmarks with the same cases, shapes and JSON fields as the PyTorch peer
(``shared/bench/peer_bench_torch.py``): random weights, training tokens/s at B32xS512 in bf16 with
AdamW, inference examples/s at B128xS256. Used by ``tools/bench_train.py`` and ``tools/bench_score.py``.
"""

from __future__ import annotations

import json
import re
import time
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax._src.ad_checkpoint import saved_residuals  # public only as print_saved_residuals
from op_mix import PROFILED_STEPS, STEP_HLO, programs_op_mix, trace_op_mix

from omnidistill.cli import xla_option
from omnidistill.config import LossConfig, MeshConfig, ModelConfig, OptimConfig
from omnidistill.data.pipeline import bucket_length, packed_eval_dataset
from omnidistill.data.token_batches import TokenBudget, token_eval_dataset
from omnidistill.eval.predict import checked_compiler_options, inference_buckets, inference_packing
from omnidistill.eval.program import ScoringProgram
from omnidistill.models.kernel_casts import kernels_in_compute_dtype
from omnidistill.models.layers import ATTENTION_KERNELS, predicting, resolve_attention
from omnidistill.models.registry import get_family
from omnidistill.models.regressor import abstract_regressor, build_regressor, make_predict_fn
from omnidistill.parallel.mesh import batch_sharding, build_mesh, global_batch_array, replicated, under_mesh
from omnidistill.train.memory import compiled_peak_gb, device_peak_gb, per_device_bytes
from omnidistill.train.optimizer import build_optimizer
from omnidistill.train.setup import init_state, state_target
from omnidistill.train.step import make_loss_fn, make_train_step, train_step_compiler_options

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
    "xlm-r-base": (
        "xlm_roberta",
        dict(
            vocab_size=250002,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            max_position_embeddings=514,
            type_vocab_size=1,
            pad_token_id=1,
            layer_norm_eps=1e-5,
        ),
    ),
    "qwen3-0.6b": (
        "qwen3",
        dict(
            vocab_size=151669,
            hidden_size=1024,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            intermediate_size=3072,
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        ),
    ),
    "embeddinggemma-300m": (
        "gemma3",
        dict(
            vocab_size=262144,
            hidden_size=768,
            num_hidden_layers=24,
            num_attention_heads=3,
            num_key_value_heads=1,
            head_dim=256,
            intermediate_size=1152,
            max_position_embeddings=2048,
            sliding_window=512,
            use_bidirectional_attention=True,
        ),
    ),
}
PEER_CASES = ("mbert", "bert-large(mxbai)", "deberta-v3-base", "modernbert-base(ettin-150m-like)", "ettin-32m-like")
"""The cases the PyTorch peer also runs (the others have no peer figure to compare with)."""
TINY = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16, intermediate_size=64, vocab_size=1000
)


def _model(
    name: str,
    tiny: bool,
    dtype: str,
    attention: str,
    remat: str = "none",
    abstract: bool = False,
    scan: bool = False,
    dropout: bool = False,
):
    """The case's regressor (random weights), or its shapes only when ``abstract``; ``scan``: ``model.scan_layers``;
    ``dropout``: the config's dropout rates, as ``omnidistill train`` applies them (else none)."""
    family, hf = CASES[name]
    hf = {**hf, **TINY} if tiny else dict(hf)
    # as the peer's *ForSequenceClassification; decoders as their embedding models pool
    pooling = get_family(family).default_pooling(hf) if get_family(family).decoder else "cls"
    cfg = ModelConfig(family=family, pooling=pooling, attention=attention, dropout=None if dropout else 0.0, remat=remat, scan_layers=scan)
    build = abstract_regressor if abstract else build_regressor  # the shapes as checkpoints and exports are loaded
    return build(cfg, hf, dtype={"bfloat16": jnp.bfloat16, "float32": jnp.float32}[dtype]), hf


def _train_batch(hf: dict, batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "input_ids": rng.integers(5, hf["vocab_size"], (batch, seq)).astype(np.int32),
        "attention_mask": np.ones((batch, seq), np.int32),
        "labels": rng.uniform(1, 5, (batch, 4)).astype(np.float32),
        "label_mask": np.ones((batch, 4), np.float32),
        "example_mask": np.ones((batch,), np.float32),
    }


def _jit_train_step(graphdef: Any, tx: Any, shardings: Any, mesh: Any, donate: bool = True, dropout: bool = False) -> Any:
    """The training run's step (``train/step.py``), jitted as the run jits it: the state donated, its XLA
    options (``train_step_compiler_options``), traced under ``mesh`` (``parallel/mesh.py: under_mesh``)."""
    step = jax.jit(
        make_train_step(graphdef, tx, loss_cfg=LossConfig(), dropout=dropout),
        in_shardings=(shardings, batch_sharding(mesh)),
        out_shardings=(shardings, replicated(mesh)),
        donate_argnums=0 if donate else (),
        compiler_options=train_step_compiler_options(),
    )
    return under_mesh(step, mesh)


def _optimizer(params: Any, ema_decay: float | None = None) -> Any:
    """AdamW as the cases train (``ema_decay``: with ``optim.ema_decay``'s moving average of the weights)."""
    return build_optimizer(OptimConfig(lr=2e-5, head_lr=2e-5, weight_decay=0.01, grad_clip=None, ema_decay=ema_decay), params, 1000)[0]


def _kernel(attention: str, dtype: str, seq: int, mesh: Any = None) -> str:
    """The attention kernel a case runs: ``auto`` resolved as its step traces it, at ``seq`` tokens and
    under ``mesh`` (training), or under ``predicting`` without a mesh (the scoring cases)."""
    with jax.set_mesh(mesh) if mesh is not None else predicting():
        return resolve_attention(attention, jnp.dtype(dtype), seq) or "xla"


def _param_counts(params: Any) -> tuple[int, int]:
    total = emb = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        n = int(np.prod(leaf.shape))
        total += n
        if "embed" in jax.tree_util.keystr(path) or "rel_embeddings" in jax.tree_util.keystr(path):
            emb += n
    return total, emb


def case_trace_dir(profile: str, name: str) -> Path:
    """The folder under ``--profile DIR`` for one case's trace: its name with other characters as ``_``."""
    return Path(profile) / re.sub(r"[^\w.-]", "_", name)


def bench_train(
    name: str,
    *,
    batch: int = 32,
    seq: int = 512,
    steps: int = 20,
    dtype: str = "bfloat16",
    attention: str = "auto",
    remat: str = "none",
    tiny: bool = False,
    donate: bool = True,
    feed: str = "device",
    profile: str = "",
    dropout: bool = True,
    ema_decay: float | None = None,
) -> dict:
    """Training tokens/s of one case at B``batch`` x S``seq``. Levers: ``donate`` (the state's buffers
    reused by the step, as training does); ``feed`` ``device`` (one batch kept on the device) or
    ``host`` (each step's batch sent from host memory, as the training loop sends grain's batches);
    ``profile``: a folder for a ``jax.profiler`` trace of 3 more steps, whose op mix
    (``tools/op_mix.py``) joins the result; ``dropout``: the case's dropout rates applied, as
    ``omnidistill train`` applies them (BERT's and DeBERTa's 0.1; the peer trains with them too), or none;
    ``ema_decay``: the optimizer keeps ``optim.ema_decay``'s moving average of the weights too."""
    model, hf = _model(name, tiny, dtype, attention, remat, dropout=dropout)
    graphdef, state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    mesh = build_mesh(MeshConfig())
    tx = _optimizer(params, ema_decay)
    train_state = init_state(params, tx, 0, mesh, ())
    shardings = jax.tree.map(lambda x: x.sharding, train_state)
    host = _train_batch(hf, batch, seq)
    to_device = lambda: {k: global_batch_array(v, batch_sharding(mesh)) for k, v in host.items()}
    data = to_device()
    step = _jit_train_step(graphdef, tx, shardings, mesh, donate, model.dropout_rate > 0).lower(train_state, data).compile()
    for _ in range(3):
        train_state, metrics = step(train_state, data)
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(steps):
        train_state, metrics = step(train_state, to_device() if feed == "host" else data)
    jax.block_until_ready(metrics)
    dt = (time.perf_counter() - start) / steps
    mix = {}
    if profile:
        trace_dir = case_trace_dir(profile, name)
        with jax.profiler.trace(str(trace_dir)):
            for _ in range(PROFILED_STEPS):
                train_state, metrics = step(train_state, data)
            jax.block_until_ready(metrics)
        hlo = step.as_text()
        (trace_dir / STEP_HLO).write_text(hlo, encoding="utf-8")
        try:
            mix = {"op_mix": trace_op_mix(trace_dir, hlo, steps=PROFILED_STEPS)}
        except (OSError, ValueError, KeyError) as err:  # the trace itself stays for a viewer
            mix = {"op_mix": {"error": repr(err)[:300]}}
    total, emb = _param_counts(params)
    n, layers, h = total - emb, hf["num_hidden_layers"], hf["hidden_size"]
    tok_s = batch * seq / dt
    return dict(
        model=name,
        framework="omnidistill-jax",
        dtype=dtype,
        attention=_kernel(attention, dtype, seq, mesh),
        params_M=round(total / 1e6, 1),
        nonemb_M=round(n / 1e6, 1),
        train_B=batch,
        train_S=seq,
        step_ms=round(dt * 1e3, 2),
        train_tok_s=round(tok_s),
        mfu_vs_989=round(tok_s * (6 * n + 12 * layers * h * seq) / PEAK_FLOPS, 3),
        remat=remat,
        donate=donate,
        feed=feed,
        dropout=model.dropout_rate,
        ema_decay=ema_decay,
        peak_GB=device_peak_gb(),
        compiled_peak_GB=compiled_peak_gb(step),
        device=jax.devices()[0].device_kind,
        **mix,
    )


def _saved_bytes(name: str, tiny: bool, dtype: str, remat: str, batch: int, seq: int) -> tuple[int, Any, dict]:
    """(activation bytes kept for the backward pass, parameter shapes, HF config), with the case's
    dropout applied as training applies it."""
    model, hf = _model(name, tiny, dtype, "xla", remat, abstract=True, dropout=True)
    graphdef, state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    data = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _train_batch(hf, batch, seq))
    loss_fn = make_loss_fn(graphdef, LossConfig())
    rng = jax.random.PRNGKey(0) if model.dropout_rate > 0 else None
    saved = saved_residuals(lambda p, d: loss_fn(p, d, rng)[0], params, data)
    activations = sum(a.size * a.dtype.itemsize for a, why in saved if "argument" not in why)
    return activations, params, hf


def _state_bytes_per_device(name: str, params: Any, fsdp: int) -> int:
    """Bytes of one device's train state on a data 1 x fsdp ``fsdp`` mesh, from the shardings the
    training run gives it (:func:`~omnidistill.train.setup.state_target`): parameters, AdamW's two
    moments, and gradients sharded like the parameters."""
    mesh = jax.sharding.AbstractMesh((1, fsdp, 1), ("data", "fsdp", "tensor"))
    target = state_target(params, _optimizer(params), mesh, get_family(CASES[name][0]).sharding_rules)
    return per_device_bytes(target) + per_device_bytes(target.params)


def bench_memory(
    name: str,
    *,
    batch: int = 32,
    seq: int = 512,
    dtype: str = "bfloat16",
    remat: str = "none",
    fsdp: int = 1,
    tiny: bool = False,
    **_: Any,
) -> dict:
    """Training memory per device from shapes alone (nothing is allocated, so any size can be sized
    anywhere), with the XLA attention kernel (cuDNN keeps no [B, N, S, S] scores); ``batch`` is the
    batch of one device:

    - ``state_GB``: fp32 parameters, gradients and two AdamW moments, on one device of an ``fsdp``-way
      FSDP mesh (the whole state when ``fsdp`` is 1);
    - ``saved_GB``: what the forward pass keeps for the backward pass under the remat policy;
    - ``recompute_GB``: what one layer rebuilds at a time in the backward pass under remat (the part
      of its activations that remat stopped keeping);
    - ``estimate_GB``: their sum. The measured figure is ``peak_GB`` of ``bench_train`` on a GPU.
    """
    saved, params, hf = _saved_bytes(name, tiny, dtype, remat, batch, seq)
    recompute = 0
    if remat != "none":  # what one layer rebuilds at a time: the part remat stopped keeping
        unremat = _saved_bytes(name, tiny, dtype, "none", batch, seq)[0]
        recompute = max(unremat - saved, 0) // hf["num_hidden_layers"]
    state = _state_bytes_per_device(name, params, fsdp)
    return dict(
        model=name,
        framework="omnidistill-jax",
        dtype=dtype,
        remat=remat,
        fsdp=fsdp,
        params_M=round(_param_counts(params)[0] / 1e6, 1),
        train_B=batch,
        train_S=seq,
        state_GB=round(state / 1e9, 3),
        saved_GB=round(saved / 1e9, 3),
        recompute_GB=round(recompute / 1e9, 3),
        estimate_GB=round((state + saved + recompute) / 1e9, 3),
    )


scoring_params = kernels_in_compute_dtype
"""The parameters a scoring case is given, as the Scorer gives them to its program: the bf16 layers'
kernels cast once (``models/kernel_casts.py``). ``bench_levers.py kernels-cast-per-call`` undoes it."""


def bench_score(
    name: str,
    *,
    batch: int = 128,
    seq: int = 256,
    steps: int = 20,
    dtype: str = "bfloat16",
    attention: str = "auto",
    tiny: bool = False,
    compiler_options: dict | None = None,
) -> dict:
    model, hf = _model(name, tiny, dtype, attention)
    graphdef, state = nnx.split(model, nnx.Param)
    predict = jax.jit(make_predict_fn(graphdef), compiler_options=compiler_options or None)
    params = scoring_params(graphdef, nnx.to_pure_dict(state))
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
        attention=_kernel(attention, dtype, seq),
        infer_B=batch,
        infer_S=seq,
        infer_ex_s=round(batch / dt),
        s_per_1000=round(1000 * dt / batch, 3),
        peak_GB=device_peak_gb(),
        device=jax.devices()[0].device_kind,
        **({"compiler_options": compiler_options} if compiler_options else {}),
    )


LENGTHS = Path(__file__).resolve().parent / "score_lengths.txt"
"""The peer's realistic scoring lengths (8,192 items, lognormal, median 88, 4% over 256; a copy of
shared/bench/score_lengths.txt), for ``--varlen``."""


def varlen_batches(lengths: list[int], batch: int, max_length: int, length_step: int) -> list[tuple[int, list[int]]]:
    """(padded length, item lengths) of each batch as omnidistill's Scorer forms them: items sorted by
    length, the one partial batch holding the shortest, each batch padded to the next multiple of
    ``length_step`` (``eval.length_step``) tokens, capped at ``max_length``."""
    order = sorted(min(n, max_length) for n in lengths)
    first = len(order) % batch
    starts = ([0] if first else []) + list(range(first, len(order), batch))
    groups = [order[a : a + (first if a == 0 and first else batch)] for a in starts]
    buckets = inference_buckets(max_length, length_step)
    return [(bucket_length(max(g), buckets), g) for g in groups]


def packed_varlen_batches(lengths: list[int], batch: int, max_length: int, pack_length: int) -> tuple[list[dict[str, np.ndarray]], int]:
    """The Scorer's batches with ``eval.pack_length = pack_length`` (attention masks, segment ids) for
    items of these token counts, and the number of slots per packed row."""
    packing = inference_packing(pack_length, batch, max_length)
    items = [min(n, max_length) for n in lengths]
    ds = packed_eval_dataset(
        [np.ones(n, np.int32) for n in items], pad_id=0, global_batch=batch, buckets=inference_buckets(max_length, 32), packing=packing
    )
    return [{k: v for k, v in b.items() if k != "index"} for b in ds], packing.max_segments


def token_varlen_batches(lengths: list[int], max_length: int, batch_tokens: int) -> list[dict[str, np.ndarray]]:
    """The Scorer's batches with ``eval.batch_tokens = batch_tokens`` on one device (attention masks and
    ``token_index``) for items of these token counts."""
    budget = TokenBudget(max(batch_tokens, max_length), 1, inference_buckets(max_length, 32))
    ds = token_eval_dataset([np.ones(min(n, max_length), np.int32) for n in lengths], pad_id=0, budget=budget)
    return [{"attention_mask": b["attention_mask"], "token_index": b["token_index"]} for b in ds]


def bench_score_varlen(
    name: str,
    *,
    lengths: list[int],
    batch: int = 128,
    steps: int = 3,
    dtype: str = "bfloat16",
    attention: str = "auto",
    tiny: bool = False,
    pack_length: int = 0,
    batch_tokens: int = 0,
    length_step: int = 32,
    profile: str = "",
    compiler_options: dict | None = None,
    scorer_loop: bool = False,
) -> dict:
    """Scoring items of realistic lengths (the peer's ``--varlen`` case): the same lengths and batch
    size, batched as the Scorer batches them (sorted, padded per batch to a multiple of ``length_step``
    tokens, ``eval.length_step``; a partial batch is filled with masked rows; with ``pack_length``, packed rows of that many tokens as
    ``eval.pack_length`` packs them; with ``batch_tokens``, batches of that many real tokens and the
    layers unpadded, as ``eval.batch_tokens`` makes them, ``batch`` then unused). Every shape is
    compiled before timing; one pass over all items is timed ``steps`` times, and the host's time to
    enqueue a pass (``enqueue_ms_per_pass``, the best of the timed passes). That is not the host's own
    cost when the device is the slower side: the runtime lets only a few runs queue ahead, so the
    enqueueing then waits for the device (the twelfth lease: 0.72–0.81 of the device's time with 40 runs
    queued, docs/benchmarks.md). ``dispatch_ms_per_call`` is that cost: the median over the pass's batches
    of one call's dispatch with the device idle. ``scores_sum`` is the sum of the last pass's scores:
    variants of one case that compute the same scores give the same sum, up to rounding.
    ``compiler_options``: XLA options for the scoring program (``eval.compiler_options``). ``profile``: a folder for a
    ``jax.profiler`` trace of one more pass, whose op mix over every shape's program joins the result
    (with ``device_busy``, the share of the pass's wall time the device spent in its ops).

    ``scorer_loop``: each pass is the Scorer's own, :func:`predict_ids` on the items' token ids (random),
    which makes the batches on the host, copies each to the device and reads its scores back, instead
    of dispatching batches made and placed on the device before the timing (the peer's way).
    ``enqueue_ms_per_pass`` is then the whole pass: its dispatches wait for read-backs."""
    model, hf = _model(name, tiny, dtype, attention)
    max_length = min(512, hf.get("max_position_embeddings", 512))
    graphdef, state = nnx.split(model, nnx.Param)
    rng = np.random.default_rng(0)
    if pack_length:
        layouts, slots = packed_varlen_batches(lengths, batch, max_length, pack_length)
    elif batch_tokens and model.takes_token_index:  # other families score in batches of items
        layouts, slots = token_varlen_batches(lengths, max_length, batch_tokens), 1
    else:
        layouts, slots = [], 1
        for seq, group in varlen_batches(lengths, batch, max_length, length_step):
            real = np.zeros((batch, seq), np.int32)
            for row, n in enumerate(group):
                real[row, :n] = 1
            layouts.append({"attention_mask": real})
    batches = []  # as numpy: the scorer loop uses them only for the padding and shape counts
    for layout in layouts:
        real = layout["attention_mask"]
        ids = rng.integers(5, hf["vocab_size"], real.shape) * real
        batches.append({**layout, "input_ids": ids.astype(np.int32)})
    if scorer_loop:
        tokens = batch_tokens if model.takes_token_index else 0
        batching = dict(batch=batch, pack_length=pack_length, batch_tokens=tokens, length_step=length_step)
        program, one_pass = _scorer_loop_pass(
            graphdef, nnx.to_pure_dict(state), lengths, max_length, hf["vocab_size"], compiler_options, **batching
        )
        predict, params = program.predict_fn, program.params  # cast and placed by the program, as the Scorer's
    else:
        params = scoring_params(graphdef, nnx.to_pure_dict(state))
        predict = jax.jit(make_predict_fn(graphdef, num_segments=slots), compiler_options=compiler_options or None)
        placed = [{k: jnp.asarray(v) for k, v in b.items()} for b in batches]

        def one_pass():
            return [predict(params, b) for b in placed]

    jax.block_until_ready(one_pass())  # compile every padded length
    enqueued = []
    start = time.perf_counter()
    for _ in range(steps):
        begin = time.perf_counter()
        outs = one_pass()
        enqueued.append(time.perf_counter() - begin)
        jax.block_until_ready(outs)
    dt = (time.perf_counter() - start) / steps
    checksum = float(sum(np.asarray(o, np.float64).sum() for o in outs))
    dispatch = [] if scorer_loop else [_dispatch_seconds(predict, params, b) for b in placed]
    mix = {"op_mix": _profiled_pass(case_trace_dir(profile, name), predict, params, batches, one_pass)} if profile else {}
    items, real_tokens = len(lengths), sum(min(n, max_length) for n in lengths)
    padded = sum(b["attention_mask"].size for b in batches)
    return dict(
        model=name,
        framework="omnidistill-jax",
        mode="varlen",
        loop="scorer" if scorer_loop else "preplaced",
        dtype=dtype,
        attention=_kernel(attention, dtype, max_length),
        items=items,
        infer_B=batch,
        real_tokens=real_tokens,
        infer_ex_s=round(items / dt),
        infer_real_tok_s=round(real_tokens / dt),
        s_per_1000=round(1000 * dt / items, 3),
        padding=round(1 - real_tokens / padded, 3),
        pack_length=pack_length,
        batch_tokens=batch_tokens if "token_index" in batches[0] else 0,
        length_step=length_step if not (pack_length or "token_index" in batches[0]) else 32,
        shapes=len({b["input_ids"].shape for b in batches}),
        enqueue_ms_per_pass=round(1e3 * min(enqueued), 1),
        **({"dispatch_ms_per_call": round(1e3 * float(np.median(dispatch)), 3)} if dispatch else {}),
        scores_sum=round(checksum, 2),
        device=jax.devices()[0].device_kind,
        **({"compiler_options": compiler_options} if compiler_options else {}),
        **mix,
    )


def _dispatch_seconds(predict: Any, params: Any, batch: dict[str, jax.Array]) -> float:
    """The host's time to dispatch one call of ``predict`` on ``batch`` with the device idle (its
    last run finished first), so that no queue ahead of it makes the call wait."""
    jax.block_until_ready(predict(params, batch))
    begin = time.perf_counter()
    out = predict(params, batch)
    seconds = time.perf_counter() - begin
    jax.block_until_ready(out)
    return seconds


def _scorer_loop_pass(
    graphdef: Any,
    params: Any,
    lengths: list[int],
    max_length: int,
    vocab_size: int,
    compiler_options: dict | None,
    *,
    batch: int,
    pack_length: int,
    batch_tokens: int,
    length_step: int,
) -> tuple[Any, Any]:
    """(the Scorer's :class:`ScoringProgram` with its mesh and batching: ``batch`` items, or packed rows
    of ``pack_length``, or ``batch_tokens`` real tokens; one pass of its loop, :func:`predict_ids`,
    over random token ids of these lengths)."""
    program = ScoringProgram.build(
        graphdef,
        params,
        max_length=max_length,
        batch_size=batch,
        length_step=length_step,
        pack_length=pack_length,
        batch_tokens=batch_tokens,
        compiler_options=compiler_options,
    )
    rng = np.random.default_rng(1)
    ids = [rng.integers(5, vocab_size, min(n, max_length)).astype(np.int32) for n in lengths]
    return program, lambda: [program.predict(ids, pad_id=0)[0]]


def _profiled_pass(trace_dir: Path, predict: Any, params: Any, batches: list[dict], one_pass: Any) -> dict:
    """One scoring pass traced into ``trace_dir``, each shape's compiled HLO kept beside it
    (``program_N.hlo.txt``), and the pass's :func:`op_mix.programs_op_mix`."""
    shapes = {tuple((k, v.shape) for k, v in sorted(b.items())): b for b in batches}
    texts = [predict.lower(params, b).compile().as_text() for b in shapes.values()]
    with jax.profiler.trace(str(trace_dir)):
        start = time.perf_counter()
        jax.block_until_ready(one_pass())
        wall = time.perf_counter() - start
    for i, text in enumerate(texts):
        (trace_dir / f"program_{i}.hlo.txt").write_text(text, encoding="utf-8")
    try:
        return programs_op_mix(trace_dir, texts, passes=1, wall_s=wall)
    except (OSError, ValueError, KeyError) as err:  # the trace itself stays for a viewer
        return {"error": repr(err)[:300]}


def case_from_config(path: str) -> tuple[str, tuple[str, dict[str, Any]]]:
    """(case name, (family, Hugging Face config)) of an omnidistill config file. Nothing is downloaded:
    ``model.init_from`` is read only when it is a local folder; a hub id needs the shape in ``model.arch``.
    ``model.dropout``, where set, becomes the config's dropout rates, as training applies it."""
    from omnidistill.config import load_config

    cfg = load_config(path)
    hf: dict[str, Any] = {}
    if cfg.model.init_from:
        folder = Path(cfg.model.init_from)
        if (folder / "config.json").is_file():
            hf = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        elif not cfg.model.arch:
            raise SystemExit(f"{path}: model.init_from={cfg.model.init_from} is not a local folder; give the shape in model.arch")
    hf.update(cfg.model.arch)
    hf.setdefault("model_type", get_family(cfg.model.family).hf_model_types[0])
    if "vocab_size" not in hf and cfg.model.tokenizer:
        from transformers import AutoTokenizer

        hf["vocab_size"] = len(AutoTokenizer.from_pretrained(cfg.model.tokenizer))
    if cfg.model.dropout is not None:
        port = get_family(cfg.model.family).config_from_hf(hf).with_dropout(cfg.model.dropout)
        hf.update(port.to_hf())
    return Path(path).stem, (cfg.model.family, hf)


def attention_kernels(text: str) -> list[str]:
    """``--attention``'s comma-separated ``model.attention`` kernels, each one of ``ATTENTION_KERNELS``."""
    import argparse

    kernels = text.split(",")
    unknown = [k for k in kernels if k not in ATTENTION_KERNELS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{','.join(unknown)}: not one of {', '.join(ATTENTION_KERNELS)}")
    return kernels


def run_cli(kind: str, argv: list[str] | None = None) -> None:
    """Shared argument parsing of the bench tools (``train``, ``score``, ``memory``); one JSON line per case."""
    import argparse

    what = {"train": "training throughput", "score": "inference throughput", "memory": "training-step peak memory"}[kind]
    p = argparse.ArgumentParser(description=f"omnidistill {what}, one JSON line per case (the peer's format)")
    p.add_argument("--only", default="", help="comma-separated substrings of case names, e.g. mbert,ettin")
    p.add_argument("--batch", type=int, default=128 if kind == "score" else 32)
    p.add_argument("--seq", type=int, default=256 if kind == "score" else 512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument(
        "--attention",
        default="auto",
        type=attention_kernels,
        help="comma-separated model.attention kernels, one case each, e.g. xla,blocked; "
        "auto: splash on TPU, cudnn on GPU in bf16, blocked on CPU, else xla",
    )
    if kind != "score":
        p.add_argument("--remat", default="none", help="comma-separated model.remat policies, one case each: none,full,dots")
    if kind == "train":
        p.add_argument("--no-donate", dest="donate", action="store_false", help="do not donate the train state to the step (a lever)")
        p.add_argument(
            "--no-dropout", dest="dropout", action="store_false", help="train without the config's dropout (a lever; training applies it)"
        )
        p.add_argument("--feed", default="device", choices=["device", "host"], help="host: each step's batch is sent from host memory")
        p.add_argument("--ema-decay", type=float, default=None, help="keep optim.ema_decay's moving average of the weights (a lever)")
    if kind != "memory":
        traced = "3 more steps" if kind == "train" else "one more --varlen pass"
        p.add_argument("--profile", default="", metavar="DIR", help=f"trace {traced} into DIR/CASE and add the op mix (tools/op_mix.py)")
    if kind == "memory":
        p.add_argument(
            "--fsdp", default="1", help="comma-separated FSDP mesh sizes, one case each: the train state per device (--batch is per device)"
        )
    else:
        p.add_argument(
            "--varlen",
            nargs="?",
            const=str(LENGTHS),
            default=None,
            metavar="LENGTHS_FILE",
            help="score items of realistic lengths (default: tools/score_lengths.txt, the peer's --varlen file) in batches of --batch, "
            "padded per batch as the Scorer pads; --seq is ignored, --steps is the number of timed passes (default 3)",
        )
        p.add_argument("--pack-length", type=int, default=0, help="--varlen: pack items into rows of this many tokens (eval.pack_length)")
        p.add_argument(
            "--batch-tokens", type=int, default=0, help="--varlen: batches of this many real tokens, layers unpadded (eval.batch_tokens)"
        )
        p.add_argument(
            "--length-step", type=int, default=32, help="--varlen: pad each batch to a multiple of this many tokens (eval.length_step)"
        )
        p.add_argument(
            "--scorer-loop",
            action="store_true",
            help="--varlen: each pass is the Scorer's own loop (batches made on the host, copied over, scores read back)",
        )
    if kind == "score":
        p.add_argument(
            "--xla-option", type=xla_option, action="append", default=[], metavar="NAME=VALUE", help="as `omnidistill score --xla-option`"
        )
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test that runs anywhere)")
    p.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="CONFIG",
        help="an omnidistill config file as one more case (its model.family, and model.arch over a local "
        "model.init_from folder's config.json); repeatable; with --case only those cases run unless --only is given",
    )
    args = p.parse_args(argv)
    if kind == "score" and args.profile and not args.varlen:
        p.error("--profile traces a --varlen pass (bench_train.py --profile traces training steps)")
    for path in args.case:
        name, case = case_from_config(path)
        CASES[name] = case
    if args.case and not args.only:
        args.only = ",".join(Path(c).stem for c in args.case)
    print(json.dumps(dict(jax=jax.__version__, device=jax.devices()[0].device_kind, devices=jax.device_count())), flush=True)
    fn = {"train": bench_train, "score": bench_score, "memory": bench_memory}[kind]
    common = dict(batch=args.batch, seq=args.seq, steps=args.steps, dtype=args.dtype, tiny=args.tiny)
    if kind == "train":
        common.update(donate=args.donate, feed=args.feed, profile=args.profile, dropout=args.dropout, ema_decay=args.ema_decay)
    if kind == "score":
        try:
            common.update(compiler_options=checked_compiler_options(dict(args.xla_option), "--xla-option"))
        except ValueError as err:
            p.error(str(err))
    if getattr(args, "varlen", None):
        lengths = [int(x) for x in Path(args.varlen).read_text(encoding="ascii").split()]
        fn = partial(
            bench_score_varlen,
            lengths=lengths,
            pack_length=args.pack_length,
            batch_tokens=args.batch_tokens,
            length_step=args.length_step,
            profile=args.profile,
            scorer_loop=args.scorer_loop,
        )
        common = dict(
            batch=args.batch,
            steps=3 if args.steps == 20 else args.steps,
            dtype=args.dtype,
            tiny=args.tiny,
            compiler_options=common.get("compiler_options"),
        )
    variants = [{"attention": kernel} for kernel in args.attention]
    if kind != "score":
        variants = [{**v, "remat": remat} for v in variants for remat in args.remat.split(",")]
    if kind == "memory":
        variants = [{**v, "fsdp": int(n)} for v in variants for n in args.fsdp.split(",")]
    for name in CASES:
        if args.only and not any(s in name for s in args.only.split(",")):
            continue
        for variant in variants:
            try:
                result = fn(name, **common, **variant)
            except Exception as err:  # report and go on, as the peer does
                result = dict(model=name, error=repr(err)[:300])
            print(json.dumps(result), flush=True)
