"""Load a trained run back: its config, model definition, parameters and tokenizer (for eval, export, scoring)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import jax.numpy as jnp
from flax import nnx

from omnidistill.config import Config
from omnidistill.models.loader import dtype_named, load_tokenizer
from omnidistill.models.regressor import Regressor, abstract_regressor
from omnidistill.runs.checkpoint import restore_params
from omnidistill.runs.run_dir import load_run_metadata, untrained_head

log = logging.getLogger(__name__)


def trained_model_shapes(cfg: Config, hf_config: dict[str, Any], tok_dir: Path, dtype: Any = jnp.float32) -> Regressor:
    """The model of a run (its metadata, :func:`load_run_metadata`) built from shapes: float32
    parameters computing in ``dtype``, no values."""
    return abstract_regressor(dataclasses.replace(cfg.model, init_from=None, tokenizer=str(tok_dir)), hf_config, dtype=dtype)


def scoring_dtype(cfg: Config, requested: str | None) -> str:
    """The dtype a trained run scores in: ``requested`` (``--dtype``, ``compute_dtype=``), else the
    run's ``eval.compute_dtype``."""
    return requested or cfg.eval.compute_dtype


def load_trained(run_dir: str | Path, checkpoint: str = "best", compute_dtype: str | None = "float32") -> tuple[Any, Any, Any, Any, int]:
    """(config, graphdef, params, tokenizer, step) of a run's ``best`` or ``latest`` checkpoint: float32
    parameters, a graph that computes in ``compute_dtype`` (None: the run's ``eval.compute_dtype``)."""
    run_dir = Path(run_dir)
    cfg, hf_config, tok_dir = load_run_metadata(run_dir)
    dtype = dtype_named(scoring_dtype(cfg, compute_dtype))
    model = trained_model_shapes(cfg, hf_config, tok_dir, dtype)  # the checkpoint gives every value
    graphdef, params_state = nnx.split(model, nnx.Param)
    sub = {"best": "best", "latest": "checkpoints"}[checkpoint]
    params, step = restore_params(run_dir / sub, nnx.to_pure_dict(params_state))
    untrained = untrained_head(run_dir)
    if untrained:  # as transformers warns of a head it did not find in a checkpoint
        log.warning(
            "%s: imported from a backbone with %s at random initialisation and not trained: its scores mean nothing; "
            "train a scorer from it with model.init_from=%s",
            run_dir,
            ", ".join(untrained),
            run_dir,
        )
    return cfg, graphdef, params, load_tokenizer(str(tok_dir)), step
