"""A bench tool run with one lever set: a change undone, or a variant not in the code yet, patched into
the modules before the tool runs, so that both sides of an A/B run the same tool on the same machine.

    python tools/bench_levers.py LEVER train|score|memory [bench_train.py / bench_score.py / bench_memory.py options]
    python tools/bench_levers.py deberta-cpu-layout train --only=deberta
    python tools/bench_levers.py packed-vectors+dropout-selected-draws train --only=mbert   # levers joined by +

Levers (docs/benchmarks.md says what each measured):

- ``old-gelu``: ``jax.nn.gelu(approximate=False)``, the GELU before it computed float32 ``erf``.
- ``deberta-one-block``: DeBERTa's position scores from one block of all rows (``QUERY_BLOCK = 0``).
- ``deberta-rows-gathered`` / ``deberta-rows-sliced``: each block's relative-embedding rows gathered
  per block, or static slices of one gather of the 2S − 1 distances, whatever the backend.
- ``deberta-product-einsum`` / ``deberta-product-queries-first``: the position scores' product from
  ``jnp.einsum``, or laid out ``[N, S/T, B, T, S+T−1]`` (the queries first), whatever the backend.
- ``deberta-cpu-layout``: the CPU's rows and product on any backend (on a GPU: this layout's change undone).
- ``cudnn-mask-array``: cuDNN gets sequence lengths only for plain key padding, as before
  ``attention_by_lengths`` took causal rows and windows; those get the ``[B, 1, S, S]`` mask again
  (ModernBERT's local layers, decoders).
- ``cublas-gemms``: XLA's GPU compiler emits no Triton GEMMs (``--xla_gpu_enable_triton_gemm=false``,
  once JAX-Toolbox's default): every matmul goes to cuBLAS.
- ``cublaslt-epilogues``: matmuls through cuBLASLt (``--xla_gpu_enable_cublaslt=true``), which can add
  a bias in the matmul's epilogue instead of a pass of its own.
- ``dropout-per-element``: dropout masks from ``jax.random.bernoulli``, one Threefry call per element,
  as before the 16-bit draws (``models/dropout_masks.py``).
- ``dropout-selected-draws``: each call's four 16-bit draws picked by selects and shifts of
  broadcasts (``dropout_masks.draws_selected``) instead of stacked with a concatenate: the same masks.
- ``dropout-kept-masks``: each dropout mask kept for the backward pass on any backend, as before a GPU
  or TPU drew them again there (``dropout_masks.redraws_masks``).
- ``finite-per-array``: the train step tests each gradient array for non-finite values, as before it
  took the global norm's finiteness (``train/step.py: update_is_finite``).
- ``packed-vectors``: AdamW updates the undecayed arrays (biases, norm scales) of each group as one
  concatenated vector, and the step's gradient norm sums the arrays of at most 65,536 values as one
  (``train/packed_vectors.py``): the same values, far fewer small kernels. ``packed-vectors-fusible``:
  the same without the optimization barrier that makes XLA compute the packed update as one array.
- ``layernorm-two-pass``: every ``nnx.LayerNorm`` takes its variance as E[(x − E[x])²], a mean after
  the mean, where flax's default is E[x²] − E[x]² clamped at 0: one chain of two reductions, the
  normalization shape XLA's Triton rewriter fuses into a single kernel (softmax's shape).
- ``cudnn-layernorm``: the two-pass variance, and XLA rewrites the layer norms it recognises into cuDNN's
  norm kernels, forward and backward (``--xla_gpu_enable_cudnn_layer_norm=true``). Its pattern takes
  either variance form, but not flax's clamp.
- ``cudnn-layernorm-moments``: the same flag with E[x²] − E[x]² unclamped (flax's form less the clamp).
- ``triton-block-fusion``: every fusion XLA builds is emitted by its Triton emitter with automatic tiling
  (``--xla_gpu_experimental_enable_fusion_block_level_rewriter=true``).
- ``kernels-cast-per-call``: a scoring case's parameters as loaded, float32, so that every bf16 layer
  casts its kernel and bias at each call, as before the Scorer cast them once (``models/kernel_casts.py``).
- ``scorer-reads-each-batch``: the Scorer's loop (``bench_score.py --varlen --scorer-loop``) reads each
  batch's scores back before it makes the next batch, as before it kept two batches in flight
  (``eval/predict.py: IN_FLIGHT``). ``scorer-four-in-flight``: four batches in flight instead of two
  (the twelfth lease's Scorer loop ran at 0.90× the peer-style pass with two).
- ``state-copies``: the train step compiled without ``train/step.py: TRAIN_STEP_COMPILER_OPTIONS``, as
  before: XLA's CPU copy insertion then copies each donated optimizer-state array before updating it.
- ``triton-heroless-fusion``: XLA's priority fusion may also form Triton fusions without a reduction or
  matmul at their root (``--xla_gpu_experimental_enable_triton_heroless_priority_fusion=true``).

The XLA-flag levers are added to ``XLA_FLAGS`` before the backend starts (neither this tool nor
``bench_cases`` starts it on import).

The DeBERTa variants give the model's scores and gradients (``tests/test_bench.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, MutableMapping
from functools import partial
from typing import Any

import bench_cases
import flax.nnx.nn.normalization as flax_norm
import jax
import jax.numpy as jnp

import omnidistill.eval.predict as predict
import omnidistill.models.deberta_v2.modeling as deberta
import omnidistill.models.dropout_masks as dropout_masks
import omnidistill.models.layers as layers
import omnidistill.train.optimizer as optimizer
import omnidistill.train.packed_vectors as packed_vectors
import omnidistill.train.step as train_step

Patch = tuple[Any, str, Any]
"""(object, attribute, value) set on the object before the tool runs: ``obj[attr]`` for a mapping (a
dict the modules that imported it share, or ``os.environ``)."""


def xla_flags(*flags: str) -> list[Patch]:
    """``XLA_FLAGS`` with ``flags`` appended to what the environment has (read when the backend starts)."""
    return [(os.environ, "XLA_FLAGS", " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip())]


def apply(patches: list[Patch]) -> None:
    """Set each patch's value."""
    for obj, attr, value in patches:
        if isinstance(obj, MutableMapping):
            obj[attr] = value
        else:
            setattr(obj, attr, value)


