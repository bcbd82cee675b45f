"""Read a published scorer folder: a ``transformers`` ``*ForSequenceClassification`` export, or a folder in
the format of QCRI's ``omniscore`` package (``model_type: "omniscore"``).

The ``omniscore`` format (``OmniScoreModel`` of ``omniscore`` 0.1.0): ``config.json`` holds the
backbone's config under ``backbone_config``, ``pooling_strategy`` (``cls``: the final [CLS] state,
``mean``: the masked mean, ``last_token``: the last non-padding token), ``num_scores``/``score_names``,
``minimum_score``/``maximum_score`` (score = min + (max - min)·sigmoid(logit)) and the input layout
(``task_prefix``, ``source_prefix``, ``reference_prefix``, ``prediction_prefix``, ``separator``).
Its weights are ``backbone.*`` (the backbone's ``AutoModel`` keys) and ``score_head.{weight,bias}``:
OmniScore's head (§3, "Architecture": four linear heads on the [CLS] state, no pooler).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax.numpy as jnp

from omnidistill.config import DataConfig, ModelConfig, PromptLayout
from omnidistill.dimensions import DIMENSIONS, NUM_LEVELS, SCORE_MAX, SCORE_MIN
from omnidistill.models.hf_io import load_hf_weights, read_hf_config, read_hf_tensors, set_params
from omnidistill.models.registry import Family, family_for_model_type
from omnidistill.models.regressor import Regressor, abstract_regressor
from omnidistill.models.weights import WeightEntry, hf_to_flax

OMNISCORE_MODEL_TYPE = "omniscore"
OMNISCORE_POOLING = {"cls_raw": "cls", "mean": "mean", "last_token": "last_token"}
"""omnidistill ``model.pooling`` -> ``omniscore`` ``pooling_strategy``."""


class PublishedFormatError(ValueError):
    """A folder's config asks for something the ports do not implement; the message names the field."""


def backbone_prefix(family: Family, arch: Any) -> str:
    """The first key component of the encoder's tensors in the family's classification class (``bert``)."""
    key = next(e.hf_key for e in family.weight_table(arch) if e.group == "encoder")
    return key.split(".", 1)[0]


def omniscore_weight_table(family: Family, arch: Any) -> tuple[list[WeightEntry], list[str]]:
    """(entries for ``backbone.*`` + ``score_head.*``, keys of backbone tensors the ``omniscore`` pooling
    leaves unused, e.g. BERT's ``backbone.pooler.dense.*``, which ``AutoModel`` builds anyway)."""
    base = backbone_prefix(family, arch) + "."
    entries = []
    for entry in family.weight_table(arch):
        if entry.group == "encoder":
            entries.append(dataclasses.replace(entry, hf_key="backbone." + entry.hf_key.removeprefix(base)))
        elif entry.group == "classifier":
            suffix = entry.hf_key.rsplit(".", 1)[1]
            entries.append(dataclasses.replace(entry, hf_key=f"score_head.{suffix}"))
    return entries, ["backbone." + key for key in family.backbone_extras(arch)]


def layout_from_omniscore(config: dict[str, Any]) -> PromptLayout:
    """The input layout an ``omniscore`` config declares (the package's defaults where a key is absent)."""
    return PromptLayout(
        task_prefix=config.get("task_prefix", "Task:"),
        source_prefix=config.get("source_prefix", "Source:"),
        reference_prefix=config.get("reference_prefix", "Reference:"),
        prediction_prefix=config.get("prediction_prefix", "Prediction:"),
        separator=config.get("separator", "\n"),
    )


@dataclasses.dataclass
class Published:
    """A published folder loaded into a regressor, with the input settings it was trained with."""

    model: Regressor
    model_cfg: ModelConfig
    hf_config: dict[str, Any]
    """The backbone's Hugging Face config (what a run directory's ``model.json`` holds)."""
    data: DataConfig
    kind: str
    """``hf`` or ``omniscore``."""


def data_settings(meta: dict[str, Any], default: DataConfig) -> DataConfig:
    """``data`` settings from an export's ``omnidistill`` block (input format, layout, truncation, max_length)."""
    layout = meta.get("layout")
    return dataclasses.replace(
        default,
        input_format=meta.get("input_format", default.input_format),
        truncation=meta.get("truncation", default.truncation),
        max_length=int(meta.get("max_length", default.max_length)),
        layout=PromptLayout(**layout) if isinstance(layout, dict) else default.layout,
    )


def check_omniscore_config(folder: Path, config: dict[str, Any]) -> str:
    """Refuse, by field, what the ports cannot reproduce; returns the omnidistill pooling."""
    pooling = {v: k for k, v in OMNISCORE_POOLING.items()}.get(config.get("pooling_strategy") or "cls")
    if pooling is None:
        raise PublishedFormatError(
            f"{folder}/config.json: pooling_strategy={config.get('pooling_strategy')!r} is not ported (cls, mean and last_token are)"
        )
    if config.get("num_scores", 4) != len(DIMENSIONS):
        raise PublishedFormatError(f"{folder}/config.json: num_scores={config.get('num_scores')}; an omnidistill scorer has 4")
    names = config.get("score_names") or list(DIMENSIONS)
    if list(names) != list(DIMENSIONS):
        raise PublishedFormatError(f"{folder}/config.json: score_names={names} must be {list(DIMENSIONS)} in this order")
    bounds = (config.get("minimum_score", 1.0), config.get("maximum_score", 5.0))
    if bounds != (SCORE_MIN, SCORE_MAX):
        raise PublishedFormatError(f"{folder}/config.json: minimum_score/maximum_score={bounds}; omnidistill scores are 1-5")
    if not isinstance(config.get("backbone_config"), dict):
        raise PublishedFormatError(f"{folder}/config.json: no backbone_config (a backbone_model_name alone is not read)")
    return pooling


