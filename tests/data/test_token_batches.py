"""Inference batches filled by tokens (``eval.batch_tokens``): every item once, within the budget, and one
compiled shape per padded length."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.data.token_batches import TokenBudget, collate_groups, plan_batches
from omnidistill.models.unpadding import TokenLayout

BUCKETS = (32, 64, 96, 128)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_groups_stay_within_the_budget_and_hold_every_item_once(groups):
    rng = np.random.default_rng(groups)
    lengths = sorted(np.minimum(rng.lognormal(np.log(40), 0.7, size=400).astype(int) + 2, 128).tolist())
    budget = TokenBudget(256 * groups, groups, BUCKETS)
    batches = plan_batches(lengths, budget)
    seen = [i for batch in batches for group in batch for i in group]
    assert seen == list(range(len(lengths)))  # every item once, in length order
    shapes = set()
    for batch in batches:
        assert 1 <= len(batch) <= groups
        padded = budget.padded_length(max(lengths[i] for group in batch for i in group))
        for group in batch:
            assert sum(lengths[i] for i in group) <= budget.per_group
            assert len(group) <= budget.rows_for(padded)
        shapes.add((budget.rows_for(padded), padded))
    assert len(shapes) == len({budget.padded_length(n) for n in lengths})  # one compiled shape per padded length
    # the budget is what fills batches: all but the last group of each length hold most of it
    full = [sum(lengths[i] for i in group) for batch in batches[:-1] for group in batch]
    assert np.median(full) >= 0.85 * budget.per_group


def test_rows_per_group_hold_the_budget_of_the_shortest_items_of_a_length():
    budget = TokenBudget(256, 1, BUCKETS)
    assert budget.rows_for(64) == 8  # items of 33..64 tokens: at most 256 // 33 + 1
    assert budget.rows_for(128) == 3  # 97..128 tokens
    assert budget.rows_for(32) == 16  # the first bucket: items of 16 tokens or more fill it; shorter close it early
    with pytest.raises(ValueError, match="leaves 64 tokens per shard, fewer than an item of 128"):
        TokenBudget(128, 2, BUCKETS)


def test_a_batch_lists_its_real_tokens_per_group():
    budget = TokenBudget(60, 2, (8, 16, 24, 30))
    examples = [{"input_ids": np.arange(1, n + 1), "index": i} for i, n in enumerate([3, 5, 9, 12, 16])]
    batch = collate_groups([examples[:3], examples[3:]], pad_id=0, budget=budget)
    assert budget.rows_for(16) == 4  # 30 tokens per group over items of at least 9
    assert batch["input_ids"].shape == (8, 16) and batch["token_index"].shape == (2, 30)
    assert batch["index"].tolist() == [0, 1, 2, -1, 3, 4, -1, -1]
    flat = np.asarray(TokenLayout.of(batch["attention_mask"], batch["token_index"]).unpad(batch["input_ids"][..., None]))[..., 0]
    np.testing.assert_array_equal(flat[0, :17], np.concatenate([np.arange(1, 4), np.arange(1, 6), np.arange(1, 10)]))
    np.testing.assert_array_equal(flat[1, :28], np.concatenate([np.arange(1, 13), np.arange(1, 17)]))
