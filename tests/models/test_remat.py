"""Rematerialisation: the same gradients, with the layers really recomputed (a remat in the jaxpr)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from omnidistill.config import ModelConfig
from omnidistill.models.regressor import build_regressor

ARCH = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
MODEL_TYPES = {
    "bert": "bert",
    "modernbert": "modernbert",
    "deberta_v2": "deberta-v2",
    "xlm_roberta": "xlm-roberta",
    "qwen3": "qwen3",
    "qwen2": "qwen2",
    "gemma3": "gemma3_text",
}
EXTRA = {"deberta_v2": dict(relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"])}


def grad_and_jaxpr(family, remat):
    model = build_regressor(ModelConfig(family=family, remat=remat), {**ARCH, **EXTRA.get(family, {}), "model_type": MODEL_TYPES[family]})
    graphdef, state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    ids = jnp.array([[2, 5, 6, 3, 0], [2, 7, 3, 0, 0]])

    def loss(p):
        return jnp.sum(nnx.merge(graphdef, p)(ids, (ids > 0).astype(jnp.int32)) ** 2)

    return jax.grad(loss)(params), str(jax.make_jaxpr(jax.grad(loss))(params))


@pytest.mark.parametrize("family", sorted(MODEL_TYPES))
def test_remat_keeps_gradients_and_recomputes(family):
    """Each family wires ``model.remat`` twice: into its attention kernel (``attention``) and around each
    layer (``call_layer``: ``full``, ``dots``). ``dots`` differs from ``full`` only in the policy that
    ``call_layer`` hands to ``nnx.remat``, the same code for every family: it runs on BERT alone."""
    ref, plain = grad_and_jaxpr(family, "none")
    assert "remat" not in plain and "checkpoint" not in plain
    for policy in ("attention", "dots", "full") if family == "bert" else ("attention", "full"):
        grads, jaxpr = grad_and_jaxpr(family, policy)
        assert "remat" in jaxpr or "checkpoint" in jaxpr
        for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(grads), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
