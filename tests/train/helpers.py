"""A tiny fp32 regressor, an optimizer and one real batch, for train-step tests."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from transformers import AutoTokenizer

from omnidistill.config import ModelConfig, OptimConfig
from omnidistill.data.pipeline import train_dataset
from omnidistill.data.sources import read_records
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.models.regressor import build_regressor
from omnidistill.train.optimizer import build_optimizer

ARCH = dict(vocab_size=1024, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)


def tiny_setup(repo_root, batch=16, seed=0, optim: OptimConfig | None = None, total_steps=10, family="bert", arch=None, pooling="cls_raw"):
    model = build_regressor(ModelConfig(family=family, pooling=pooling, dropout=0.0), arch or ARCH, seed=seed)
    graphdef, state = nnx.split(model, nnx.Param)
    params = jax.tree.map(np.asarray, nnx.to_pure_dict(state))
    tok = AutoTokenizer.from_pretrained(repo_root / "assets" / "tiny-wordpiece")
    records = read_records(repo_root / "data" / "sample" / "train.jsonl")[0]
    ds = train_dataset(records, RecordEncoder(tok, 128), global_batch=batch, seed=seed, buckets=[64, 128])
    tx, _ = build_optimizer(optim or OptimConfig(lr=1e-3, head_lr=1e-2), params, total_steps)
    return graphdef, params, tx, ds


def batch_arrays(batch):
    return {k: batch[k] for k in ("input_ids", "attention_mask", "labels", "label_mask", "example_mask")}
