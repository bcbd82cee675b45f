"""``model.scan_layers``: the encoder layers under ``jax.lax.scan`` over stacked parameters compute what
the unrolled layers compute (forward, dropout, every layer's output, gradients, an AdamW step), match the
PyTorch forward, and their parameter trees convert both ways between the two layouts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from omnidistill.config import ModelConfig, OptimConfig, ParamGroupRule
from omnidistill.models.registry import get_family
from omnidistill.models.regressor import build_regressor
from omnidistill.models.scan import ScannedLayers, ScanPlan, plan_scan, stack_layers, tree_plan, unstack_layers
from omnidistill.parallel.mesh import param_specs
from omnidistill.train.optimizer import build_optimizer
from tests.models.hf_fixtures import assert_hidden_states_match, random_batch, save_tiny
from tests.models.test_remat import EXTRA, MODEL_TYPES

ARCH = dict(vocab_size=50, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
# Layer structures that are not uniform: ModernBERT's first layer (no attention norm) and its
# global/local pattern, Gemma 3's sliding/full pattern.
SCAN_EXTRA = {
    "modernbert": dict(num_hidden_layers=5, global_attn_every_n_layers=2, local_attention=4),
    "gemma3": dict(num_hidden_layers=5, sliding_window=4, layer_types=[*["full_attention", "sliding_attention"] * 2, "sliding_attention"]),
}
EXPECTED_PLANS = {"modernbert": ScanPlan(5, 1, 2, 2), "gemma3": ScanPlan(5, 0, 2, 2)}  # gemma3: one unrolled layer after the scan


def hf_config(family: str) -> dict:
    return {**ARCH, **EXTRA.get(family, {}), **SCAN_EXTRA.get(family, {}), "model_type": MODEL_TYPES[family]}


def params_of(family: str, scan: bool, pooling: str = "layer_mix_mean") -> tuple[nnx.GraphDef, dict]:
    dropout = None if get_family(family).decoder else 0.1  # the decoders have no dropout
    model = build_regressor(ModelConfig(family=family, pooling=pooling, scan_layers=scan, dropout=dropout), hf_config(family), seed=3)
    graphdef, state = nnx.split(model, nnx.Param)
    return graphdef, nnx.to_pure_dict(state)


def assert_trees_equal(a, b, atol=0.0):
    flat_a, flat_b = nnx.traversals.flatten_mapping(a), nnx.traversals.flatten_mapping(b)
    assert flat_a.keys() == flat_b.keys()
    for key in flat_a:
        np.testing.assert_allclose(np.asarray(flat_a[key]), np.asarray(flat_b[key]), atol=atol, rtol=0, err_msg=str(key))


@pytest.mark.parametrize(
    ("kinds", "plan"),
    [
        ("aaaa", ScanPlan(4, 0, 1, 4)),
        ("xabgabgabg", ScanPlan(10, 1, 3, 3)),  # ModernBERT-like: a distinct first layer, then a period of 3
        ("ababa", ScanPlan(5, 0, 2, 2)),  # the last layer is left over: unrolled tail
        ("abc", ScanPlan(3, 3, 0, 0)),  # nothing repeats: everything unrolled
        ("aaaaab", ScanPlan(6, 0, 1, 5)),
    ],
)
def test_plan_compiles_the_fewest_layer_bodies(kinds, plan):
    assert plan_scan(list(kinds)) == plan


# xlm_roberta and qwen2 run BERT's and Qwen3's encoders: the same layer loop as these
@pytest.mark.parametrize("family", ["bert", "deberta_v2", "modernbert", "qwen3", "gemma3"])
def test_scanned_layers_compute_what_unrolled_layers_compute(family):
    graphdef, unrolled = params_of(family, scan=False)
    scan_graphdef, scanned = params_of(family, scan=True)
    encoder_layers = nnx.merge(scan_graphdef, scanned).encoder.layers
    assert isinstance(encoder_layers, ScannedLayers)
    if family in EXPECTED_PLANS:
        assert encoder_layers.plan == EXPECTED_PLANS[family]
    plan = encoder_layers.plan
    # the same initial values, stacked; the conversions are exact both ways
    assert_trees_equal(scanned, stack_layers(unrolled, plan))
    assert_trees_equal(unstack_layers(scanned), unrolled)
    assert tree_plan(scanned) == plan

    ids, mask = random_batch(50, batch=3, seq=9)
    rng = jax.random.key(7)

    def loss(graph, params):
        model = nnx.merge(graph, params)
        return jnp.sum(model(jnp.asarray(ids), jnp.asarray(mask), rng=rng) ** 2)  # dropout on; every layer's output pooled

    loss_u, grads_u = jax.jit(jax.value_and_grad(lambda p: loss(graphdef, p)))(unrolled)
    loss_s, grads_s = jax.jit(jax.value_and_grad(lambda p: loss(scan_graphdef, p)))(scanned)
    np.testing.assert_allclose(float(loss_s), float(loss_u), rtol=1e-6)
    assert_trees_equal(unstack_layers(grads_s), grads_u, atol=1e-6)
    assert "scan" in str(jax.make_jaxpr(lambda p: loss(scan_graphdef, p))(scanned))


def test_one_adamw_step_is_the_same_in_both_layouts():
    """Weight decay applies per layer (a stacked bias is still a bias), learning-rate rules by unrolled path."""
    cfg = OptimConfig(weight_decay=0.5, param_groups=[ParamGroupRule(pattern=r"^encoder/layers/\d+/intermediate/", lr=1e-2)])
    _, unrolled = params_of("bert", scan=False)
    _, scanned = params_of("bert", scan=True)
    grads = jax.tree.map(jnp.ones_like, unrolled)
    results = []
    for params, g in ((unrolled, grads), (scanned, stack_layers(grads, tree_plan(scanned)))):
        tx, _ = build_optimizer(cfg, params, total_steps=10)

        @jax.jit  # one compiled update, not every small op of every leaf compiled on its own
        def step(params, g, tx=tx):
            updates, _ = tx.update(g, tx.init(params), params)
            return optax.apply_updates(params, updates)

        results.append(unstack_layers(step(params, g)))
    assert_trees_equal(results[1], results[0], atol=1e-7)


def test_rules_that_split_a_stack_are_refused_by_name():
    _, scanned = params_of("bert", scan=True)
    for cfg in (OptimConfig(layer_decay=0.9), OptimConfig(param_groups=[ParamGroupRule(pattern=r"^encoder/layers/0/", frozen=True)])):
        with pytest.raises(ValueError, match=r"model\.scan_layers"):
            build_optimizer(cfg, scanned, total_steps=10)


def test_a_stacked_parameter_shards_like_one_layer():
    from jax.sharding import PartitionSpec as P

    from omnidistill.config import MeshConfig
    from omnidistill.models.registry import get_family
    from omnidistill.parallel.mesh import build_mesh

    mesh = build_mesh(MeshConfig(data=1, fsdp=2, tensor=4))
    rules = get_family("bert").sharding_rules
    _, unrolled = params_of("bert", scan=False)
    _, scanned = params_of("bert", scan=True)
    flat_u = nnx.traversals.flatten_mapping(param_specs(unrolled, mesh, rules))
    flat_s = nnx.traversals.flatten_mapping(param_specs(scanned, mesh, rules))
    assert flat_u[("encoder", "layers", 2, "intermediate", "kernel")] == P("fsdp", "tensor")
    assert flat_s[("encoder", "layers", "blocks", 0, "intermediate", "kernel")] == P(None, "fsdp", "tensor")
    assert flat_s[("encoder", "layers", "blocks", 0, "attention", "output", "kernel")] == P(None, "tensor", "fsdp")


def test_partial_trees_must_set_a_stack_whole():
    _, unrolled = params_of("bert", scan=False)
    partial = {"encoder": {"layers": {0: unrolled["encoder"]["layers"][0]}}}
    with pytest.raises(ValueError, match="set together"):
        stack_layers(partial, ScanPlan(4, 0, 1, 4))


@pytest.mark.parametrize(
    ("prefix", "family", "config"),
    [
        ("ModernBert", "modernbert", dict(num_hidden_layers=5, global_attn_every_n_layers=2, local_attention=8)),
        ("Gemma3Text", "gemma3", dict(num_hidden_layers=5, sliding_window=6, use_bidirectional_attention=True)),
    ],
)
def test_scanned_port_matches_pytorch(tmp_path, prefix, family, config):
    """The PyTorch checkpoint's tensors, stacked on load, give the ``transformers`` forward."""
    if family == "modernbert":
        from tests.models.test_modernbert_parity import TINY
    else:
        from tests.models.test_gemma3_parity import TINY

        config["layer_types"] = ["sliding_attention", "full_attention"] * 2 + ["sliding_attention"]
    folder = save_tiny(tmp_path / family, prefix, TINY, perturb="norm", **config)
    ids, mask = random_batch(99, batch=3, seq=24)
    ids[:, 0] = 1
    assert_hidden_states_match(folder, family, ids, mask, scan=True)
