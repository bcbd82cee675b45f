"""Dropout's keep masks: four 16-bit draws from each call of the Threefry-2x32 hash.

``jax.random.bernoulli`` draws a float32 uniform per element, and with ``jax_threefry_partitionable``
(JAX's default) each element costs one whole Threefry-2x32 call (20 rounds) whose 64 bits are folded
into 32. Here each call of the hash serves four elements: its two 32-bit words are split into four
16-bit draws, and an element is dropped when its draw is below ``round(rate · 2^16)``. The rate is
thus realized to 1/65,536 (0.1 is 0.100006), and the kept values are scaled by the inverse of the
realized keep probability, so that the expectation stays exact.

The counters are the positions of the mask's groups of four along its last axis (the row along the
first axis, and the position within it), so a mask does not depend on how the array is sharded
across devices, nor on the backend (Threefry is exact integer arithmetic). Measured on an H200
(docs/benchmarks.md, seventh lease): BERT-large's training step with dropout 0.1 ran 1.014–1.020×
faster than with per-element draws, where dropout costs it 5–8% in all; an optimization barrier that
kept the hash's words out of their readers' fusions measured level (0.5% slower), and is not used.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.extend.random import threefry2x32_p

DRAW_BITS = 16
DRAWS_PER_CALL = 4
"""16-bit draws per Threefry-2x32 call (its 64 output bits)."""


def _key_words(rng: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The first two uint32 words of a raw (``PRNGKey``) or typed (``jax.random.key``) key."""
    data = jax.random.key_data(rng) if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key) else rng
    return data[0].astype(jnp.uint32), data[1].astype(jnp.uint32)


def _positions(shape: tuple[int, ...]) -> jax.Array:
    """uint32 array of ``shape`` holding each element's row-major position (under 2^32 elements)."""
    if math.prod(shape) >= 2**32:
        raise ValueError(f"a dropout mask's rows of shape {shape} hold 2^32 groups of draws or more")
    positions = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        positions = positions + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride)
        stride *= shape[axis]
    return positions


