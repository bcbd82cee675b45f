"""Inference batches filled by tokens, for an encoder that runs its layers unpadded (``eval.batch_tokens``).

Items are sorted by token count and added to a batch until its real tokens would pass the budget.
The batch is then padded as usual (to its longest item's length bucket), and ``token_index`` lists
its real slots, so the model's dense layers run on a fixed number of tokens whatever the padding
(:mod:`omnidistill.models.unpadding`). The batch's rows are split into ``groups`` (one per batch
shard); each group has its own share of the budget and its own rows.

Static shapes: for items padded to length S a group has ``rows_for(S)`` rows, enough for the budget
filled with the shortest items that pad to S, and ``token_index`` is [groups, budget / groups]. So the
model compiles once per padded length, as with item-count batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import partial

import grain
import numpy as np

from omnidistill.data.pipeline import bucket_length, inference_examples, process_slice


@dataclasses.dataclass(frozen=True)
class TokenBudget:
    """``tokens`` real tokens per batch at most, in ``groups`` groups of ``tokens / groups``."""

    tokens: int
    groups: int = 1
    buckets: tuple[int, ...] = ()
    """The padded lengths (as for item-count batches)."""

    def __post_init__(self) -> None:
        if self.tokens < 1 or self.groups < 1 or self.tokens % self.groups:
            raise ValueError(f"eval.batch_tokens={self.tokens} must be a positive multiple of the {self.groups} batch shard(s)")
        if self.buckets and self.per_group < max(self.buckets):
            longest = max(self.buckets)
            raise ValueError(f"eval.batch_tokens={self.tokens} leaves {self.per_group} tokens per shard, fewer than an item of {longest}")

    @property
    def per_group(self) -> int:
        return self.tokens // self.groups

    def padded_length(self, length: int) -> int:
        return bucket_length(length, self.buckets)

    def rows_for(self, padded: int) -> int:
        """Rows per group for items padded to ``padded`` tokens: the group's tokens over the shortest
        item that pads to it (one more than the next bucket down), or over half the padded length
        when that is shorter (the first bucket; a group of shorter items closes early)."""
        below = max((b for b in self.buckets if b < padded), default=0)
        return max(1, -(-self.per_group // max(below + 1, padded // 2)))


def token_index(attention_mask: np.ndarray, groups: int, tokens: int) -> np.ndarray:
    """[groups, ``tokens``] int32: each group's real slots of the [B, S] mask (row-major within the
    group's B / groups rows), in order, then zeros. What
    :meth:`omnidistill.models.unpadding.TokenLayout.of` takes. More than ``tokens`` in a group is an error."""
    keep = np.asarray(attention_mask).astype(bool).reshape(groups, -1)
    out = np.zeros((groups, tokens), np.int32)
    for g, row in enumerate(keep):
        real = np.flatnonzero(row)
        if len(real) > tokens:
            raise ValueError(f"group {g} of the batch holds {len(real)} real tokens, more than its {tokens} of eval.batch_tokens")
        out[g, : len(real)] = real
    return out


def plan_batches(lengths: Sequence[int], budget: TokenBudget) -> list[list[list[int]]]:
    """Batches of groups of positions in ``lengths`` (sorted ascending): each group at most
    ``budget.per_group`` tokens and ``rows_for`` (the batch's padded length) items."""
    batches: list[list[list[int]]] = []
    batch: list[list[int]] = [[]]
    used = longest = 0
    for i, n in enumerate(lengths):
        cap = budget.rows_for(budget.padded_length(max(longest, n)))
        fits_rows = all(len(g) <= cap for g in batch)
        if batch[-1] and fits_rows and used + n <= budget.per_group and len(batch[-1]) < cap:
            pass  # joins the current group
        elif batch[-1] and fits_rows and len(batch) < budget.groups:
            batch.append([])  # the next group of this batch
            used = 0
        elif batch[-1]:
            batches.append(batch)
            batch, used, longest = [[]], 0, 0
        batch[-1].append(i)
        used += n
        longest = max(longest, n)
    if batch[-1]:
        batches.append(batch)
    return batches


def collate_groups(groups: Sequence[Sequence[dict[str, np.ndarray]]], *, pad_id: int, budget: TokenBudget) -> dict[str, np.ndarray]:
    """One batch: ``input_ids``/``attention_mask`` [groups * rows, S], ``token_index`` [groups, t],
    ``index`` [groups * rows] (-1 for an empty row)."""
    seq = budget.padded_length(max(len(e["input_ids"]) for group in groups for e in group))
    rows = budget.rows_for(seq)
    ids = np.full((budget.groups * rows, seq), pad_id, np.int32)
    mask = np.zeros((budget.groups * rows, seq), np.int32)
    index = np.full((budget.groups * rows,), -1, np.int32)
    for g, group in enumerate(groups):
        for r, e in enumerate(group):
            n = len(e["input_ids"])
            ids[g * rows + r, :n] = e["input_ids"]
            mask[g * rows + r, :n] = 1
            index[g * rows + r] = e["index"]
    return {"input_ids": ids, "attention_mask": mask, "token_index": token_index(mask, budget.groups, budget.per_group), "index": index}


def token_eval_dataset(
    ids: Sequence[np.ndarray], *, pad_id: int, budget: TokenBudget, process_index: int = 0, process_count: int = 1
) -> grain.MapDataset:
    """One ordered pass over the items' token ``ids`` in batches of at most ``budget.tokens`` real tokens
    (sorted by token count, :func:`plan_batches`); ``index`` maps rows back to items."""
    examples = sorted(inference_examples(ids), key=lambda e: len(e["input_ids"]))
    plan = plan_batches([len(e["input_ids"]) for e in examples], budget)
    batches = [[[examples[i] for i in group] for group in batch] for batch in plan]
    ds = grain.MapDataset.source(batches).map(partial(collate_groups, pad_id=pad_id, budget=budget))
    return ds.map(partial(process_slice, process_index=process_index, process_count=process_count))
