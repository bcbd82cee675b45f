"""kernels_in_compute_dtype: a bf16 model's matmul kernels and biases cast once give the same scores, bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from omnidistill.config import ModelConfig
from omnidistill.models.kernel_casts import kernels_in_compute_dtype, lower_precision
from omnidistill.models.regressor import build_regressor, make_predict_fn
from tests.models import test_deberta_v2_parity as deberta
from tests.models import test_gemma3_parity as gemma3
from tests.models import test_modernbert_parity as modernbert
from tests.models import test_qwen3_parity as qwen3
from tests.models.hf_fixtures import TINY_BERT, random_batch

FAMILIES = {
    "bert": (TINY_BERT, "cls_raw"),
    "deberta_v2": (deberta.V3, "cls_raw"),
    "modernbert": (modernbert.TINY, "cls_raw"),
    "qwen3": (qwen3.TINY, "last_token"),
    "gemma3": (gemma3.TINY, "mean"),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_kernels_cast_once_score_as_the_layers_own_casts(family):
    arch, pooling = FAMILIES[family]
    model = build_regressor(ModelConfig(family=family, pooling=pooling, dropout=0.0), dict(arch), dtype=jnp.bfloat16)
    graphdef, state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    cast = kernels_in_compute_dtype(graphdef, params)
    leaves = dict(nnx.traversals.flatten_mapping(params))
    after = dict(nnx.traversals.flatten_mapping(cast))
    changed = {path for path in leaves if after[path].dtype != leaves[path].dtype}
    assert changed and all(path[-1] in ("kernel", "bias") and after[path].dtype == jnp.bfloat16 for path in changed)
    kernels = {path[:-1] for path in changed if path[-1] == "kernel"}
    # a bias is cast with its layer's kernel, never alone (where the family's layers have biases)
    assert {path[:-1] for path in changed if path[-1] == "bias"} == {layer for layer in kernels if (*layer, "bias") in leaves}
    assert not any(path[0] == "head" for path in changed)  # the float32 head keeps its kernel and bias
    for path in changed:  # the same values, rounded as the layer rounds them
        np.testing.assert_array_equal(np.asarray(after[path]), np.asarray(leaves[path].astype(jnp.bfloat16)))
    ids, mask = random_batch(arch["vocab_size"], batch=3, seq=13)
    predict = jax.jit(make_predict_fn(graphdef))
    batch = {"input_ids": ids, "attention_mask": mask}
    np.testing.assert_array_equal(np.asarray(predict(cast, batch)), np.asarray(predict(params, batch)))


def test_only_lower_precision_layers_cast():
    assert lower_precision(jnp.bfloat16, jnp.float32) and lower_precision(jnp.float16, jnp.float32)
    assert not lower_precision(jnp.float32, jnp.float32) and not lower_precision(None, jnp.float32)
    assert not lower_precision(jnp.bfloat16, jnp.bfloat16)
