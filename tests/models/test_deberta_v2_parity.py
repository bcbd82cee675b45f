"""The Flax DeBERTa-v2/v3 port reproduces Hugging Face PyTorch (fp32, 1e-4) with padding, sequences longer
than the bucket range, shared and separate position projections."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.config import ModelConfig
from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.deberta_v2.config import DebertaV2Config
from omnidistill.models.deberta_v2.modeling import log_bucket_position
from omnidistill.models.hf_io import load_hf_weights, read_hf_config, read_hf_tensors
from omnidistill.models.regressor import build_regressor
from tests.models.hf_fixtures import random_batch

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V3 = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    relative_attention=True,
    position_buckets=8,
    max_relative_positions=16,
    pos_att_type=["p2c", "c2p"],
    share_att_key=True,
    norm_rel_ebd="layer_norm",
    position_biased_input=False,
    type_vocab_size=0,
    hidden_act="gelu",
    layer_norm_eps=1e-7,
    pad_token_id=0,
)
VARIANTS = {
    "v3": {},
    "separate_proj_abs_pos_types": dict(share_att_key=False, position_biased_input=True, type_vocab_size=2, position_buckets=-1),
    "c2p_only_embedding_size": dict(pos_att_type=["c2p"], embedding_size=24, norm_rel_ebd="none"),
}


def save_tiny_deberta(folder, classification=False, seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = transformers.DebertaV2Config(**{**V3, **overrides})
    if classification:
        cfg.num_labels = 4
        model = transformers.DebertaV2ForSequenceClassification(cfg)
    else:
        model = transformers.DebertaV2Model(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.eval().save_pretrained(folder)
    return folder


def flax_model(folder, groups=("encoder",)):
    model = build_regressor(ModelConfig(family="deberta_v2"), read_hf_config(folder))
    load_hf_weights(model, read_hf_tensors(folder), required_groups=groups)
    return model


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("pad", [False, True])
def test_hidden_states_match_pytorch(tmp_path, variant, pad):
    folder = save_tiny_deberta(tmp_path / "d", **VARIANTS[variant])
    ids, mask = random_batch(99, batch=3, seq=40, pad=pad)  # 40 tokens: far beyond the 8 exact buckets
    hf = transformers.AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long()).last_hidden_state.numpy()
    ours = np.asarray(flax_model(folder).encoder(ids, mask))
    valid = mask.astype(bool)
    np.testing.assert_allclose(ours[valid], ref[valid], atol=1e-4, rtol=0)


def test_classification_head_matches_pytorch(tmp_path):
    folder = save_tiny_deberta(tmp_path / "cls", classification=True)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    ids, mask = random_batch(99, batch=3, seq=30)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long()).logits.numpy()
    model = flax_model(folder, groups=("encoder", "pooler", "classifier"))
    np.testing.assert_allclose(np.asarray(model(ids, mask)), ref, atol=1e-4)


def test_log_buckets_match_pytorch():
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    rel = np.arange(-300, 301)[None, :]
    ref = make_log_bucket_position(torch.tensor(rel), 256, 512).numpy()
    np.testing.assert_array_equal(log_bucket_position(rel, 256, 512), ref)


@pytest.mark.parametrize(
    "field,value", [("conv_kernel_size", 3), ("pos_att_type", ["p2p"]), ("pooler_hidden_size", 16), ("hidden_act", "mish")]
)
def test_unsupported_options_are_rejected_by_name(field, value):
    with pytest.raises(UnsupportedConfigError, match=field):
        DebertaV2Config.from_hf({**V3, "model_type": "deberta-v2", field: value})
