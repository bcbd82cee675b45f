"""The exact GELU: PyTorch's values (the Hugging Face reference) and jax.nn.gelu's gradients, keeping
only its input for the backward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.ad_checkpoint import saved_residuals

from omnidistill.models.layers import gelu_exact

torch = pytest.importorskip("torch")


def grad_of(fn, x):
    return jax.grad(lambda v: jnp.sum(jnp.sin(fn(v).astype(jnp.float32))))(x)


def reference(x):
    return jax.nn.gelu(x, approximate=False)


def torch_gelu(x) -> np.ndarray:
    """torch.nn.functional.gelu (exact), in x's dtype, as float32."""
    t = torch.tensor(np.asarray(x, np.float32))
    return torch.nn.functional.gelu(t.to(torch.bfloat16) if x.dtype == jnp.bfloat16 else t).float().numpy()


def test_values_are_pytorchs_in_float32_and_bfloat16():
    """In bf16, the value is PyTorch's (computed in float32, rounded once) to within 2e-5 absolute,
    where jax.nn.gelu, whose erfc argument is rounded to bf16, is up to one bf16 unit off (1.6e-2)."""
    x = jnp.asarray(np.random.default_rng(0).standard_normal(100_000) * 3, jnp.float32)
    np.testing.assert_allclose(np.asarray(gelu_exact(x)), torch_gelu(x), atol=2e-6, rtol=1e-6)
    xb = x.astype(jnp.bfloat16)
    assert gelu_exact(xb).dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(gelu_exact(xb), np.float32), torch_gelu(xb), atol=2e-5, rtol=0)
    assert np.abs(np.asarray(reference(xb), np.float32) - torch_gelu(xb)).max() > 1e-2


def test_gradients_match_jax_gelu():
    x = jnp.linspace(-8.0, 8.0, 2001)
    np.testing.assert_allclose(np.asarray(gelu_exact(x)), np.asarray(reference(x)), atol=1e-6)
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
