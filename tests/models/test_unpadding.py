"""Unpadded encoder passes (``token_index``, :mod:`omnidistill.models.unpadding`): the layers' dense work
runs on the real tokens only, and the scores are still what the Hugging Face forward gives."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from omnidistill.data.token_batches import token_index
from omnidistill.models.layers import AttentionMask, attention
from omnidistill.models.regressor import make_predict_fn
from omnidistill.models.unpadding import TokenLayout
from tests.models import test_deberta_v2_parity as deberta
from tests.models import test_first_rows as first_rows
from tests.models import test_modernbert_parity as modernbert
from tests.models import test_qwen3_parity as qwen3
from tests.models import test_xlm_roberta_parity as xlmr
from tests.models.hf_fixtures import TINY_BERT, flax_from_folder, random_batch, save_tiny

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CASES = {
    # family, transformers prefix, config, pooling, scanned layers
    "bert": ("bert", "Bert", TINY_BERT, "cls", False),
    "bert-scanned": ("bert", "Bert", TINY_BERT, "cls", True),  # no unrolled last layer: every row, padded back
    "xlm_roberta": ("xlm_roberta", "XLMRoberta", xlmr.TINY, "cls", False),
    "modernbert-global_last": ("modernbert", "ModernBert", modernbert.TINY, "cls", False),
    "modernbert-local_last": ("modernbert", "ModernBert", {**modernbert.TINY, "num_hidden_layers": 3}, "cls", True),
    "modernbert-mean": ("modernbert", "ModernBert", {**modernbert.TINY, "num_hidden_layers": 3}, "mean", False),
    "deberta_v3": ("deberta_v2", "DebertaV2", deberta.V3, "cls", False),
    "deberta_absolute-mean": ("deberta_v2", "DebertaV2", first_rows.CASES["deberta_absolute"][2], "mean", False),
}


def transformers_outputs(folder, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The classifier's scores (1 + 4 sigmoid) and the backbone's last hidden state."""
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    inputs = {"input_ids": torch.tensor(ids).long(), "attention_mask": torch.tensor(mask).long()}
    with torch.no_grad():
        logits = hf(**inputs).logits.numpy()
        hidden = hf.base_model(**inputs).last_hidden_state.numpy()
    return 1 + 4 / (1 + np.exp(-logits)), hidden


@pytest.mark.parametrize("case", list(CASES))
def test_unpadded_layers_give_what_transformers_gives(tmp_path, case):
    family, prefix, arch, pooling, scan = CASES[case]
    folder = save_tiny(tmp_path / case, prefix, arch, classification=True, perturb="orm")
    model = flax_from_folder(folder, family, groups=("encoder", "pooler", "classifier"), pooling=pooling, scan=scan)
    ids, mask = random_batch(arch["vocab_size"], batch=4, seq=17)
    if prefix == "XLMRoberta":
        ids = np.where(mask > 0, np.maximum(ids, 3), arch["pad_token_id"]).astype(np.int32)
    hf_scores, hf_hidden = transformers_outputs(folder, ids, mask)
    graphdef, params = nnx.split(model)
    predict = jax.jit(make_predict_fn(graphdef))
    padded = np.asarray(predict(params, {"input_ids": ids, "attention_mask": mask}))
    if pooling == "cls":
        np.testing.assert_allclose(padded, hf_scores, atol=1e-5)

    for groups in (1, 2) if case == "bert" else (2,):  # one group per batch shard: one device, and two groups in every case
        tokens = int(mask.reshape(groups, -1).sum(axis=1).max()) + 3  # a few filler slots
        index = token_index(mask, groups, tokens)
        hidden = np.asarray(model.encoder(ids, mask, token_index=index))
        np.testing.assert_allclose(hidden[mask > 0], hf_hidden[mask > 0], atol=1e-5)
        batch = {"input_ids": ids, "attention_mask": mask, "token_index": index}
        np.testing.assert_allclose(np.asarray(predict(params, batch)), padded, atol=1e-5)
        shapes = first_rows.dot_shapes(jax.make_jaxpr(make_predict_fn(graphdef))(params, batch).jaxpr)
        assert (groups, tokens, arch["hidden_size"]) in shapes  # the projections ran on the unpadded tokens


def test_layout_round_trip_for_right_and_left_padding():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 9, 3)).astype(np.float32)
    right = (np.arange(9)[None] < np.array([[9], [4], [1], [6]])).astype(np.int32)
    for mask in (right, right[:, ::-1].copy()):
        for groups in (1, 2, 4):
            index = token_index(mask, groups, 22)
            layout = TokenLayout.of(mask, index)
            flat = np.asarray(layout.unpad(x))
            real = mask.reshape(groups, -1).sum(axis=1)
            for g in range(groups):  # each group's real tokens first, in order
                np.testing.assert_array_equal(flat[g, : real[g]], x.reshape(groups, -1, 3)[g][mask.reshape(groups, -1)[g] > 0])
            np.testing.assert_array_equal(np.asarray(layout.pad(flat)), x * mask[..., None])


def test_more_real_tokens_than_a_group_holds_is_refused():
    mask = np.ones((2, 5), np.int32)
    with pytest.raises(ValueError, match="group 0 of the batch holds 10 real tokens, more than its 8"):
        token_index(mask, 1, 8)


def test_families_that_cannot_run_unpadded_refuse_it_by_name(tmp_path):
    folder = save_tiny(tmp_path / "qwen3", "Qwen3", qwen3.TINY)
    model = flax_from_folder(folder, "qwen3", pooling="last_token")
    ids, mask = random_batch(qwen3.TINY["vocab_size"], batch=2, seq=9)
    with pytest.raises(ValueError, match="'qwen3' does not run unpadded"):
        model(ids, mask, token_index=token_index(mask, 1, 18))
    q = np.zeros((1, 4, 2, 8), np.float32)
    layout = TokenLayout.of(mask, token_index(mask, 1, 18))
    with pytest.raises(ValueError, match="unpadded attention takes no additive bias"):
        attention(q, q, q, AttentionMask(mask, layout=layout), bias=np.zeros((2, 2, 9, 9), np.float32))
