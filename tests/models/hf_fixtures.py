"""Tiny random Hugging Face models saved to disk, for parity and round-trip tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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


def save_tiny_bert(folder: Path, classification: bool = False, seed: int = 0, **overrides) -> Path:
    """Save a random BertModel (or BertForSequenceClassification with 4 labels) to ``folder``."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(**{**TINY_BERT, **overrides})
    if classification:
        cfg.num_labels = 4
        cfg.problem_type = "multi_label_classification"
        model = BertForSequenceClassification(cfg)
    else:
        model = BertModel(cfg)
    model.eval()
    model.save_pretrained(folder)
    return folder


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
