"""Scoring with first-token pooling computes the encoder's last layer at the first position only
(``first_rows``, :func:`omnidistill.models.layers.last_rows_call`), and still scores what the
Hugging Face ``*ForSequenceClassification`` forward gives."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from omnidistill.models.regressor import make_predict_fn
from tests.models import test_deberta_v2_parity as deberta
from tests.models import test_modernbert_parity as modernbert
from tests.models import test_xlm_roberta_parity as xlmr
from tests.models.hf_fixtures import TINY_BERT, flax_from_folder, random_batch, save_tiny
from tests.models.jaxprs import output_shapes

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CASES = {
    # family, transformers prefix, config, model.attention
    "bert": ("bert", "Bert", TINY_BERT, "auto"),
    "bert-splash": ("bert", "Bert", TINY_BERT, "splash"),  # the one-row queries leave splash for XLA
    "xlm_roberta": ("xlm_roberta", "XLMRoberta", xlmr.TINY, "auto"),
    "deberta_v3": ("deberta_v2", "DebertaV2", deberta.V3, "auto"),
    "deberta_absolute": (
        "deberta_v2",
        "DebertaV2",
        {**deberta.V3, "relative_attention": False, "pos_att_type": [], "norm_rel_ebd": "none"}
        | {"position_biased_input": True, "type_vocab_size": 2},
        "auto",
    ),
    "modernbert-global_last": ("modernbert", "ModernBert", modernbert.TINY, "auto"),
    "modernbert-local_last": ("modernbert", "ModernBert", {**modernbert.TINY, "num_hidden_layers": 3}, "auto"),
}


def dot_shapes(jaxpr) -> list[tuple[int, ...]]:
    """Output shapes of every matmul in a jaxpr, nested jaxprs included."""
    return output_shapes(jaxpr, "dot_general")


@pytest.mark.parametrize("case", list(CASES))
def test_scoring_runs_the_last_layer_on_the_first_token_with_transformers_scores(tmp_path, case):
    family, prefix, arch, kernel = CASES[case]
    folder = save_tiny(tmp_path / case, prefix, arch, classification=True, perturb="orm")
    model = flax_from_folder(folder, family, groups=("encoder", "pooler", "classifier"), pooling="cls", attention=kernel)
    ids, mask = random_batch(arch["vocab_size"], batch=3, seq=17)
    if prefix == "XLMRoberta":
        ids = np.where(mask > 0, np.maximum(ids, 3), arch["pad_token_id"]).astype(np.int32)
    batch = {"input_ids": ids, "attention_mask": mask}
    graphdef, params = nnx.split(model)
    predict = make_predict_fn(graphdef)

    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long()).logits.numpy()
    np.testing.assert_allclose(np.asarray(jax.jit(predict)(params, batch)), 1 + 4 / (1 + np.exp(-logits)), atol=1e-5)

    # the last layer's MLP runs on one token per row when scoring, on every token as training calls the model
    mlp_width = {arch["intermediate_size"], 2 * arch["intermediate_size"]}  # ModernBERT's GeGLU doubles it
    one_token = lambda shapes: [s for s in shapes if len(s) == 3 and s[:2] == (3, 1) and s[2] in mlp_width]
    assert len(one_token(dot_shapes(jax.make_jaxpr(predict)(params, batch).jaxpr))) == 1
    assert not one_token(dot_shapes(jax.make_jaxpr(lambda p, b: nnx.merge(graphdef, p)(**b))(params, batch).jaxpr))


def test_other_poolings_and_scanned_uniform_layers_score_every_token_alike(tmp_path):
    """Mean pooling reads every position, and a scanned stack of identical layers has no unrolled last
    layer: both run the full last layer, and the scores stay those of the model's direct call."""
    folder = save_tiny(tmp_path / "bert", "Bert", TINY_BERT)
    ids, mask = random_batch(TINY_BERT["vocab_size"], batch=3, seq=17)
    for model in (flax_from_folder(folder, "bert", pooling="mean"), flax_from_folder(folder, "bert", pooling="cls", scan=True)):
        graphdef, params = nnx.split(model)
        predict = make_predict_fn(graphdef)
        batch = {"input_ids": ids, "attention_mask": mask}
        shapes = dot_shapes(jax.make_jaxpr(predict)(params, batch).jaxpr)
        assert not [s for s in shapes if len(s) == 3 and s[:2] == (3, 1)]
        np.testing.assert_allclose(np.asarray(predict(params, batch)), np.asarray(model.scores(model(ids, mask))), atol=1e-6)
