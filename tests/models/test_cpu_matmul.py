"""cpu_matmul: a bf16 dense layer on one CPU device accumulates in float32, forward and backward, with
every product in the standard layout XLA's fast CPU kernel takes; the same values as float32 products
rounded to bf16; ``model.remat: dots`` keeps them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from omnidistill.config import ModelConfig
from omnidistill.models import cpu_matmul
from omnidistill.models.layers import REMAT_POLICIES
from omnidistill.models.regressor import build_regressor
from tests.models import test_deberta_v2_parity as deberta
from tests.models import test_modernbert_parity as modernbert
from tests.models import test_qwen3_parity as qwen3
from tests.models.hf_fixtures import TINY_BERT, random_batch
from tests.models.jaxprs import equations

STANDARD = (((1,), (0,)), ((), ()))
FAMILIES = {
    "bert": (TINY_BERT, "cls_raw"),
    "deberta_v2": (deberta.V3, "cls_raw"),
    "modernbert": (modernbert.TINY, "cls_raw"),
    "qwen3": (qwen3.TINY, "last_token"),
}


@pytest.fixture
def bf16_cpu(monkeypatch):
    """As on a CPU with native bf16, whatever this host's flags (lowering and values do not depend on them)."""
    monkeypatch.setattr(cpu_matmul, "native_bf16", lambda: True)


def _bf16(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.bfloat16)


def test_matmul_and_its_gradients_are_float32_products_rounded_to_bf16():
    x, kernel, grad = _bf16((2, 5, 24), 0), _bf16((24, 16), 1), _bf16((2, 5, 16), 2)
    out, vjp = jax.vjp(cpu_matmul.matmul, x, kernel)
    grad_x, grad_kernel = vjp(grad)
    x64, k64, g64 = (np.asarray(a, np.float64) for a in (x, kernel, grad))
    expected = {
        "out": (out, x64 @ k64),
        "grad_x": (grad_x, g64 @ k64.T),
        "grad_kernel": (grad_kernel, np.einsum("bsk,bsn->kn", x64, g64)),
    }
    for name, (ours, exact) in expected.items():
        assert ours.dtype == jnp.bfloat16, name
        # one bf16 rounding of an exactly accumulated sum (8 significant bits: half an ulp is 2^-8 of the value)
        np.testing.assert_allclose(np.asarray(ours, np.float64), exact, rtol=2**-8, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_bf16_layers_on_one_cpu_take_standard_float32_products(bf16_cpu, family):
    arch, pooling = FAMILIES[family]
    model = build_regressor(ModelConfig(family=family, pooling=pooling, dropout=0.0), dict(arch), dtype=jnp.bfloat16)
    graphdef, params = nnx.split(model, nnx.Param)
    dense = [m for _, m in nnx.iter_modules(model) if isinstance(m, nnx.Linear) and m.dtype == jnp.bfloat16]
    ids, mask = random_batch(arch["vocab_size"], batch=2, seq=9)

    def loss(p):
        return jnp.sum(nnx.merge(graphdef, p)(jnp.asarray(ids), jnp.asarray(mask)))

    jaxpr = jax.make_jaxpr(jax.grad(loss))(params).jaxpr
    products = [e for e in equations(jaxpr, "dot_general") if all(v.aval.dtype == jnp.bfloat16 for v in e.invars)]
    dense_products = [e for e in products if all(v.aval.ndim == 2 for v in e.invars)]
    # forward, input gradient and kernel gradient of every bf16 dense layer the loss reaches (the
    # backbone's; a pooler the head does not read is not traced)
    assert len(dense_products) >= 3 * (len(dense) - 1), (len(dense_products), len(dense))
    for eqn in dense_products:
        assert eqn.params["dimension_numbers"] == STANDARD and eqn.params["preferred_element_type"] == jnp.float32
    # a bf16 product with a bf16 result (the upcast, float32-speed path) is left only in attention
    assert all(any(v.aval.ndim > 2 for v in e.invars) for e in products if e.params["preferred_element_type"] != jnp.float32)
    assert len(equations(jaxpr, "layout_constraint")) == 2 * len(dense_products) // 3


def test_bf16_gradients_match_the_plain_path(bf16_cpu, monkeypatch):
    arch, pooling = FAMILIES["bert"]
    model = build_regressor(ModelConfig(family="bert", pooling=pooling, dropout=0.0), dict(arch), dtype=jnp.bfloat16)
    graphdef, params = nnx.split(model, nnx.Param)
    ids, mask = random_batch(arch["vocab_size"], batch=3, seq=11)

    def grads():
        loss = lambda p: jnp.mean(nnx.merge(graphdef, p)(jnp.asarray(ids), jnp.asarray(mask)) ** 2)
        return jax.tree.leaves(jax.jit(jax.value_and_grad(loss))(params))

    ours = grads()
    monkeypatch.setattr(cpu_matmul, "native_bf16", lambda: False)
    plain = grads()
    for a, b in zip(ours, plain, strict=True):
        scale = float(np.max(np.abs(np.asarray(b, np.float32)))) or 1.0
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=0.03 * scale)


def test_only_bf16_dense_products_on_one_cpu_device(bf16_cpu):
    x2, k = _bf16((4, 8), 0), _bf16((8, 3), 1)
    dims = (((1,), (0,)), ((), ()))
    assert cpu_matmul.takes_matmul(x2, k, dims, None)
    assert not cpu_matmul.takes_matmul(x2, k, dims, jnp.float32)  # a result type of its own
    assert not cpu_matmul.takes_matmul(x2.astype(jnp.float32), k.astype(jnp.float32), dims, None)
    assert not cpu_matmul.takes_matmul(x2.astype(jnp.float16), k.astype(jnp.float16), dims, None)  # no faster
    assert not cpu_matmul.takes_matmul(k.T, x2.T, (((1,), (1,)), ((), ())), None)
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    with jax.set_mesh(mesh):
        assert cpu_matmul.takes_matmul(x2, k, dims, None) == (mesh.size == 1)


def test_native_bf16_reads_the_cpus_flags(tmp_path):
    amx, plain = tmp_path / "amx", tmp_path / "plain"
    amx.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    plain.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni\n")
    assert cpu_matmul.native_bf16(str(amx)) and not cpu_matmul.native_bf16(str(plain))
    assert not cpu_matmul.native_bf16(str(tmp_path / "missing"))


def test_remat_dots_keeps_the_cpu_matmul_products(bf16_cpu):
    x, k1, k2 = _bf16((16, 8), 0), _bf16((8, 8), 1), _bf16((8, 8), 2)
    dims = (((1,), (0,)), ((), ()))

    def layer(x, k1, k2):
        return jnp.tanh(cpu_matmul.dot_general(jnp.tanh(cpu_matmul.dot_general(x, k1, dims)), k2, dims))

    def products(f):
        loss = lambda *a: jnp.sum(f(*a).astype(jnp.float32))
        return len(equations(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(x, k1, k2).jaxpr, "dot_general"))

    kept = products(jax.checkpoint(layer, policy=REMAT_POLICIES["dots"]))
    assert products(layer) == kept == 6  # two products forward, four backward, none recomputed
    assert products(jax.checkpoint(layer, policy=REMAT_POLICIES["full"])) == 8
