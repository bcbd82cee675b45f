"""Tiny run directories for export tests: a randomly initialised (and perturbed) regressor of any family
saved as a run's best checkpoint, with one of the local tokenizer kinds."""

from __future__ import annotations

import jax
import numpy as np

from omnidistill.config import Config, DataConfig, ModelConfig, PromptLayout
from omnidistill.models.loader import load_tokenizer
from omnidistill.models.regressor import build_regressor
from omnidistill.runs.checkpoint import RunCheckpoints
from omnidistill.runs.run_dir import save_run_metadata
from tests.models.hf_fixtures import TINY_BERT
from tests.models.test_deberta_v2_parity import V3
from tests.models.test_gemma3_parity import TINY as GEMMA3
from tests.models.test_modernbert_parity import TINY as MODERNBERT
from tests.models.test_qwen2_parity import TINY as QWEN2
from tests.models.test_qwen3_parity import TINY as QWEN3
from tests.models.test_xlm_roberta_parity import TINY as XLMR

BACKBONES = {
    "bert": ("bert", TINY_BERT, "wordpiece"),
    "modernbert": ("modernbert", MODERNBERT, "bpe"),
    "deberta_v2": ("deberta-v2", V3, "unigram"),
    "xlm_roberta": ("xlm-roberta", {**XLMR, "pad_token_id": 0}, "unigram"),  # the tokenizer's <pad> is id 0
    "qwen3": ("qwen3", QWEN3, "bpe"),
    "qwen2": ("qwen2", QWEN2, "bpe"),
    "gemma3": ("gemma3_text", GEMMA3, "unigram"),  # EmbeddingGemma: bidirectional, pooled by the mean
}
RELEASED = PromptLayout(task_prefix="Task:", prediction_prefix="Candidate:")  # QCRI/OmniScore-deberta-v3's layout


def make_run(run_dir, family: str, pooling: str, tokenizer_dir, data: DataConfig, seed: int = 0, **model_fields):
    """A run directory holding a randomly initialised (and perturbed) regressor as its best checkpoint;
    ``model_fields`` set more of its ``ModelConfig`` (e.g. ``head_bias=False``)."""
    model_type, arch, _ = BACKBONES[family]
    hf_config = {"model_type": model_type, **arch, "vocab_size": 1024, "max_position_embeddings": 128}
    model_cfg = ModelConfig(family=family, pooling=pooling, **model_fields)
    model = build_regressor(model_cfg, hf_config, seed=seed)
    from flax import nnx

    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    rng = np.random.default_rng(seed)  # numpy's draws: no small XLA program compiled per parameter shape
    params = jax.tree.map(lambda x: np.asarray(x) + 0.05 * rng.standard_normal(x.shape, dtype=np.float32), params)
    cfg = Config(model=model_cfg, data=data)
    cfg.train.output_dir = str(run_dir)
    save_run_metadata(run_dir, cfg, hf_config, load_tokenizer(str(tokenizer_dir)))
    ckpts = RunCheckpoints(run_dir)
    ckpts.save_best(0, params, 1.0)
    ckpts.wait()
    ckpts.close()
    return run_dir
