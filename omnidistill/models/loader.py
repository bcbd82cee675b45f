"""Build a regressor and its tokenizer from a :class:`ModelConfig` (random init or HF weights)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import jax.numpy as jnp

from omnidistill.config import ModelConfig
from omnidistill.models.config_fields import check_arch_fields
from omnidistill.models.hf_io import absent_hf_keys, load_hf_weights, read_hf_config, read_hf_tensor_shapes, read_hf_tensors, resolve_hf_dir
from omnidistill.models.published import OMNISCORE_MODEL_TYPE
from omnidistill.models.registry import Family, family_for_model_type, get_family
from omnidistill.models.regressor import Regressor, abstract_regressor, build_regressor
from omnidistill.models.weights import WeightMismatchError

log = logging.getLogger(__name__)
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def dtype_named(name: str) -> Any:
    """The compute dtype of a name in :data:`DTYPES`; another name is a ValueError naming the choices."""
    if name not in DTYPES:
        raise ValueError(f"compute_dtype={name!r}: expected one of {sorted(DTYPES)}")
    return DTYPES[name]


@dataclasses.dataclass
class LoadedModel:
    model: Regressor
    hf_config: dict[str, Any]
    tokenizer: Any
    pretrained_pooler: bool = False
    """The family pooler's weights came from ``init_from`` (BERT's ``pooler.dense``), not random init."""


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "*.model")
"""Files of which a tokenizer folder has at least one (fast, WordPiece, byte-level BPE, SentencePiece)."""


def load_tokenizer(name_or_path: str) -> Any:
    """The tokenizer of a local folder or Hub id. A folder with none of :data:`TOKENIZER_FILES` (model
    weights copied without their tokenizer, say) is refused by name, rather than with transformers'
    error about converting a slow tokenizer."""
    from transformers import AutoTokenizer

    folder = resolve_hf_dir(name_or_path)
    if not any(any(folder.glob(pattern)) for pattern in TOKENIZER_FILES):
        held = sorted(p.name for p in folder.iterdir())
        raise FileNotFoundError(
            f"{folder}: no tokenizer files ({', '.join(TOKENIZER_FILES)}); it holds {held[:8] or 'nothing'}: "
            "copy the tokenizer the model was trained with into it, or name a tokenizer folder (model.tokenizer)"
        )
    quiet = logging.getLogger("transformers.configuration_utils")
    quiet.addFilter(_unknown_omniscore_type)
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    finally:
        quiet.removeFilter(_unknown_omniscore_type)


def _unknown_omniscore_type(record: logging.LogRecord) -> bool:
    """False for transformers' warning that a model of type ``omniscore`` builds a bare config.

    Without the ``omniscore`` package imported, transformers does not know that type, and the
    warning, printed on every ``score`` of an exported folder, points at nothing wrong. The tokenizer
    is still loaded from the bare config, as the package itself loads it: passing a config built
    from the backbone gave other token ids for Qwen2."""
    return f"model of type `{OMNISCORE_MODEL_TYPE}` to instantiate" not in record.getMessage()


@dataclasses.dataclass(frozen=True)
class StartingPoint:
    """What ``model.init_from`` names: a Hugging Face folder or a run directory, with its HF config and
    the folder of its tokenizer (the run's ``tokenizer/``)."""

    name: str
    hf_config: dict[str, Any]
    tokenizer_dir: Path


def check_same_vocabulary(tokenizer: Any, tokenizer_name: str, source: Path, init_from: str) -> None:
    """Refuse a ``model.tokenizer`` whose ids are not those of the tokenizer in ``init_from``'s folder
    ``source`` (nothing to compare where it holds none): every token of that vocabulary must keep its
    id, added tokens aside. Another vocabulary looks the pretrained embeddings up by the wrong ids and
    trains without an error: ``configs/tiny.yaml`` (the tiny WordPiece) with ``model.init_from=`` a
    real BERT did."""
    if not any(any(source.glob(pattern)) for pattern in TOKENIZER_FILES):
        return
    theirs, ours = load_tokenizer(str(source)).get_vocab(), tokenizer.get_vocab()
    moved = sorted((token for token, index in theirs.items() if ours.get(token) != index), key=theirs.__getitem__)
    if moved:
        raise ValueError(
            f"model.tokenizer={tokenizer_name} is not the tokenizer of model.init_from={init_from}: {len(moved):,} of its "
            f"{len(theirs):,} tokens have another id or none (e.g. {', '.join(map(repr, moved[:3]))}), so the checkpoint's "
            "embeddings would be looked up by the wrong ids; leave model.tokenizer unset (model.tokenizer=null) to use init_from's"
        )


def check_family(family: Family, model_type: str, init_from: str) -> None:
    """Refuse an ``init_from`` whose ``model_type`` another family's port implements, naming that
    family (the port itself would only say that it does not take this model type), or an ``omniscore``
    scorer folder, which ``omnidistill import`` turns into a run that ``init_from`` takes whole."""
    if model_type == OMNISCORE_MODEL_TYPE:
        raise ValueError(
            f"model.init_from={init_from} is a scorer folder in the omniscore package's format: make a run of it with "
            f"`omnidistill import {init_from} RUN_DIR`, then set model.init_from=RUN_DIR (its encoder and heads carry over)"
        )
    try:  # no port takes it: refused as `score` and `import` refuse it (an unported remote-code model by name)
        owner = family_for_model_type(model_type)
    except ValueError as err:
        raise ValueError(f"model.init_from={init_from}: {err}") from None
    if model_type not in family.hf_model_types:
        raise ValueError(
            f"model.init_from={init_from} is a {owner.name} model (model_type={model_type!r}), and model.family={family.name}: "
            f"set model.family={owner.name}"
        )


def arch_conflict(err: WeightMismatchError, model_cfg: ModelConfig, checkpoint_config: dict[str, Any]) -> WeightMismatchError:
    """``init_from``'s tensors did not fit: name the ``model.arch`` fields that changed its config (a
    config file's tiny architecture over a real checkpoint, say) before the tensors they mismatch."""
    changed = {key: value for key, value in model_cfg.arch.items() if checkpoint_config.get(key) != value}
    if not changed:
        return err
    sets = ", ".join(f"{key}={value!r} (checkpoint: {checkpoint_config.get(key)!r})" for key, value in changed.items())
    return WeightMismatchError(
        f"model.init_from={model_cfg.init_from}: its tensors do not fit the model that model.arch makes of its config "
        f"(model.arch sets {sets}); leave these out of model.arch to keep the checkpoint's architecture "
        f"(model.arch={{}} clears what a config file sets). {err}"
    )


def load_model(
    model_cfg: ModelConfig,
    *,
    compute_dtype: str = "float32",
    seed: int = 0,
    shapes_only: bool = False,
    start: StartingPoint | None = None,
) -> LoadedModel:
    """Regressor (pretrained encoder if ``init_from``), its HF-style config dict, and its tokenizer.

    ``model.arch`` overrides ``init_from``'s ``config.json``, else the config of ``start`` (a run
    directory as the starting point, whose parameters the caller copies), else nothing; a field of it
    that the family's port does not read is refused by name
    (:func:`~omnidistill.models.config_fields.check_arch_fields`). Either starting point must be of
    the configured family, and a ``model.tokenizer`` beside it must keep its tokenizer's ids
    (:func:`check_family`, :func:`check_same_vocabulary`), before anything is built.

    ``shapes_only``: the model is built from shapes and holds no values (a resumed run's checkpoint
    fills it). ``init_from``'s tensors are then not read: their names and shapes (the safetensors
    headers) are checked as a full load checks them, and decide ``pretrained_pooler`` (the LR groups)."""
    folder = None
    family = get_family(model_cfg.family)
    if model_cfg.init_from:
        folder = resolve_hf_dir(model_cfg.init_from)
        start = StartingPoint(model_cfg.init_from, read_hf_config(folder), folder)
    tok_name = model_cfg.tokenizer or (start and str(start.tokenizer_dir))
    if not tok_name:
        raise ValueError("model.tokenizer (or model.init_from) must name a tokenizer")
    tokenizer = load_tokenizer(tok_name)
    if start is not None:
        if model_cfg.tokenizer:
            check_same_vocabulary(tokenizer, model_cfg.tokenizer, start.tokenizer_dir, start.name)
        check_family(family, str(start.hf_config.get("model_type")), start.name)
    hf_config = {**(start.hf_config if start else {}), **model_cfg.arch}
    if folder is None:  # a random init, or a run's saved config: what a checkpoint folder's config.json would give
        hf_config.setdefault("vocab_size", len(tokenizer))
        for name in ("pad", "cls", "sep", "bos", "eos"):  # special-token ids follow the tokenizer
            token_id = getattr(tokenizer, f"{name}_token_id", None)
            if token_id is not None:
                hf_config.setdefault(f"{name}_token_id", token_id)
        hf_config.setdefault("model_type", family.hf_model_types[0])
    check_arch_fields(family, hf_config, model_cfg)
    if hf_config.get("vocab_size", 0) < len(tokenizer):
        raise ValueError(f"model vocab_size={hf_config.get('vocab_size')} is smaller than the tokenizer ({len(tokenizer)} tokens)")
    if shapes_only:
        model = abstract_regressor(model_cfg, hf_config, dtype=DTYPES[compute_dtype])
    else:
        model = build_regressor(model_cfg, hf_config, dtype=DTYPES[compute_dtype], seed=seed)
    pretrained_pooler = False
    if folder is not None:
        try:
            if shapes_only:
                absent = absent_hf_keys(model, read_hf_tensor_shapes(folder), required_groups=("encoder",))
            else:
                absent = load_hf_weights(model, read_hf_tensors(folder), required_groups=("encoder",))
                log.info("initialised encoder from %s (%d optional tensors left random)", model_cfg.init_from, len(absent))
        except WeightMismatchError as err:
            raise arch_conflict(err, model_cfg, start.hf_config) from None
        pooler_keys = {e.hf_key for e in family.weight_table(model.arch) if e.group == "pooler"}
        pretrained_pooler = model.pooler is not None and bool(pooler_keys) and not pooler_keys & set(absent)
    return LoadedModel(model=model, hf_config=hf_config, tokenizer=tokenizer, pretrained_pooler=pretrained_pooler)