def lengths_for_key_padding_only(takes_lengths: Callable[..., bool]) -> Callable[..., bool]:
    """``layers.takes_lengths`` narrowed to masks that are neither causal nor windowed."""
    return lambda mask, q_len, kv_len, bias, window: (
        window is None and not getattr(mask, "causal", False) and takes_lengths(mask, q_len, kv_len, bias, window)
    )


def finite_per_array(total: jax.Array, grads: Any, grad_norm: jax.Array) -> jax.Array:
    """``train_step.update_is_finite`` as it was: the loss finite, and every gradient array tested
    for non-finite values in a reduction of its own (the norm unused)."""
    del grad_norm
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(grads)]
    return jnp.isfinite(total) & jnp.all(jnp.stack(leaves))


def layer_norm_stats(variance: str) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """flax's ``_compute_stats`` with a layer norm's variance taken another way: ``two-pass``,
    E[(x − E[x])²] (flax's ``use_fast_variance=False``), or ``moments``, E[x²] − E[x]² without the clamp
    at 0. Statistics without a mean (RMSNorm), a mask or a named axis stay flax's."""
    stats = flax_norm._compute_stats

    def patched(x, axes, dtype, axis_name=None, axis_index_groups=None, use_mean=True, use_fast_variance=True, mask=None):
        if variance == "moments" and use_mean and mask is None and axis_name is None:
            x = x.astype(jnp.promote_types(dtype or x.dtype, jnp.float32))
            mean = x.mean(axes)
            return mean, jnp.square(x).mean(axes) - jnp.square(mean)
        fast = use_fast_variance and variance != "two-pass"
        return stats(x, axes, dtype, axis_name, axis_index_groups, use_mean=use_mean, use_fast_variance=fast, mask=mask)

    return patched


CUDNN_LAYER_NORM = "--xla_gpu_enable_cudnn_layer_norm=true"

