"""Weight table: Hugging Face ``Qwen2ForSequenceClassification`` keys <-> Flax regressor paths (Qwen3's table,
which reads the q/k/v biases and the absent q/k norms from :class:`Qwen2Config`)."""

from __future__ import annotations

from omnidistill.models.qwen3 import params as qwen3_params

HF_CLASS = "Qwen2ForSequenceClassification"
IGNORABLE_PREFIXES = qwen3_params.IGNORABLE_PREFIXES
SHARDING_RULES = qwen3_params.SHARDING_RULES
weight_table = qwen3_params.weight_table
