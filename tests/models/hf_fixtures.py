"""Tiny random Hugging Face models saved to disk, and the comparisons every parity test makes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from omnidistill.config import ModelConfig
from omnidistill.models.hf_io import load_hf_weights, read_hf_config, read_hf_tensors
from omnidistill.models.regressor import build_regressor

TINY_BERT = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    type_vocab_size=2,
    hidden_act="gelu",
)


INIT_RANGE = 0.2
"""The tiny models' weight scale. At Hugging Face's default of 0.02 a 32-wide layer's pre-activations
are about 0.1 and its attention nearly uniform, so a port with a tanh GELU for the exact one differed
from PyTorch by 6e-7 and passed; at 0.2 they are about 1, and it differs by 6e-4
(``tests/models/test_bert_parity.py``)."""

PARITY_TOL = 2e-5
"""``atol`` and ``rtol`` of every comparison with PyTorch's forward in fp32. The ports reach 5e-6 or
better at values up to 4 (Qwen3 the largest); a LayerNorm eps of 1e-5 for BERT's 1e-12 is 9e-5 off."""


def save_tiny(
    folder: Path, prefix: str, base: dict, *, classification: bool = False, seed: int = 0, perturb: str | None = None, **overrides
) -> Path:
    """Save a random ``<prefix>Model`` (or 4-label ``<prefix>ForSequenceClassification``) to ``folder``.

    Weights are drawn with ``initializer_range`` :data:`INIT_RANGE` unless ``overrides`` names one.
    ``perturb``: parameters whose name contains it (e.g. norms, initialised to 1/0) get random noise,
    so that the comparison exercises every tensor.
    """
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = getattr(transformers, f"{prefix}Config")(**{"initializer_range": INIT_RANGE, **base, **overrides})
    if classification:
        cfg.num_labels = 4
        cfg.problem_type = "multi_label_classification"
        model = getattr(transformers, f"{prefix}ForSequenceClassification")(cfg)
    else:
        model = getattr(transformers, f"{prefix}Model")(cfg)
    if perturb:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if perturb in name:
                    p.add_(0.1 * torch.randn_like(p))
    model.eval().save_pretrained(folder)
    return folder


def save_tiny_bert(folder: Path, classification: bool = False, seed: int = 0, **overrides) -> Path:
    return save_tiny(folder, "Bert", TINY_BERT, classification=classification, seed=seed, **overrides)


def flax_from_folder(
    folder: Path,
    family: str,
    groups: tuple[str, ...] = ("encoder",),
    pooling: str | None = None,
    scan: bool = False,
    attention: str = "auto",
    head_bias: bool | None = None,
):
    """A regressor of ``family`` with the folder's weights (``groups`` must all be present); pooled as the
    family's classification class does unless ``pooling`` is given (decoders: the last token); its layers
    scanned over stacked parameters with ``scan`` (``model.scan_layers``); ``attention``: ``model.attention``;
    ``head_bias``: ``model.head_bias``, unless given as the classification class has it (a decoder's has none)."""
    from omnidistill.models.registry import get_family

    decoder = get_family(family).decoder
    pooling = pooling or ("last_token" if decoder else "cls")
    head_bias = not decoder if head_bias is None else head_bias
    cfg = ModelConfig(family=family, pooling=pooling, scan_layers=scan, attention=attention, head_bias=head_bias)
    model = build_regressor(cfg, read_hf_config(folder))
    load_hf_weights(model, read_hf_tensors(folder), required_groups=groups)
    return model


def assert_hidden_states_match(
    folder: Path, family: str, ids: np.ndarray, mask: np.ndarray, scan: bool = False, port_folder: Path | None = None
) -> None:
    """Last hidden states of the Flax port equal PyTorch ``AutoModel`` on the non-padding positions, within
    :data:`PARITY_TOL`. The port loads ``port_folder`` where given (a config changed on one side only)."""
    import torch
    import transformers

    hf = transformers.AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long()).last_hidden_state.numpy()
    ours = np.asarray(jitted(flax_from_folder(port_folder or folder, family, scan=scan).encoder)(ids, mask))
    valid = mask.astype(bool)
    np.testing.assert_allclose(ours[valid], ref[valid], atol=PARITY_TOL, rtol=PARITY_TOL)


def assert_logits_match(folder: Path, family: str, ids: np.ndarray, mask: np.ndarray) -> None:
    """Regressor outputs equal PyTorch ``AutoModelForSequenceClassification`` logits within :data:`PARITY_TOL`."""
    import torch
    import transformers

    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long()).logits.numpy()
    model = flax_from_folder(folder, family, groups=("encoder", "pooler", "classifier"))
    np.testing.assert_allclose(np.asarray(jitted(model)(ids, mask)), ref, atol=PARITY_TOL, rtol=PARITY_TOL)


def jitted(module):
    """``module``'s call compiled as one program (as training and scoring run it), not op by op."""
    import jax
    from flax import nnx

    graphdef, state = nnx.split(module)
    forward = jax.jit(lambda state, *args: nnx.merge(graphdef, state)(*args))
    return lambda *args: forward(state, *args)


def random_batch(vocab: int, batch: int = 3, seq: int = 17, seed: int = 0, pad: bool = True):
    """Token ids and a right-padded attention mask (rows of different lengths when ``pad``)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, size=(batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    if pad:
        for row in range(batch):
            length = max(2, seq - 5 * row)
            mask[row, length:] = 0
            ids[row, length:] = 0
    return ids, mask
