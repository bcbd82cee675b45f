"""Agreement with a teacher's pairwise preferences: does the student order two candidates of one input
as the judge chose between them?

``omnidistill label --pairwise`` writes one line per pair of candidates that share an input: their ids
(``id_a``, ``id_b``) and the ``winner`` by majority of the judge models, or null when they tied
(CE-Judge §3.3, paper 001: the judge ends with "Therefore, I choose A (or B) as the better response.",
and has no tie). CE-Judge reports pairwise accuracy as correct / total (§4.3), and the related papers'
digest names the pairs as a check of whether the student's ordering S(a) > S(b) is right.

omnidistill's choices, as no paper defines the student's side: a pair is correct when the winner's
score is strictly higher. The overall score is the mean of the four dimensions (the judge chose the
better response overall), and each dimension is also reported on its own. A pair the student scores
equally is a tie and counts as wrong, as a judge with no tie option would have had to choose. Pairs
the judges tied on (winner null) and pairs with an id not scored are left out and counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from omnidistill.data.preference_file import Preference
from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS


def preference_ids(pairs: list[Preference]) -> set[str]:
    """The ids whose scores the agreement needs (those of the pairs with a winner)."""
    return {i for p in pairs if p.winner is not None for i in (p.id_a, p.id_b)}


def _accuracy(winners: np.ndarray, losers: np.ndarray) -> dict[str, Any]:
    """Correct (the winner scored strictly higher), ties and accuracy = correct / pairs, over the pairs
    both of whose scores are numbers (a judge's label file may leave a dimension unscored: NaN)."""
    scored = np.isfinite(winners) & np.isfinite(losers)
    winners, losers = winners[scored], losers[scored]
    n = len(winners)
    correct, ties = int(np.sum(winners > losers)), int(np.sum(winners == losers))
    return {"pairs": n, "correct": correct, "ties": ties, "accuracy": correct / n if n else None}


def preference_agreement(
    pairs: list[Preference], scores: Mapping[str, np.ndarray], tasks: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The agreement of ``scores`` (id -> the four scores: a student's, or another judge's with NaN where
    it did not score) with the judged pairs: ``overall`` (the mean of the four; a pair with an unscored
    dimension is left out of it) and each dimension's ``{pairs, correct, ties, accuracy}``, ``by_task``
    (with ``tasks``: id -> task, the winner's) and the counts of pairs left out."""
    decided = [p for p in pairs if p.winner is not None]
    compared = [p for p in decided if p.id_a in scores and p.id_b in scores]
    missing = sorted({i for p in decided for i in (p.id_a, p.id_b) if i not in scores})
    win = np.array([scores[p.winner] for p in compared], np.float64).reshape(-1, len(DIMENSIONS))
    lose = np.array([scores[p.id_b if p.winner == p.id_a else p.id_a] for p in compared], np.float64).reshape(-1, len(DIMENSIONS))
    out: dict[str, Any] = {
        "pair_lines": len(pairs),
        "judges_tied": len(pairs) - len(decided),
        "not_scored": len(decided) - len(compared),
        "missing_ids": len(missing),
        "missing_examples": missing[:5],
        "overall": _accuracy(win.mean(axis=1), lose.mean(axis=1)),
        "by_dimension": {d: _accuracy(win[:, k], lose[:, k]) for k, d in enumerate(DIMENSIONS)},
    }
    if tasks is not None:
        by_task: dict[str, list[int]] = {}
        for row, p in enumerate(compared):
            by_task.setdefault(tasks[p.winner], []).append(row)
        out["by_task"] = {t: _accuracy(win[rows].mean(axis=1), lose[rows].mean(axis=1)) for t, rows in sorted(by_task.items())}
    return out


def agreement_over(pairs: list[Preference], records: Sequence[Record], scores: np.ndarray) -> dict[str, Any]:
    """:func:`preference_agreement` of ``scores`` [N, 4], the rows of ``records`` (joined by id, tasks
    from the records): what ``eval --pairs`` reports for the student and for each ``--compare`` judge."""
    by_id = {r.id: row for r, row in zip(records, scores, strict=True)}
    return preference_agreement(pairs, by_id, {r.id: r.task for r in records})


def accuracy_text(acc: dict[str, Any]) -> str:
    """An accuracy of :func:`preference_agreement` to 3 decimals, or a dash where no pair was compared."""
    return "—" if acc["accuracy"] is None else f"{acc['accuracy']:.3f}"


def preference_markdown(agreement: dict[str, Any]) -> str:
    """The agreement as a Markdown table: overall, per dimension and per task."""

    def cell(acc: dict[str, Any]) -> str:
        return f"{acc['pairs']} | {accuracy_text(acc)} | {acc['ties']}"

    lines = ["| | pairs | accuracy | student ties |", "|---|---:|---:|---:|"]
    lines.append(f"| overall (mean of the dimensions) | {cell(agreement['overall'])} |")
    lines += [f"| {d} | {cell(acc)} |" for d, acc in agreement["by_dimension"].items()]
    lines += [f"| task={t} | {cell(acc)} |" for t, acc in agreement.get("by_task", {}).items()]
    left_out = f"{agreement['judges_tied']} pair(s) the judges tied on"
    if agreement["not_scored"]:
        examples = ", ".join(agreement["missing_examples"])
        left_out += f"; {agreement['not_scored']} pair(s) with an id not among the scored items"
        left_out += f" ({agreement['missing_ids']} ids, e.g. {examples})"
    return "\n".join(lines) + f"\n\nLeft out: {left_out}.\n"
