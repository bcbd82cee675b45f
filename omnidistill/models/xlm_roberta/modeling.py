"""XLM-RoBERTa encoder in Flax NNX: BERT's blocks with RoBERTa's position numbering.

Matches Hugging Face ``XLMRobertaModel`` (tests/models/test_xlm_roberta_parity.py). Positions follow
``create_position_ids_from_input_ids``: real tokens count from ``pad_token_id + 1``, padding tokens
take ``pad_token_id``; in packed rows the count restarts at each segment.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from omnidistill.models.bert.modeling import BertEncoder, BertPooler
from omnidistill.models.layers import segment_positions


class XlmRobertaEncoder(BertEncoder):
    """BERT's encoder with positions counted from ``pad_token_id + 1`` over non-padding tokens."""

    def positions(self, input_ids: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
        pad = self.cfg.pad_token_id
        real = input_ids != pad
        if segment_ids is None:
            counted = jnp.cumsum(real.astype(jnp.int32), axis=1)
        else:
            counted = segment_positions(segment_ids) + 1
        return jnp.where(real, counted + pad, pad).astype(jnp.int32)


class XlmRobertaPooler(BertPooler):
    """``XLMRobertaClassificationHead`` up to its output projection: tanh(dense(h[<s>]))."""
