"""Weight table: Hugging Face ``XLMRobertaForSequenceClassification`` keys <-> Flax regressor paths.

The encoder is BERT's under ``roberta.``; the classification head's ``classifier.dense`` is the pooler
and ``classifier.out_proj`` the four outputs.
"""

from __future__ import annotations

from omnidistill.models.bert import params as bert_params
from omnidistill.models.weights import WeightEntry
from omnidistill.models.xlm_roberta.config import XlmRobertaConfig

HF_CLASS = "XLMRobertaForSequenceClassification"
# Tensors of pre-training checkpoints the classification class does not have (LM head, the backbone pooler).
IGNORABLE_PREFIXES = ("lm_head.", "roberta.pooler.", "pooler.", "roberta.embeddings.position_ids", "embeddings.position_ids")
SHARDING_RULES = bert_params.SHARDING_RULES


def weight_table(cfg: XlmRobertaConfig) -> list[WeightEntry]:
    """Every tensor of the encoder, the head's dense layer (pooler) and its output projection."""
    return bert_params.weight_table(cfg, base="roberta", pooler_key="classifier.dense", classifier_key="classifier.out_proj")
