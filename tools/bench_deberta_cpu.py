"""DeBERTa-v3 training step on CPU, omnidistill against PyTorch ``DebertaV2Model`` at the same shapes.

    python tools/bench_deberta_cpu.py [--layers 4] [--batch 4] [--seq 256] [--vocab 32000] [--steps 3] [--attention auto]
        [--layout auto|cpu|accelerator] [--phases] [--ceiling] [--config JSON]

The CPU proxy for DeBERTa's GPU MFU: both sides run the same DeBERTa-v3-base layer shapes (hidden 768,
12 heads, 256 position buckets, shared c2p/p2c keys; fewer layers and a smaller vocabulary, so that a
step takes seconds on a laptop), fp32, random weights, one step = forward, MSE on ``1 + 4 sigmoid`` of
a 4-way linear head on [CLS], backward and AdamW. Each side takes two warm-up steps, then the sides
alternate, ``--steps`` timed steps each (ours then PyTorch, then PyTorch then ours, and so on), so that
each pair of steps shares the host's load of the moment. Prints one JSON line: each side's best step
time, their ratio (PyTorch time / ours; target >= 1.0), and ``ratio_median``, the median of the
``--steps`` pairs' ratios, which a noisy host moves less than the ratio of two best times.
``--layout`` forces the position scores' layout (``modeling.accelerator_layout``): ``accelerator`` is
the GPU's and TPU's, ``cpu`` the CPU's, ``auto`` this backend's.
``--phases`` also times each side's forward pass alone (PyTorch's recording its graph, as in
training) and its forward and backward pass without the optimizer (``*_forward_s``,
``*_forward_backward_s``), to tell where a gap lies. ``--config`` overrides fields of the Hugging
Face config, e.g. ``'{"relative_attention": false, "pos_att_type": []}'`` for the same encoder
without its position terms.
``--ceiling`` also times one feed-forward block of the same widths (dense, exact GELU, dense, over
the batch's ``batch x seq`` tokens; forward and backward, no model code on either side: ``jax.numpy``
against ``torch``), alternated as the steps are: ``ceiling_ratio`` is the ratio that matmul-bound
work reaches on this CPU's kernels (XLA's against MKL's), which bounds what the step's ratio can
reach, and ``ceiling_max_grad_diff`` shows that both sides computed the same gradients.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np


def deberta_config(layers: int, vocab: int) -> dict:
    from bench_cases import CASES

    return {**CASES["deberta-v3-base"][1], "num_hidden_layers": layers, "vocab_size": vocab}


def ours_runs(hf: dict, batch: dict[str, np.ndarray], attention: str, phases: bool) -> dict[str, Callable[[], None]]:
    """Our side's calls to time, by phase: the training step, and with ``phases`` its forward and
    forward-backward passes (each waits for its results)."""
    import jax
    from bench_cases import _jit_train_step, _optimizer
    from flax import nnx

    from omnidistill.config import LossConfig, MeshConfig, ModelConfig
    from omnidistill.models.regressor import build_regressor
    from omnidistill.parallel.mesh import batch_sharding, build_mesh, global_batch_array
    from omnidistill.train.setup import init_state
    from omnidistill.train.step import make_loss_fn

    model = build_regressor(ModelConfig(family="deberta_v2", pooling="cls_raw", attention=attention, dropout=0.0), hf)
    graphdef, state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    mesh = build_mesh(MeshConfig())
    tx = _optimizer(params)
    train_state = init_state(params, tx, 0, mesh, ())
    data = {k: global_batch_array(v, batch_sharding(mesh)) for k, v in batch.items()}
    step = _jit_train_step(graphdef, tx, jax.tree.map(lambda x: x.sharding, train_state), mesh)
    box = [train_state]

    def train() -> None:
        box[0], metrics = step(box[0], data)
        jax.block_until_ready(metrics)

    runs = {"step": train}
    if phases:
        loss = make_loss_fn(graphdef, LossConfig())
        forward = jax.jit(lambda p, b: loss(p, b, None))
        backward = jax.jit(lambda p, b: jax.value_and_grad(loss, has_aux=True)(p, b, None))
        runs["forward"] = lambda: jax.block_until_ready(forward(box[0].params, data))
        runs["forward_backward"] = lambda: jax.block_until_ready(backward(box[0].params, data))
    return runs


def ceiling_runs(hf: dict, tokens: int) -> tuple[dict[str, Callable[[], None]], float]:
    """One feed-forward block of ``hf``'s widths over ``tokens`` rows, forward and backward (the mean
    square of its output as the loss; gradients of the input, weights and biases), on each side with
    the same float32 arrays; and the largest difference between the two sides' gradients."""
    import jax
    import jax.numpy as jnp
    import torch

    width, inner = hf["hidden_size"], hf["intermediate_size"]
    rng = np.random.default_rng(0)
    arrays = [
        rng.standard_normal((tokens, width)),
        rng.standard_normal((width, inner)) / np.sqrt(width),
        rng.standard_normal(inner) * 0.1,
        rng.standard_normal((inner, width)) / np.sqrt(inner),
        rng.standard_normal(width) * 0.1,
    ]
    arrays = [a.astype(np.float32) for a in arrays]

    def block(x, w_in, b_in, w_out, b_out):
        return jnp.mean((jax.nn.gelu(x @ w_in + b_in, approximate=False) @ w_out + b_out) ** 2)

    grad = jax.jit(jax.grad(block, argnums=tuple(range(len(arrays)))))
    ours_in = [jnp.asarray(a) for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=True) for a in arrays]

    def theirs() -> list:
        for t in theirs_in:
            t.grad = None
        x, w_in, b_in, w_out, b_out = theirs_in
        torch.mean((torch.nn.functional.gelu(x @ w_in + b_in) @ w_out + b_out) ** 2).backward()
        return [t.grad for t in theirs_in]

    diff = max(float(np.max(np.abs(np.asarray(a) - b.numpy()))) for a, b in zip(grad(*ours_in), theirs(), strict=True))
    return {"omnidistill": lambda: jax.block_until_ready(grad(*ours_in)), "pytorch": theirs}, diff