LEVERS: dict[str, Callable[[], list[Patch]]] = {
    "old-gelu": lambda: [(layers.ACTIVATIONS, "gelu", lambda x: jax.nn.gelu(x, approximate=False))],
    "deberta-one-block": lambda: [(deberta, "QUERY_BLOCK", 0)],
    "deberta-rows-gathered": lambda: [(deberta, "block_rows", deberta.block_rows_gathered)],
    "deberta-rows-sliced": lambda: [(deberta, "block_rows", deberta.block_rows_sliced)],
    "deberta-product-einsum": lambda: [(deberta, "block_product", deberta.block_product_einsum)],
    "deberta-product-queries-first": lambda: [(deberta, "block_product", deberta.block_product_queries_first)],
    "deberta-cpu-layout": lambda: [
        (deberta, "block_rows", deberta.block_rows_gathered),
        (deberta, "block_product", deberta.block_product_einsum),
    ],
    "cudnn-mask-array": lambda: [(layers, "takes_lengths", lengths_for_key_padding_only(layers.takes_lengths))],
    "cublas-gemms": lambda: xla_flags("--xla_gpu_enable_triton_gemm=false"),
    "cublaslt-epilogues": lambda: xla_flags("--xla_gpu_enable_cublaslt=true"),
    "dropout-per-element": lambda: [(dropout_masks, "keep_mask", dropout_masks.keep_mask_per_element)],
    "dropout-selected-draws": lambda: [(dropout_masks, "split_draws", dropout_masks.draws_selected)],
    "dropout-kept-masks": lambda: [(dropout_masks, "redraws_masks", lambda: False)],
    "finite-per-array": lambda: [(train_step, "update_is_finite", finite_per_array)],
    "packed-vectors": lambda: [
        (optimizer, "group_adamw", packed_vectors.adamw_vectors_packed),
        (train_step, "gradient_norm", packed_vectors.packed_global_norm),
    ],
    "packed-vectors-fusible": lambda: [
        (optimizer, "group_adamw", partial(packed_vectors.adamw_vectors_packed, barrier=False)),
        (train_step, "gradient_norm", packed_vectors.packed_global_norm),
    ],
    "layernorm-two-pass": lambda: [(flax_norm, "_compute_stats", layer_norm_stats("two-pass"))],
    "cudnn-layernorm": lambda: [(flax_norm, "_compute_stats", layer_norm_stats("two-pass")), *xla_flags(CUDNN_LAYER_NORM)],
    "cudnn-layernorm-moments": lambda: [(flax_norm, "_compute_stats", layer_norm_stats("moments")), *xla_flags(CUDNN_LAYER_NORM)],
    "kernels-cast-per-call": lambda: [(bench_cases, "scoring_params", lambda graphdef, params: params)],
    "scorer-reads-each-batch": lambda: [(predict, "IN_FLIGHT", 0)],
    "scorer-four-in-flight": lambda: [(predict, "IN_FLIGHT", 4)],
    "state-copies": lambda: [(train_step, "TRAIN_STEP_COMPILER_OPTIONS", {})],
    "triton-block-fusion": lambda: xla_flags("--xla_gpu_experimental_enable_fusion_block_level_rewriter=true"),
    "triton-heroless-fusion": lambda: xla_flags("--xla_gpu_experimental_enable_triton_heroless_priority_fusion=true"),
}


def patches_of(lever: str) -> list[Patch]:
    """The patches of ``lever``, or of each of several levers joined by ``+`` (an ``XLA_FLAGS`` patch
    then holds every one's flags)."""
    patches: list[Patch] = []
    for name in lever.split("+"):
        for patch in LEVERS[name]():
            if patch[:2] == (os.environ, "XLA_FLAGS"):
                os.environ["XLA_FLAGS"] = patch[2]  # the next lever's flags append to these
            patches.append(patch)
    return patches


def main(argv: list[str]) -> None:
    if len(argv) < 2 or not all(n in LEVERS for n in argv[0].split("+")) or argv[1] not in ("train", "score", "memory"):
        sys.exit(f"usage: bench_levers.py {{{','.join(LEVERS)}}}[+LEVER...] train|score|memory [bench options]")
    lever, kind, *args = argv
    apply(patches_of(lever))
    print(f'{{"lever": "{lever}"}}', flush=True)
    bench_cases.run_cli(kind, args)


if __name__ == "__main__":
    main(sys.argv[1:])
