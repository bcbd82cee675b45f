"""bf16 dense layers on one CPU device, in the operand layout XLA's fast kernel takes.

XLA's CPU backend runs a bf16 matmul in its own kernel (YNNPACK, which uses AMX or AVX-512 BF16) only
when the dot accumulates in float32 and both operands lie row-major in the standard
``[M, K] · [K, N]`` layout. Any other dot has its operands upcast to float32 first
(XLA's operand upcaster) and runs at float32 speed, plus the conversions:

- ``nnx.Linear(dtype=bfloat16)`` asks for a bf16 result, so every forward matmul was upcast;
- the backward pass's products ``g · Wᵀ`` and ``xᵀ · g`` read a transposed operand, which XLA folds
  into the dot's dimension numbers, so they were upcast even with a float32 result.

:func:`dot_general` (given to the families' ``nnx.Linear``) computes such a layer's product as
:func:`matmul` instead: float32 accumulation rounded to the compute dtype, the same values the
upcast dot gives up to the order of its sums, and a backward pass whose two products take their
transposed operand as a row-major copy (``with_layout_constraint``), which costs one pass over a
weight or an activation and makes the product a standard one. On a 2-core Intel Xeon with AMX
(docs/benchmarks.md, "bf16 on a CPU") mBERT's bf16 training step at B8 x S128 went from 3.3 to
1.55 s (float32: 2.7 s), and the Scorer's bf16 pass over realistic lengths from 85 to 169
examples/s. It is taken where the CPU multiplies bf16
natively (:func:`native_bf16`): elsewhere it is unmeasured, and fp16, which XLA's kernel does not
speed up, is left as it was. Everything else, and every other backend or a mesh of several devices,
calls ``jax.lax.dot_general`` as before.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.experimental.layout import Layout, with_layout_constraint

from omnidistill.models.layers import SAVED_MATMUL, one_cpu_device

_ROW_MAJOR = Layout(major_to_minor=(0, 1))
_NATIVE_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16", "bf16"})  # x86's AMX / AVX-512 flags, Arm's feature


@functools.cache
def native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this host's CPU multiplies bf16 in hardware, by the flags of ``cpuinfo`` (x86:
    ``amx_bf16`` or ``avx512_bf16``; Arm: ``bf16``). False where the file cannot be read."""
    try:
        words = Path(cpuinfo).read_text().split()
    except OSError:
        return False
    return not _NATIVE_BF16_FLAGS.isdisjoint(words)


def _row_major_transpose(a: jax.Array) -> jax.Array:
    """``a.T`` (2-D) materialized row-major, so that XLA keeps it as an operand instead of folding
    the transpose into the dot that reads it."""
    return with_layout_constraint(a.T, _ROW_MAJOR)


def _product(lhs: jax.Array, rhs: jax.Array, dtype: Any) -> jax.Array:
    """``lhs @ rhs`` (2-D, standard layout) accumulated in float32, rounded to ``dtype``."""
    return jnp.dot(lhs, rhs, preferred_element_type=jnp.float32).astype(dtype)


@jax.custom_vjp
def matmul(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """``x @ kernel`` over ``x``'s last axis (``kernel`` 2-D, both bf16),
    accumulated in float32 and rounded to that dtype, forward and backward in standard layouts."""
    flat = x.reshape(-1, x.shape[-1])
    return _product(flat, kernel, x.dtype).reshape(*x.shape[:-1], kernel.shape[1])


def _matmul_forward(x: jax.Array, kernel: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return matmul(x, kernel), (x, kernel)


def _matmul_backward(residuals: tuple[jax.Array, jax.Array], grad: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, kernel = residuals
    flat_x, flat_grad = x.reshape(-1, x.shape[-1]), grad.reshape(-1, grad.shape[-1]).astype(x.dtype)
    grad_x = _product(flat_grad, _row_major_transpose(kernel), x.dtype).reshape(x.shape)
    grad_kernel = _product(_row_major_transpose(flat_x), flat_grad, kernel.dtype)
    return grad_x, grad_kernel


matmul.defvjp(_matmul_forward, _matmul_backward)


def takes_matmul(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any, preferred_element_type: Any) -> bool:
    """Whether :func:`dot_general` computes this product as :func:`matmul`: one CPU device with native
    bf16 (:func:`native_bf16`), both operands bf16, a 2-D right operand contracted over its first axis
    with the left one's last, no batch axes, and no result type asked for."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    return (
        preferred_element_type is None
        and lhs.dtype == rhs.dtype == jnp.bfloat16
        and rhs.ndim == 2
        and tuple(lhs_contract) == (lhs.ndim - 1,)
        and tuple(rhs_contract) == (0,)
        and not lhs_batch
        and not rhs_batch
        and one_cpu_device()
        and native_bf16()
    )


def dot_general(
    lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any, precision: Any = None, preferred_element_type: Any = None, **kwargs: Any
) -> jax.Array:
    """``jax.lax.dot_general``, except that a bf16 dense layer's product on one CPU device is
    :func:`matmul` (:func:`takes_matmul`), named :data:`~omnidistill.models.layers.SAVED_MATMUL` for
    ``model.remat: dots``. ``nnx.Linear(dot_general=...)`` calls it."""
    if not kwargs.get("out_sharding") and takes_matmul(lhs, rhs, dimension_numbers, preferred_element_type):
        return checkpoint_name(matmul(lhs, rhs), SAVED_MATMUL)
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision, preferred_element_type=preferred_element_type, **kwargs)
