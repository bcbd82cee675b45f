"""Write a folder in the format of QCRI's ``omniscore`` package (``OmniScoreModel``, ``model_type: "omniscore"``).

It holds OmniScore's head exactly (§3, "Architecture"): the backbone's final states, pooled as [CLS]
(``model.pooling: cls_raw``, the package's ``pooling_strategy: cls``) or as a masked mean (``mean``),
then one linear layer of four outputs and ``1 + 4·sigmoid``. The tensors are ``backbone.*`` (the
backbone's ``AutoModel`` keys) and ``score_head.{weight,bias}``; the config carries the input layout
(prefixes and separator) the run was trained with, so ``omniscore.OmniScorer(folder)`` formats inputs
as training did.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from omnidistill.config import Config
from omnidistill.data.input_text import TextLayout
from omnidistill.dimensions import DIMENSIONS, SCORE_MAX, SCORE_MIN
from omnidistill.models.published import OMNISCORE_MODEL_TYPE, OMNISCORE_POOLING, omniscore_weight_table
from omnidistill.models.registry import get_family
from omnidistill.models.weights import flax_to_hf

OMNISCORE_INSTALL = "pip install --no-deps --ignore-requires-python omniscore==0.1.0"
"""How to install QCRI's ``omniscore`` package beside this stack (README command 1, ``.ci/run``, model
cards). Its 0.1.0 release pins ``transformers<4.46``, ``torch<2.4`` and ``numpy<2`` and declares
``Requires-Python <3.13``; it needs none of them, and the export tests run it with this stack on
Python 3.11, 3.12 and 3.13."""


def omniscore_tensors(family_name: str, arch: Any, params: Any) -> dict[str, np.ndarray]:
    """``backbone.*`` and ``score_head.*`` float32 tensors. Backbone tensors the pooling leaves unused but
    ``AutoModel`` builds (BERT's pooler) are written as zeros, so that loading reports nothing missing."""
    family = get_family(family_name)
    table, _ = omniscore_weight_table(family, arch)
    if "bias" not in params["head"]["linear"]:  # model.head_bias: false; the package's score_head has one
        table = [e for e in table if e.hf_key != "score_head.bias"]
    tensors = flax_to_hf(params, table)
    tensors.setdefault("score_head.bias", np.zeros((len(DIMENSIONS),), np.float32))
    for key, shape in family.backbone_extras(arch).items():
        tensors["backbone." + key] = np.zeros(shape, np.float32)
    return tensors


def omniscore_config_dict(cfg: Config, arch: Any, layout: TextLayout) -> dict[str, Any]:
    """``config.json`` for ``OmniScoreModel``: backbone config, pooling, score range, input layout."""
    from transformers import AutoConfig

    fields = arch.to_hf()
    model_type = fields.pop("model_type")
    backbone = AutoConfig.for_model(model_type, **fields).to_dict()
    return {
        "model_type": OMNISCORE_MODEL_TYPE,
        "architectures": ["OmniScoreModel"],
        "backbone_model_name": cfg.model.init_from or "",
        "backbone_config": backbone,
        "num_scores": len(DIMENSIONS),
        "score_names": list(DIMENSIONS),
        "minimum_score": SCORE_MIN,
        "maximum_score": SCORE_MAX,
        "is_encoder": not get_family(cfg.model.family).decoder,
        "pooling_strategy": OMNISCORE_POOLING[cfg.model.pooling],
        "hidden_size": backbone["hidden_size"],
        "task_prefix": layout.task_prefix,
        "source_prefix": layout.source_prefix,
        "reference_prefix": layout.reference_prefix,
        "prediction_prefix": layout.prediction_prefix,
        "separator": layout.separator,
    }