def alternate(sides: dict[str, Callable[[], None]], steps: int) -> dict[str, list[float]]:
    """Seconds of each of ``steps`` timed calls per side, after two warm-up calls of each; the sides take
    turns, in the opposite order every other round, so that round k's calls share the host's load."""
    for run in sides.values():
        for _ in range(2):
            run()
    times = {name: [] for name in sides}
    order = list(sides)
    for k in range(steps):
        for name in order if k % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            sides[name]()
            times[name].append(time.perf_counter() - start)
    return times


def torch_runs(hf: dict, batch: dict[str, np.ndarray], phases: bool) -> dict[str, Callable[[], None]]:
    """PyTorch's calls to time, as :func:`ours_runs`."""
    import torch
    from transformers import DebertaV2Config, DebertaV2Model

    torch.manual_seed(0)
    encoder = DebertaV2Model(DebertaV2Config(**hf, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    head = torch.nn.Linear(hf["hidden_size"], 4)
    params = [*encoder.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=2e-5, weight_decay=0.01)
    ids, mask = torch.tensor(batch["input_ids"], dtype=torch.long), torch.tensor(batch["attention_mask"])
    labels = torch.tensor(batch["labels"])

    def forward():
        cls = encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        return torch.mean((1 + 4 * torch.sigmoid(head(cls)) - labels) ** 2)

    def forward_backward() -> None:
        opt.zero_grad()
        forward().backward()

    def train() -> None:
        forward_backward()
        opt.step()

    runs = {"step": train}
    if phases:
        runs |= {"forward": forward, "forward_backward": forward_backward}
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--attention", default="auto", help="model.attention of our side (auto: the blocked kernel on CPU)")
    p.add_argument("--side", choices=["both", "ours", "torch"], default="both")
    p.add_argument("--layout", choices=["auto", "cpu", "accelerator"], default="auto", help="the position scores' layout on our side")
    p.add_argument("--phases", action="store_true", help="also time the forward pass and the forward-backward pass on each side")
    p.add_argument("--ceiling", action="store_true", help="also time one feed-forward block of these widths on each side")
    p.add_argument("--config", type=json.loads, default={}, help="Hugging Face config fields to override (JSON)")
    args = p.parse_args()
    if args.layout != "auto":
        from omnidistill.models.deberta_v2 import modeling

        modeling.accelerator_layout = lambda: args.layout == "accelerator"

    from bench_cases import _train_batch

    hf = {**deberta_config(args.layers, args.vocab), **args.config}
    batch = _train_batch(hf, args.batch, args.seq)
    out = {"layers": args.layers, "batch": args.batch, "seq": args.seq, "vocab": args.vocab}
    out |= {"attention": args.attention, "layout": args.layout} | ({"config": args.config} if args.config else {})
    runs = {}
    if args.side in ("both", "ours"):
        runs["omnidistill"] = ours_runs(hf, batch, args.attention, args.phases)
    if args.side in ("both", "torch"):
        runs["pytorch"] = torch_runs(hf, batch, args.phases)
    for phase in runs[next(iter(runs))]:  # the step, then the phases on the state it trained
        times = alternate({side: by_phase[phase] for side, by_phase in runs.items()}, args.steps)
        out |= {f"{side}_{phase}_s": round(min(seconds), 3) for side, seconds in times.items()}
        if phase == "step" and args.side == "both":
            out["ratio"] = round(out["pytorch_step_s"] / out["omnidistill_step_s"], 2)
            out["ratio_median"] = round(float(np.median(np.divide(times["pytorch"], times["omnidistill"]))), 2)
            out["target_ratio"] = 1.0
    if args.ceiling:
        sides, out["ceiling_max_grad_diff"] = ceiling_runs(hf, args.batch * args.seq)
        times = alternate(sides, args.steps)
        best = {side: min(seconds) for side, seconds in times.items()}
        out |= {f"ceiling_{side}_s": round(seconds, 6) for side, seconds in best.items()}
        out["ceiling_ratio"] = round(best["pytorch"] / best["omnidistill"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
