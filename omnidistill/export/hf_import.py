"""Import a Hugging Face PyTorch model (folder or hub id) as an omnidistill run directory.

A ``*ForSequenceClassification`` checkpoint with 4 labels imports completely (encoder, pooler, heads);
an ``omniscore`` folder (``model_type: "omniscore"``, e.g. one ``export --format omniscore`` wrote, or a
released OmniScore model in that format) imports completely with its pooling and input layout; a
bare backbone imports its encoder and leaves pooler/heads at random initialisation (reported).
The input settings an export recorded (``input_format``, ``layout``, ``truncation``, ``max_length``)
become the run's ``data`` settings.
The result has ``best/0/`` parameters, so ``eval``, ``export`` and ``score`` work on it, and it can
seed training through ``model.init_from``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from flax import nnx

from omnidistill.config import Config, ModelConfig
from omnidistill.models.hf_io import load_hf_weights, read_hf_config, read_hf_tensors, resolve_hf_dir
from omnidistill.models.loader import load_tokenizer
from omnidistill.models.published import OMNISCORE_MODEL_TYPE, check_scoring_head, classifier_model_config, load_published
from omnidistill.models.registry import family_for_model_type
from omnidistill.models.regressor import build_regressor
from omnidistill.runs.checkpoint import RunCheckpoints
from omnidistill.runs.run_dir import save_run_metadata, write_import_record

log = logging.getLogger(__name__)


def import_hf(source: str, run_dir: str | Path, *, require_head: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """Convert ``source`` into a run directory at ``run_dir``; returns what was imported.

    A ``run_dir`` that already holds files is refused unless ``overwrite``, which replaces it as a
    whole (nothing of the old run, checkpoints included, survives next to the imported weights). The
    new run is written to a temporary sibling and renamed at the end, so a source that cannot be read
    or converted leaves the old ``run_dir`` as it was.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"{run_dir} is a file: import writes a run directory")
    if run_dir.is_dir() and any(run_dir.iterdir()) and not overwrite:
        raise ValueError(f"{run_dir} is not empty (an existing run?): choose a new directory, or pass --overwrite to replace it")
    folder = resolve_hf_dir(source)
    target = run_dir.resolve()
    if target == folder.resolve() or target in folder.resolve().parents:
        raise ValueError(f"{source} is inside {run_dir}, which the import replaces: import into another directory")
    cfg, hf_config, tokenizer, model, summary = _read_source(folder, require_head)
    cfg.train.output_dir = str(run_dir)
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    _save_imported(tmp, cfg, hf_config, tokenizer, model)
    write_import_record(tmp, source, summary["family"], summary["random_init"])
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)
    return {"run_dir": str(run_dir), **summary}


def _read_source(folder: Path, require_head: bool) -> tuple[Config, dict[str, Any], Any, Any, dict[str, Any]]:
    """The run config, Hugging Face config, tokenizer and model of ``folder``, and what was imported."""
    hf_config = read_hf_config(folder)
    if hf_config.get("model_type") == OMNISCORE_MODEL_TYPE or (
        family_for_model_type(str(hf_config.get("model_type"))).hf_class in hf_config.get("architectures", [])
        and "omnidistill" in hf_config
    ):
        return _read_published(folder)
    model_type = hf_config.get("model_type")
    family = family_for_model_type(str(model_type))
    has_head = family.hf_class in hf_config.get("architectures", [])
    if has_head or require_head:
        family.check_head_config(hf_config)
    tensors = read_hf_tensors(folder)
    if has_head or require_head:  # run the classifier's own head (its pooler, or a decoder's last token)
        model_cfg = dataclasses.replace(classifier_model_config(family, hf_config, tensors), tokenizer=str(folder))
        check_scoring_head(folder, family, hf_config, model_cfg)
    else:  # a backbone gets the paper's head (decoders: their last token; EmbeddingGemma: the mean)
        model_cfg = ModelConfig(family=family.name, tokenizer=str(folder), pooling=family.default_pooling(hf_config))
    model = build_regressor(model_cfg, hf_config)
    groups = ("encoder", "pooler", "classifier") if (has_head or require_head) else ("encoder",)
    absent = load_hf_weights(model, tensors, required_groups=groups)
    tokenizer = load_tokenizer(str(folder))
    cfg = Config(model=dataclasses.replace(model_cfg, tokenizer=None, init_from=str(folder)))
    return cfg, hf_config, tokenizer, model, {"family": family.name, "random_init": absent}


def _read_published(folder: Path) -> tuple[Config, dict[str, Any], Any, Any, dict[str, Any]]:
    """An exported ``hf`` or ``omniscore`` folder: every tensor, plus the input settings it records."""
    published = load_published(folder)
    tokenizer = load_tokenizer(str(folder))
    cfg = Config(model=dataclasses.replace(published.model_cfg, init_from=str(folder)), data=published.data)
    summary = {"family": published.model_cfg.family, "random_init": [], "format": published.kind}
    return cfg, published.hf_config, tokenizer, published.model, summary


def _save_imported(run_dir: Path, cfg: Config, hf_config: dict[str, Any], tokenizer: Any, model: Any) -> None:
    save_run_metadata(run_dir, cfg, hf_config, tokenizer)
    ckpts = RunCheckpoints(run_dir)
    ckpts.save_best(0, nnx.to_pure_dict(nnx.state(model, nnx.Param)), float("inf"))
    ckpts.wait()
    ckpts.close()
