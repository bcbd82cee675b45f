"""Run the Python blocks of an exported model card as a user would (only the folder path filled in)."""

from __future__ import annotations

import re
from pathlib import Path

from omnidistill.export.model_card import PLACEHOLDER


def card_scores(folder: Path, name: str = "scores") -> list[list[float]]:
    """The ``scores`` (or another variable, e.g. ``uncertainty``) each Python block of ``folder/README.md``
    computes, in card order."""
    card = (folder / "README.md").read_text(encoding="utf-8")
    results = []
    for block in re.findall(r"```python\n(.*?)```", card, re.S):
        namespace: dict = {}
        exec(block.replace(PLACEHOLDER, str(folder)), namespace)
        scores = namespace[name]
        results.append(list(scores.values()) if isinstance(scores, dict) else [float(v) for v in scores])
    return results
