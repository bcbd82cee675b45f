"""The train step gives the same loss and parameters on 1 device and on 8 (data/fsdp/tensor) devices."""

import jax
import numpy as np
import pytest

from omnidistill.config import MeshConfig
from omnidistill.models.bert.params import SHARDING_RULES
from omnidistill.models.registry import get_family
from omnidistill.parallel.mesh import MeshError, batch_sharding, build_mesh, global_batch_array, param_specs, replicated
from omnidistill.train.memory import per_device_bytes
from omnidistill.train.setup import init_state
from omnidistill.train.step import make_train_step
from tests.train.helpers import ARCH, batch_arrays, tiny_setup


def run_steps(repo_root, mesh, n_steps=2, grad_accum=1, family="bert", arch=None, pooling="cls_raw"):
    graphdef, params, tx, ds = tiny_setup(repo_root, family=family, arch=arch, pooling=pooling)
    state = init_state(params, tx, 0, mesh, get_family(family).sharding_rules)
    shardings = jax.tree.map(lambda x: x.sharding, state)
    step = jax.jit(
        make_train_step(graphdef, tx, grad_accum=grad_accum, dropout=False),
        in_shardings=(shardings, batch_sharding(mesh)),
        out_shardings=(shardings, replicated(mesh)),
        donate_argnums=0,
    )
    losses = []
    for i in range(n_steps):
        batch = {k: global_batch_array(v, batch_sharding(mesh)) for k, v in batch_arrays(ds[i]).items()}
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    return state, losses


def assert_same(a, b, atol=2e-5):
    (sa, la), (sb, lb) = a, b
    np.testing.assert_allclose(la, lb, rtol=1e-5)
    for x, y in zip(jax.tree.leaves(sa.params), jax.tree.leaves(sb.params), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol)


def test_eight_devices_are_available():
    assert jax.device_count() == 8, "tests expect XLA_FLAGS=--xla_force_host_platform_device_count=8"


@pytest.fixture(scope="module")
def single_device_bert(repo_root):
    """The reference every BERT mesh below is compared with: the same two steps on one device."""
    return run_steps(repo_root, build_mesh(MeshConfig(data=1), devices=jax.devices()[:1]))


@pytest.mark.slow
@pytest.mark.parametrize("axes", [dict(data=8), dict(data=2, fsdp=2, tensor=2), dict(data=1, fsdp=4, tensor=2)])
def test_sharded_step_matches_single_device(repo_root, axes, single_device_bert):
    single = single_device_bert
    mesh = build_mesh(MeshConfig(**{"data": 1, **axes}))
    sharded = run_steps(repo_root, mesh)
    assert_same(single, sharded)
    # parameters really are sharded when fsdp/tensor > 1
    if axes.get("tensor", 1) > 1:
        q = sharded[0].params["encoder"]["layers"][0]["attention"]["query"]["kernel"]
        assert q.sharding.spec[1] == "tensor"
    # and so are AdamW's two moments: a device holds no more of them than twice its share of the
    # parameters (plus the step counts), not the full moments on every device
    device = mesh.devices.flat[0]
    params, moments = bytes_on(device, sharded[0].params), bytes_on(device, sharded[0].opt_state)
    assert moments <= 2 * params + 256, (moments, params)
    assert per_device_bytes(sharded[0]) == bytes_on(device, sharded[0])  # the figure training logs at its start
    if axes.get("fsdp", 1) * axes.get("tensor", 1) > 1:
        assert params < bytes_on(device, single[0].params) / 2


def bytes_on(device, tree) -> int:
    """Bytes of ``tree``'s arrays stored on ``device``."""
    return sum(shard.data.nbytes for x in jax.tree.leaves(tree) for shard in x.addressable_shards if shard.device == device)


QWEN3 = {**ARCH, "model_type": "qwen3", "num_key_value_heads": 2, "head_dim": 16}  # grouped-query attention


def test_sharded_qwen3_step_matches_single_device(repo_root):
    """The decoder's grouped-query K/V projections shard over the tensor axis and the step stays exact."""
    single = run_steps(
        repo_root, build_mesh(MeshConfig(data=1), devices=jax.devices()[:1]), family="qwen3", arch=QWEN3, pooling="last_token"
    )
    sharded = run_steps(repo_root, build_mesh(MeshConfig(data=2, fsdp=2, tensor=2)), family="qwen3", arch=QWEN3, pooling="last_token")
    assert_same(single, sharded)
    k = sharded[0].params["encoder"]["layers"][0]["attention"]["k_proj"]["kernel"]
    assert k.shape == (32, 32) and k.sharding.spec[1] == "tensor"


DEBERTA = {**ARCH, "model_type": "deberta-v2", "relative_attention": True, "position_buckets": 16, "pos_att_type": ["p2c", "c2p"]}


def test_sharded_deberta_step_matches_single_device_in_the_gpu_layout(repo_root, monkeypatch):
    """DeBERTa's position scores in the layout a GPU or TPU takes (rows sliced from one gather, the
    product with the queries first), forced here: the step partitions over data x fsdp x tensor, the
    heads over ``tensor``, and equals one device's."""
    from omnidistill.models.deberta_v2 import modeling

    monkeypatch.setattr(modeling, "accelerator_layout", lambda: True)
    single = run_steps(repo_root, build_mesh(MeshConfig(data=1), devices=jax.devices()[:1]), family="deberta_v2", arch=DEBERTA)
    sharded = run_steps(repo_root, build_mesh(MeshConfig(data=2, fsdp=2, tensor=2)), family="deberta_v2", arch=DEBERTA)
    assert_same(single, sharded)


def test_gradient_accumulation_matches_full_batch(repo_root):
    mesh = build_mesh(MeshConfig(data=4, fsdp=2))
    assert_same(run_steps(repo_root, mesh), run_steps(repo_root, mesh, grad_accum=2))


def test_loss_decreases(repo_root):
    graphdef, params, tx, ds = tiny_setup(repo_root, total_steps=1000)
    mesh = build_mesh(MeshConfig(data=8))
    state = init_state(params, tx, 0, mesh, SHARDING_RULES)
    step = jax.jit(make_train_step(graphdef, tx, dropout=False))
    batch = {k: global_batch_array(v, batch_sharding(mesh)) for k, v in batch_arrays(ds[0]).items()}
    first = None
    for _ in range(40):  # a random encoder sits on a plateau (predicting the mean) for ~20 steps
        state, m = step(state, batch)
        first = first if first is not None else float(m["loss"])
    assert float(m["loss"]) < 0.5 * first


def test_mesh_errors_are_clear():
    with pytest.raises(MeshError, match="data=3 x fsdp=1 x tensor=1 = 3 devices, but 8 are available"):
        build_mesh(MeshConfig(data=3))
    with pytest.raises(MeshError, match="at most one"):
        build_mesh(MeshConfig(data=-1, fsdp=-1))
    with pytest.raises(MeshError, match="not divisible"):
        build_mesh(MeshConfig(data=-1, fsdp=3))


def test_indivisible_dimensions_fall_back_to_replication():
    mesh = build_mesh(MeshConfig(data=1, fsdp=8))
    specs = param_specs({"odd": np.zeros((6, 5)), "even": np.zeros((16, 4)), "bias": np.zeros(16)}, mesh, [])
    assert specs["odd"] == jax.sharding.PartitionSpec(None, None)
    assert specs["even"] == jax.sharding.PartitionSpec("fsdp", None)
    assert specs["bias"] == jax.sharding.PartitionSpec()
