"""XLM-RoBERTa configuration: BERT's fields, plus RoBERTa's position numbering (Hugging Face ``XLMRobertaConfig``).

XLM-R (a Table 6 student of the paper, §E) is the BERT architecture with two differences the port
implements: positions start at ``pad_token_id + 1`` and padding tokens take position ``pad_token_id``
(fairseq's ``make_positions``), and the classification head is ``dense -> tanh -> out_proj`` on the
<s> state with no separate pooler. Every other forward-changing field is BERT's and checked there.
"""

from __future__ import annotations

import dataclasses

from omnidistill.models.bert.config import BertConfig


@dataclasses.dataclass(frozen=True)
class XlmRobertaConfig(BertConfig):
    """Architecture of an XLM-RoBERTa encoder (xlm-roberta-base/large and their fine-tunes)."""

    MODEL_TYPES = ("xlm-roberta",)

    pad_token_id: int = 1
    """``XLMRobertaConfig``'s default, also where ``from_hf`` finds no ``pad_token_id``; the other defaults are BERT's."""

    @property
    def position_padding_idx(self) -> int | None:
        """``XLMRobertaEmbeddings.position_embeddings`` is built with ``padding_idx=pad_token_id``: the
        padding position's row gets no gradient."""
        return self.pad_token_id

    @property
    def max_sequence_length(self) -> int:
        """Positions pad_token_id + 1 .. max_position_embeddings - 1 are free for tokens."""
        return self.max_position_embeddings - self.pad_token_id - 1