def load_omniscore_folder(folder: Path, config: dict[str, Any], dtype: Any = jnp.float32) -> Published:
    pooling = check_omniscore_config(folder, config)
    hf_config = dict(config["backbone_config"])
    family = family_for_model_type(str(hf_config.get("model_type")))
    model_cfg = ModelConfig(family=family.name, pooling=pooling, head="linear_sigmoid")
    model = abstract_regressor(model_cfg, hf_config, dtype=dtype)
    table, unused = omniscore_weight_table(family, model.arch)
    params, _ = hf_to_flax(read_hf_tensors(folder), table, key_prefixes=("",), ignorable_prefixes=tuple(unused))
    set_params(model, params)
    meta = config.get("omnidistill", {})
    default = DataConfig(input_format="omniscore", truncation="right", layout=layout_from_omniscore(config))
    return Published(model, model_cfg, hf_config, data_settings(meta, default), OMNISCORE_MODEL_TYPE)


def classifier_model_config(family: Family, hf_config: dict[str, Any], tensors: dict[str, Any]) -> ModelConfig:
    """The model config that runs a ``*ForSequenceClassification`` checkpoint exactly: an encoder's head
    pools [CLS] through its pooler (``cls``); a decoder's scores its last token with a bias-free layer
    (``last_token``, ``head_bias`` as the checkpoint has it)."""
    if not family.decoder:  # an omnidistill export of the classification head says so (20 logits: 4 dimensions x 5 levels)
        head = hf_config.get("omnidistill", {}).get("head", "linear_sigmoid")
        return ModelConfig(family=family.name, pooling="cls", head="classification" if head == "classification" else "linear_sigmoid")
    bias_key = next(e.hf_key for e in family.weight_table(family.config_from_hf(hf_config)) if e.path == ("head", "linear", "bias"))
    return ModelConfig(family=family.name, pooling="last_token", head_bias=bias_key in tensors)


def classifier_label_count(config: dict[str, Any]) -> int:
    """The number of labels ``transformers`` gives a classifier with this ``config.json``: ``id2label``'s
    size, else ``num_labels``, else its default of 2 (v5 writes neither field for 2 labels)."""
    return len(config.get("id2label") or {}) or int(config.get("num_labels", 2))


def check_scoring_head(folder: Path, family: Family, config: dict[str, Any], model_cfg: ModelConfig) -> None:
    """Refuse, by ``config.json`` field, a folder that holds no scorer: a backbone (``architectures``
    without the family's classification class, e.g. ``BertModel`` or a sentence-transformers folder),
    or a classifier whose label count is not the head's (4 scores; 20 logits for ``classification``).
    A config without ``architectures`` says neither: its tensors are matched by name and shape."""
    architectures = config.get("architectures") or []
    if not architectures:
        return
    if family.hf_class not in architectures:
        raise PublishedFormatError(
            f"{folder}/config.json: architectures={architectures}: a backbone with no scoring head ({family.hf_class} has one); "
            f"to train a scorer from it, set model.init_from={folder}"
        )
    expected = len(DIMENSIONS) * (NUM_LEVELS if model_cfg.head == "classification" else 1)
    labels = classifier_label_count(config)
    if labels != expected:
        levels = f" x {NUM_LEVELS} levels" if model_cfg.head == "classification" else ""
        raise PublishedFormatError(
            f"{folder}/config.json: a classifier with {labels} labels; an omnidistill scorer with the {model_cfg.head} head "
            f"has {expected} ({', '.join(DIMENSIONS)}{levels})"
        )


def load_published(folder: str | Path, dtype: Any = jnp.float32) -> Published:
    """Load an exported ``hf`` or ``omniscore`` folder with every tensor of encoder, pooler and head:
    float32 parameters, a model that computes in ``dtype``."""
    folder = Path(folder)
    config = read_hf_config(folder)
    if config.get("model_type") == OMNISCORE_MODEL_TYPE:
        return load_omniscore_folder(folder, config, dtype)
    family = family_for_model_type(str(config.get("model_type")))
    family.check_head_config(config)
    tensors = read_hf_tensors(folder)
    model_cfg = classifier_model_config(family, config, tensors)
    check_scoring_head(folder, family, config, model_cfg)
    model = abstract_regressor(model_cfg, config, dtype=dtype)
    load_hf_weights(model, tensors, required_groups=("encoder", "pooler", "classifier"))
    hf_config = {k: v for k, v in config.items() if k != "omnidistill"}
    default = DataConfig(max_length=min(512, int(config.get("max_position_embeddings", 512))))
    return Published(model, model_cfg, hf_config, data_settings(config.get("omnidistill", {}), default), "hf")
