"""Encoder families: config class, modules, weight table and HF class, looked up by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from omnidistill.models.bert import config as bert_config
from omnidistill.models.bert import modeling as bert_modeling
from omnidistill.models.bert import params as bert_params
from omnidistill.models.deberta_v2 import config as deberta_config
from omnidistill.models.deberta_v2 import modeling as deberta_modeling
from omnidistill.models.deberta_v2 import params as deberta_params
from omnidistill.models.gemma3 import config as gemma3_config
from omnidistill.models.gemma3 import modeling as gemma3_modeling
from omnidistill.models.gemma3 import params as gemma3_params
from omnidistill.models.modernbert import config as modernbert_config
from omnidistill.models.modernbert import modeling as modernbert_modeling
from omnidistill.models.modernbert import params as modernbert_params
from omnidistill.models.qwen2 import config as qwen2_config
from omnidistill.models.qwen2 import modeling as qwen2_modeling
from omnidistill.models.qwen2 import params as qwen2_params
from omnidistill.models.qwen3 import config as qwen3_config
from omnidistill.models.qwen3 import modeling as qwen3_modeling
from omnidistill.models.qwen3 import params as qwen3_params
from omnidistill.models.weights import WeightEntry
from omnidistill.models.xlm_roberta import config as xlm_roberta_config
from omnidistill.models.xlm_roberta import modeling as xlm_roberta_modeling
from omnidistill.models.xlm_roberta import params as xlm_roberta_params


@dataclasses.dataclass(frozen=True)
class Family:
    """Everything the framework needs to know about one encoder family."""

    name: str
    hf_model_types: tuple[str, ...]
    config_from_hf: Callable[[dict[str, Any]], Any]
    encoder_cls: type
    pooler_cls: type
    weight_table: Callable[[Any], list[WeightEntry]]
    hf_class: str
    ignorable_prefixes: tuple[str, ...] = ()
    sharding_rules: tuple[tuple[str, tuple[str | None, ...]], ...] = ()
    """(path regex, axis per dimension) tensor-parallel rules; unmatched matrices get FSDP by default."""
    backbone_extras: Callable[[Any], dict[str, tuple[int, ...]]] = lambda arch: {}
    """Tensors (``AutoModel`` key -> shape) the backbone's ``AutoModel`` builds that no omnidistill head
    uses, e.g. BERT's pooler under ``pooling: cls_raw``: written as zeros by ``export --format omniscore``."""
    check_head_config: Callable[[dict[str, Any]], None] = lambda hf: None
    """Refuses, by field name, HF classification-head settings the port's pooler + head do not implement
    (called when a ``*ForSequenceClassification`` head is imported; a backbone's copy is irrelevant)."""
    decoder: bool = False
    """A decoder architecture (Qwen, Gemma): no [CLS] pooler; pool with ``last_token`` or ``mean``. Its
    ``*ForSequenceClassification`` scores the last non-padding token with a bias-free layer. Whether
    attention is causal is the checkpoint's (Gemma 3 can be bidirectional)."""
    backbone_pooling: Callable[[dict[str, Any]], str] | None = None
    """The pooling a backbone of this family is trained with by default, from its HF config
    (None: ``last_token`` for a decoder, the paper's ``cls_raw`` otherwise)."""

    @property
    def config_class(self) -> type:
        """The port's config dataclass, whose ``from_hf`` :attr:`config_from_hf` is."""
        return self.config_from_hf.__self__  # type: ignore[attr-defined]

    def default_pooling(self, hf_config: dict[str, Any]) -> str:
        """``model.pooling`` for a new regressor on a backbone with this HF config."""
        if self.backbone_pooling is not None:
            return self.backbone_pooling(hf_config)
        return "last_token" if self.decoder else "cls_raw"


