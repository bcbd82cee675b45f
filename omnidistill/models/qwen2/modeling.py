"""Qwen2 decoder in Flax NNX: Qwen3's modules, driven by :class:`Qwen2Config` (q/k/v biases, no q/k norms).

Matches Hugging Face ``Qwen2Model`` (tests/models/test_qwen2_parity.py).
"""

from __future__ import annotations

from omnidistill.models.qwen3.modeling import Qwen3Encoder, Qwen3Pooler


class Qwen2Encoder(Qwen3Encoder):
    """Qwen2 as an encoder of the regressor (final normed states, causal attention)."""


class Qwen2Pooler(Qwen3Pooler):
    """Qwen2 has no classification pooler: ``model.pooling: cls`` is refused (use ``last_token``)."""
