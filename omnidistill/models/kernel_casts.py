"""Matmul weights cast once to the dtype their layer computes in, for scoring: the same bits, one cast.

A layer that computes in bf16 with float32 parameters (``nnx.Linear(dtype=bfloat16)``, as training
and ``eval.compute_dtype: bfloat16`` build them) casts its float32 kernel to bf16 at every call. In a
scoring program that is one pass over every weight matrix per batch: on an H200, 13 ms of mBERT's
279 ms of device time per realistic-length pass, 40 of BERT-large's 982 (docs/benchmarks.md, the
eleventh lease's HLO). Casting those kernels once, when the model is loaded, gives the layer a kernel
already in its dtype, so its own cast does nothing and the outputs are the same bits (the twelfth lease
measured 2–4% a run). The layer casts its bias the same way, and where XLA cannot fuse that cast into
the bias add (mBERT's intermediate layer, whose add feeds the GELU) it is a kernel of its own at each
layer of each run: 12 of the 217 kernels of an mBERT run (the twelfth lease's HLO), each followed by the
device's gap of about 7 µs. So the bias is cast once too. Norms, embeddings and float32 layers (the
heads) are left as they are.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from flax import nnx


def lower_precision(layer_dtype: Any, kernel_dtype: Any) -> bool:
    """Whether a layer computing in ``layer_dtype`` casts a ``kernel_dtype`` kernel down (bf16 or
    float16 compute, float32 kernel)."""
    if layer_dtype is None:
        return False
    layer, kernel = jnp.dtype(layer_dtype), jnp.dtype(kernel_dtype)
    return jnp.issubdtype(layer, jnp.floating) and layer.itemsize < kernel.itemsize


def kernels_in_compute_dtype(graphdef: nnx.GraphDef, params: Any) -> Any:
    """``params`` (a pure dict of ``nnx.Param`` values) with the kernel and bias of every ``nnx.Linear``
    that computes in a lower precision than its kernel cast to that precision, as its own call casts
    them (``promote_dtype``); everything else unchanged."""
    model = nnx.merge(graphdef, params)
    for _, module in nnx.iter_modules(model):
        if isinstance(module, nnx.Linear) and lower_precision(module.dtype, module.kernel[...].dtype):
            module.kernel.set_value(module.kernel[...].astype(module.dtype))  # [...] = would keep float32
            if module.bias is not None:
                module.bias.set_value(module.bias[...].astype(module.dtype))
    return nnx.to_pure_dict(nnx.split(model, nnx.Param)[1])
