"""omnidistill: distill an LLM judge's 1-5 Likert labels into fast encoder regressors (JAX)."""

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["Scorer"]

if TYPE_CHECKING:
    from omnidistill.scorer import Scorer


def __getattr__(name: str):
    if name == "Scorer":  # imported lazily: importing omnidistill stays cheap
        from omnidistill.scorer import Scorer

        return Scorer
    raise AttributeError(name)
