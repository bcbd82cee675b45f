"""Cross-lingual consistency of a scorer on items that are parallel across languages (shared ``group_id``).

Following "How Reliable is Multilingual LLM-as-a-Judge?" (paper 004, §2 and §5.1), over scores
rounded to the 1-5 levels, per dimension:
- Fleiss' kappa with parallel items as subjects and languages as raters (over the items that every
  compared language has);
- Cohen's kappa between the reference language (English by default) and each other language;
- each language's mean signed and mean absolute deviation from the reference (continuous scores).

Every parallel item is kept: when a group holds several items of one language (several candidates of
the same source, say), the k-th item of a language in the group, in file order, is parallel to the
k-th item of every other language in that group.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.agreement import category_counts, cohen_kappa, fleiss_kappa


def parallel_units(records: Sequence[Record]) -> dict[tuple[str, int], dict[str, int]]:
    """(group_id, k) -> {language: record index} for every unit spanning two or more languages."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    units: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
    for i, r in enumerate(records):
        if r.group_id is None:
            continue
        k = seen[(r.group_id, r.lang)]
        seen[(r.group_id, r.lang)] += 1
        units[(r.group_id, k)][r.lang] = i
    return {key: langs for key, langs in units.items() if len(langs) >= 2}


def cross_lingual_consistency(records: Sequence[Record], pred: np.ndarray, reference_lang: str = "en") -> dict | None:
    """None when no ``group_id`` spans two or more languages."""
    units = parallel_units(records)
    if not units:
        return None
    langs = sorted({lang for members in units.values() for lang in members})
    complete = [members for members in units.values() if all(lang in members for lang in langs)]
    out: dict = {
        "groups": len({g for g, _ in units}),
        "parallel_items": len(units),
        "languages": langs,
        "complete_groups": len(complete),
        "fleiss_kappa": {},
        "cohen_kappa_vs_reference": {},
        "deviation_from_reference": {},
        "reference_lang": reference_lang,
    }
    for d, dim in enumerate(DIMENSIONS):
        if complete:
            ratings = np.array([[pred[m[lang], d] for lang in langs] for m in complete])
            out["fleiss_kappa"][dim] = fleiss_kappa(category_counts(ratings))
    for lang in langs:
        if lang == reference_lang:
            continue
        pairs = [(m[lang], m[reference_lang]) for m in units.values() if lang in m and reference_lang in m]
        if not pairs:
            continue
        this, ref = np.array([pred[i] for i, _ in pairs]), np.array([pred[j] for _, j in pairs])
        out["cohen_kappa_vs_reference"][lang] = {
            "items": len(pairs),
            **{dim: cohen_kappa(this[:, d], ref[:, d]) for d, dim in enumerate(DIMENSIONS)},
        }
        diff = this - ref
        out["deviation_from_reference"][lang] = {
            "groups": len(pairs),
            "mean": dict(zip(DIMENSIONS, map(float, diff.mean(axis=0)), strict=True)),
            "mean_abs": float(np.abs(diff).mean()),
        }
    return out
