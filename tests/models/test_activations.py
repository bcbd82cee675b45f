"""The exact GELU: jax.nn.gelu's values and gradients, keeping only its input for the backward pass."""

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.ad_checkpoint import saved_residuals

from omnidistill.models.layers import gelu_exact


def grad_of(fn, x):
    return jax.grad(lambda v: jnp.sum(jnp.sin(fn(v).astype(jnp.float32))))(x)


def reference(x):
    return jax.nn.gelu(x, approximate=False)


def test_values_and_gradients_match_jax_gelu():
    x = jnp.linspace(-8.0, 8.0, 2001)
    np.testing.assert_array_equal(np.asarray(gelu_exact(x)), np.asarray(reference(x)))
    np.testing.assert_allclose(np.asarray(grad_of(gelu_exact, x)), np.asarray(grad_of(reference, x)), atol=1e-6)
    xb = x.astype(jnp.bfloat16)
    mine, ref = grad_of(gelu_exact, xb), grad_of(reference, xb)
    assert mine.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(mine, np.float32), np.asarray(ref, np.float32), atol=2e-2)


def test_backward_keeps_only_the_input():
    x = jnp.ones((4, 16), jnp.bfloat16)
    mine = [r for r in saved_residuals(lambda v: jnp.sum(gelu_exact(v)), x) if r[0].shape == x.shape]
    theirs = [r for r in saved_residuals(lambda v: jnp.sum(reference(v)), x) if r[0].shape == x.shape]
    assert len(mine) == 1 and len(theirs) > 1