FAMILIES: dict[str, Family] = {
    "bert": Family(
        name="bert",
        hf_model_types=("bert",),
        config_from_hf=bert_config.BertConfig.from_hf,
        encoder_cls=bert_modeling.BertEncoder,
        pooler_cls=bert_modeling.BertPooler,
        weight_table=bert_params.weight_table,
        hf_class=bert_params.HF_CLASS,
        ignorable_prefixes=bert_params.IGNORABLE_PREFIXES,
        sharding_rules=bert_params.SHARDING_RULES,
        backbone_extras=bert_params.pooler_extras,
    ),
    "xlm_roberta": Family(
        name="xlm_roberta",
        hf_model_types=xlm_roberta_config.XlmRobertaConfig.MODEL_TYPES,
        config_from_hf=xlm_roberta_config.XlmRobertaConfig.from_hf,
        encoder_cls=xlm_roberta_modeling.XlmRobertaEncoder,
        pooler_cls=xlm_roberta_modeling.XlmRobertaPooler,
        weight_table=xlm_roberta_params.weight_table,
        hf_class=xlm_roberta_params.HF_CLASS,
        ignorable_prefixes=xlm_roberta_params.IGNORABLE_PREFIXES,
        sharding_rules=xlm_roberta_params.SHARDING_RULES,
        backbone_extras=bert_params.pooler_extras,
    ),
    "deberta_v2": Family(
        name="deberta_v2",
        hf_model_types=("deberta-v2",),
        config_from_hf=deberta_config.DebertaV2Config.from_hf,
        encoder_cls=deberta_modeling.DebertaV2Encoder,
        pooler_cls=deberta_modeling.DebertaV2Pooler,
        weight_table=deberta_params.weight_table,
        hf_class=deberta_params.HF_CLASS,
        ignorable_prefixes=deberta_params.IGNORABLE_PREFIXES,
        sharding_rules=deberta_params.SHARDING_RULES,
    ),
    "modernbert": Family(
        name="modernbert",
        hf_model_types=("modernbert",),
        config_from_hf=modernbert_config.ModernBertConfig.from_hf,
        encoder_cls=modernbert_modeling.ModernBertEncoder,
        pooler_cls=modernbert_modeling.ModernBertPooler,
        weight_table=modernbert_params.weight_table,
        hf_class=modernbert_params.HF_CLASS,
        ignorable_prefixes=modernbert_params.IGNORABLE_PREFIXES,
        check_head_config=modernbert_config.check_head_config,
        sharding_rules=modernbert_params.SHARDING_RULES,
    ),
    "qwen3": Family(
        name="qwen3",
        hf_model_types=qwen3_config.Qwen3Config.MODEL_TYPES,
        config_from_hf=qwen3_config.Qwen3Config.from_hf,
        encoder_cls=qwen3_modeling.Qwen3Encoder,
        pooler_cls=qwen3_modeling.Qwen3Pooler,
        weight_table=qwen3_params.weight_table,
        hf_class=qwen3_params.HF_CLASS,
        ignorable_prefixes=qwen3_params.IGNORABLE_PREFIXES,
        sharding_rules=qwen3_params.SHARDING_RULES,
        decoder=True,
    ),
    "qwen2": Family(
        name="qwen2",
        hf_model_types=qwen2_config.Qwen2Config.MODEL_TYPES,
        config_from_hf=qwen2_config.Qwen2Config.from_hf,
        encoder_cls=qwen2_modeling.Qwen2Encoder,
        pooler_cls=qwen2_modeling.Qwen2Pooler,
        weight_table=qwen2_params.weight_table,
        hf_class=qwen2_params.HF_CLASS,
        ignorable_prefixes=qwen2_params.IGNORABLE_PREFIXES,
        sharding_rules=qwen2_params.SHARDING_RULES,
        decoder=True,
    ),
    "gemma3": Family(
        name="gemma3",
        hf_model_types=gemma3_config.Gemma3Config.MODEL_TYPES,
        config_from_hf=gemma3_config.Gemma3Config.from_hf,
        encoder_cls=gemma3_modeling.Gemma3Encoder,
        pooler_cls=gemma3_modeling.Gemma3Pooler,
        weight_table=gemma3_params.weight_table,
        hf_class=gemma3_params.HF_CLASS,
        ignorable_prefixes=gemma3_params.IGNORABLE_PREFIXES,
        sharding_rules=gemma3_params.SHARDING_RULES,
        decoder=True,
        backbone_pooling=gemma3_config.backbone_pooling,
    ),
}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r} (available: {', '.join(sorted(FAMILIES))})") from None


UNPORTED = {
    "gte": "GTE-multilingual (Snowflake Arctic-embed-m-v2.0, a Table 6 student)",
    "new": "GTE-multilingual (Alibaba-NLP gte-multilingual-base)",
    "score_predictor": "the legacy format of the released QCRI/OmniScore-deberta-v3",
}
"""Architectures refused by name: their forward exists only as remote code (``Alibaba-NLP/new-impl``, the
released OmniScore checkpoint's own modeling file) that ``transformers`` does not ship, so there is no
offline reference to test a port's parity against."""
UNPORTED_ADVICE = {
    "score_predictor": "; the omniscore package runs that code: score with omniscore.OmniScorer('QCRI/OmniScore-deberta-v3') "
    "(pip install --no-deps omniscore==0.1.0), or train a scorer on its backbone with configs/deberta-v3-base.yaml",
}
"""What to do instead, where there is something better to do than pick another model."""


def family_for_model_type(model_type: str) -> Family:
    """The family that implements a Hugging Face ``model_type``; another type is refused by name."""
    for family in FAMILIES.values():
        if model_type in family.hf_model_types:
            return family
    if model_type in UNPORTED:
        raise ValueError(
            f"model_type={model_type!r} ({UNPORTED[model_type]}) is not ported: its forward is remote code that transformers "
            "does not ship, so omnidistill has no reference to prove parity against (see docs/models.md)"
            + UNPORTED_ADVICE.get(model_type, "")
        )
    raise ValueError(f"no omnidistill port for Hugging Face model_type={model_type!r}")
