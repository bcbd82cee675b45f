"""Qwen2 configuration (Hugging Face ``Qwen2Config``): Qwen3's decoder without q/k norms, with q/k/v biases.

Qwen2 is the backbone of KaLM-mini, a Table 6 student (§E). The blocks are Qwen3's
(:mod:`omnidistill.models.qwen3`) with two differences, both from the reference forward: the query,
key and value projections always carry a bias (the output projection none), and there is no RMSNorm
on the query and key heads. Refusals (sliding-window layers, scaled RoPE) are Qwen3's.
"""

from __future__ import annotations

import dataclasses

from omnidistill.models.qwen3.config import Qwen3Config


@dataclasses.dataclass(frozen=True)
class Qwen2Config(Qwen3Config):
    """Architecture of a Qwen2 decoder used as an embedding backbone."""

    MODEL_TYPES = ("qwen2",)

    @property
    def qk_norm(self) -> bool:
        return False

    @property
    def qkv_bias(self) -> bool:
        return True

    @property
    def output_bias(self) -> bool:
        return False
