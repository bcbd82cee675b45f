"""Cross-lingual consistency of a scorer on items that are parallel across languages (shared ``group_id``).

Following "How Reliable is Multilingual LLM-as-a-Judge?": per dimension, Fleiss' kappa with groups as
subjects and languages as raters over rounded scores (groups covering every compared language), and
each language's deviation from the English score of the same group (mean signed and mean absolute).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.agreement import category_counts, fleiss_kappa


def cross_lingual_consistency(records: Sequence[Record], pred: np.ndarray, reference_lang: str = "en") -> dict | None:
    """None when no ``group_id`` spans two or more languages."""
    groups: dict[str, dict[str, int]] = defaultdict(dict)
    for i, r in enumerate(records):
        if r.group_id is not None:
            groups[r.group_id][r.lang] = i
    groups = {g: langs for g, langs in groups.items() if len(langs) >= 2}
    if not groups:
        return None
    langs = sorted({lang for members in groups.values() for lang in members})
    complete = [members for members in groups.values() if all(lang in members for lang in langs)]
    out: dict = {
        "groups": len(groups),
        "languages": langs,
        "complete_groups": len(complete),
        "fleiss_kappa": {},
        "deviation_from_reference": {},
    }
    for d, dim in enumerate(DIMENSIONS):
        if complete:
            ratings = np.array([[pred[m[lang], d] for lang in langs] for m in complete])
            out["fleiss_kappa"][dim] = fleiss_kappa(category_counts(ratings))
    for lang in langs:
        if lang == reference_lang:
            continue
        pairs = [(m[lang], m[reference_lang]) for m in groups.values() if lang in m and reference_lang in m]
        if not pairs:
            continue
        diff = np.array([pred[i] - pred[j] for i, j in pairs])
        out["deviation_from_reference"][lang] = {
            "groups": len(pairs),
            "mean": dict(zip(DIMENSIONS, map(float, diff.mean(axis=0)), strict=True)),
            "mean_abs": float(np.abs(diff).mean()),
        }
    out["reference_lang"] = reference_lang
    return out