def _counters(shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """Threefry's two counter words for each group: the index along the first axis, and the position
    within that row. Distinct for every group, for arrays of any total size (a pod's global batch)."""
    if len(shape) < 2:
        return jnp.zeros(shape, jnp.uint32), _positions(shape)
    if shape[0] >= 2**32:
        raise ValueError(f"a dropout mask of shape {shape} has 2^32 rows or more")
    rows = jax.lax.broadcasted_iota(jnp.uint32, shape, 0)
    return rows, jnp.broadcast_to(_positions(shape[1:]), shape)


def draws_stacked(hi: jax.Array, lo: jax.Array) -> jax.Array:
    """The four 16-bit draws of each call, ``[..., groups, 4]``: ``hi``'s low and high halves, then
    ``lo``'s, stacked (a concatenate)."""
    low16 = jnp.uint32(2**DRAW_BITS - 1)
    return jnp.stack([hi & low16, hi >> DRAW_BITS, lo & low16, lo >> DRAW_BITS], axis=-1)


def draws_selected(hi: jax.Array, lo: jax.Array) -> jax.Array:
    """:func:`draws_stacked`'s draws, each element choosing its word and half by its place in the group:
    broadcasts, a select and shifts, with no concatenate. On a GPU XLA makes a concatenate the root of
    a fusion of its own, which then writes the mask; elementwise draws may fuse into the mask's readers
    instead (``tools/bench_levers.py dropout-selected-draws``; not measured on a GPU yet)."""
    place = jax.lax.broadcasted_iota(jnp.uint32, (*hi.shape, DRAWS_PER_CALL), hi.ndim)
    word = jnp.where(place < 2, hi[..., None], lo[..., None])
    return (word >> (jnp.uint32(DRAW_BITS) * (place & 1))) & jnp.uint32(2**DRAW_BITS - 1)


split_draws = draws_stacked
"""How :func:`keep_mask` splits each call's two words into its four draws."""


def drop_threshold(rate: float) -> int:
    """The 16-bit draw under which an element is dropped: ``round(rate · 2^16)``, at most 2^16 − 1 so
    that one draw in 65,536 is kept (a rate within 2^-17 of 1 would otherwise keep none, and the
    scale 1/0 would make the gradients NaN)."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate {rate} is not in [0, 1)")
    return min(round(rate * 2**DRAW_BITS), 2**DRAW_BITS - 1)


def keep_mask(rng: jax.Array, rate: float, shape: tuple[int, ...]) -> tuple[jax.Array, float]:
    """(boolean keep mask of ``shape``, its keep probability ``1 − threshold / 2^16``, the threshold
    from :func:`drop_threshold`)."""
    threshold = drop_threshold(rate)
    lead, last = (shape[:-1], shape[-1]) if shape else ((), 1)
    groups = -(-last // DRAWS_PER_CALL)
    row, position = _counters((*lead, groups))
    k1, k2 = _key_words(rng)
    hi, lo = threefry2x32_p.bind(k1, k2, row, position)
    draws = split_draws(hi, lo).reshape(*lead, groups * DRAWS_PER_CALL)[..., :last].reshape(shape)
    return draws >= jnp.uint32(threshold), 1.0 - threshold / 2**DRAW_BITS


def keep_mask_per_element(rng: jax.Array, rate: float, shape: tuple[int, ...]) -> tuple[jax.Array, float]:
    """The mask as ``jax.random.bernoulli`` draws it (one hash call per element), before the 16-bit
    draws; ``tools/bench_levers.py dropout-per-element`` measures against it."""
    return jax.random.bernoulli(rng, 1.0 - rate, shape), 1.0 - rate


def _masked(x: jax.Array, rate: float, rng: jax.Array) -> jax.Array:
    keep, keep_prob = keep_mask(rng, rate, x.shape)
    return jnp.where(keep, x / keep_prob, jnp.zeros_like(x))


def redraws_masks() -> bool:
    """Whether :func:`drop` draws each mask again in the backward pass rather than keeping it: on a GPU
    or TPU. A training step then keeps no boolean array per site: 49 of 16.8 M elements (0.82 GB) for
    BERT-large at B32×S512. On an H200 that lowered BERT-large's peak memory from 20.19 to 19.39 GB
    and mBERT's from 8.22 to 7.92 GB, with the step's time level within 0.5% (docs/benchmarks.md,
    eighth lease). The CPU keeps the masks: there the redraw made a training step's compile 28%
    slower (the hash's code twice in the program; tiny BERT, three runs each) for memory a CPU host
    rarely lacks. A TPU takes the GPU's choice (not measured there)."""
    return jax.default_backend() != "cpu"


def drop(x: jax.Array, rate: float, rng: jax.Array) -> jax.Array:
    """Inverted dropout of ``x`` with the mask :func:`keep_mask` draws; the backward pass redraws the
    mask or keeps it as :func:`redraws_masks` says. Both give the same values and gradients."""
    return (drop_redrawing_masks if redraws_masks() else drop_keeping_masks)(x, rate, rng)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def drop_redrawing_masks(x: jax.Array, rate: float, rng: jax.Array) -> jax.Array:
    """:func:`drop` whose backward pass draws the mask again from ``rng`` rather than keeping it."""
    return _masked(x, rate, rng)


def _redraw_forward(x: jax.Array, rate: float, rng: jax.Array) -> tuple[jax.Array, jax.Array]:
    return _masked(x, rate, rng), rng


def _redraw_backward(rate: float, rng: jax.Array, grad: jax.Array) -> tuple[jax.Array, None]:
    # tied to the gradient, so that XLA cannot merge the redraw with the forward pass's draw
    rng, grad = jax.lax.optimization_barrier((rng, grad))
    return _masked(grad, rate, rng), None


drop_redrawing_masks.defvjp(_redraw_forward, _redraw_backward)


def drop_keeping_masks(x: jax.Array, rate: float, rng: jax.Array) -> jax.Array:
    """:func:`drop` differentiated by JAX, which keeps each mask for the backward pass: the CPU's, and
    every backend's before the redraw (``tools/bench_levers.py dropout-kept-masks``)."""
    return _masked(x, rate, rng)
