"""Load a trained run back: its config, model definition, parameters and tokenizer (for eval, export, scoring)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from flax import nnx

from omnidistill.models.loader import load_tokenizer
from omnidistill.models.regressor import abstract_regressor
from omnidistill.runs.checkpoint import restore_params
from omnidistill.runs.run_dir import load_run_metadata


def load_trained(run_dir: str | Path, checkpoint: str = "best") -> tuple[Any, Any, Any, Any, int]:
    """(config, graphdef, params, tokenizer, step) of a run's ``best`` or ``latest`` checkpoint, fp32."""
    run_dir = Path(run_dir)
    cfg, hf_config, tok_dir = load_run_metadata(run_dir)
    model_cfg = dataclasses.replace(cfg.model, init_from=None, tokenizer=str(tok_dir))
    model = abstract_regressor(model_cfg, hf_config)  # shapes only: the checkpoint gives every value
    graphdef, params_state = nnx.split(model, nnx.Param)
    sub = {"best": "best", "latest": "checkpoints"}[checkpoint]
    params, step = restore_params(run_dir / sub, params_state.to_pure_dict())
    return cfg, graphdef, params, load_tokenizer(str(tok_dir)), step
