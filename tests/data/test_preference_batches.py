"""``data.pairs``: the judged pairs are joined to their candidates by id (winner first), and each step's
pairs are a fresh permutation per pass, the same for any process count and on every call."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import AutoTokenizer

from omnidistill.config import DataConfig
from omnidistill.data.pipeline import bucket_length
from omnidistill.data.preference_batches import PreferenceBatches, load_training_pairs
from omnidistill.data.schema import DataError
from omnidistill.data.sources import read_records
from omnidistill.data.tokenize import RecordEncoder


@pytest.fixture(scope="module")
def encoder(repo_root):
    return RecordEncoder(AutoTokenizer.from_pretrained(repo_root / "assets" / "tiny-wordpiece"), 128)


def write_lines(path, items):
    path.write_text("".join(json.dumps(x) + "\n" for x in items), encoding="utf-8")
    return path


def items_file(tmp_path, ids=("a", "b", "c", "d")):
    return write_lines(
        tmp_path / "items.jsonl", [{"id": i, "task": "qa", "lang": "en", "question": "Q?", "candidate": f"answer {i}"} for i in ids]
    )


def test_pairs_join_their_candidates_by_id_winner_first(tmp_path, encoder):
    items = items_file(tmp_path)
    pairs = write_lines(
        tmp_path / "pairs.jsonl",
        [
            {"id_a": "a", "id_b": "b", "winner": "b"},
            {"id_a": "c", "id_b": "a", "winner": "c"},
            {"id_a": "b", "id_b": "d", "winner": None},  # the judges tied: left out
        ],
    )
    loaded = load_training_pairs(DataConfig(pairs=str(pairs), pair_items=[str(items)]), encoder)
    assert loaded.counts() == {"used": 2, "tied": 1, "unknown_ids": 0}
    records = {r.id: r for r in read_records(items, require_labels=False)[0]}
    tokens = [[t.tolist() for t in (loaded.tokens[w], loaded.tokens[v])] for w, v in zip(loaded.winners, loaded.losers, strict=True)]
    assert tokens == [[encoder.token_ids(records[i]).tolist() for i in pair] for pair in (("b", "a"), ("c", "a"))]
    assert len(loaded.tokens) == 3  # a, b and c, once each; d is only in the tied pair


def test_a_pair_naming_an_unknown_id_is_refused_by_line_and_field_or_skipped_and_counted(tmp_path, encoder):
    items = items_file(tmp_path)
    pairs = write_lines(tmp_path / "pairs.jsonl", [{"id_a": "a", "id_b": "b", "winner": "a"}, {"id_a": "c", "id_b": "zz", "winner": "c"}])
    data = DataConfig(pairs=str(pairs), pair_items=[str(items)])
    with pytest.raises(DataError, match=rf"pairs.jsonl:2: id_b 'zz' is not the id of a record in data.pair_items \({items}\)"):
        load_training_pairs(data, encoder)
    data.skip_invalid = True
    assert load_training_pairs(data, encoder).counts() == {"used": 1, "tied": 0, "unknown_ids": 1}


def test_repeated_paired_ids_and_files_without_a_winner_are_refused(tmp_path, encoder):
    """A paired id twice in the items is refused with both lines; a repeat no pair names is the files'
    own (training counts such repeats and goes on)."""
    pairs = write_lines(tmp_path / "pairs.jsonl", [{"id_a": "a", "id_b": "b", "winner": "a"}])
    repeated = items_file(tmp_path, ids=("a", "b", "c", "a", "c"))
    with pytest.raises(DataError, match=r"id 'a' at .*items.jsonl:4 repeats .*items.jsonl:1: .*joins its pairs to data.pair_items"):
        load_training_pairs(DataConfig(pairs=str(pairs), pair_items=[str(repeated)]), encoder)
    unpaired = items_file(tmp_path, ids=("a", "b", "c", "c"))
    assert load_training_pairs(DataConfig(pairs=str(pairs), pair_items=[str(unpaired)]), encoder).counts()["used"] == 1
    tied = write_lines(tmp_path / "tied.jsonl", [{"id_a": "a", "id_b": "b", "winner": None}])
    with pytest.raises(DataError, match=r"tied.jsonl: no pair with a winner to train on \(1 tied, 0 with an unknown id\)"):
        load_training_pairs(DataConfig(pairs=str(tied), train=[str(items_file(tmp_path))]), encoder)  # data.train by default


@pytest.fixture(scope="module")
def sample_pairs(repo_root, encoder):
    sample = repo_root / "data" / "sample"
    return load_training_pairs(DataConfig(pairs=str(sample / "pairs" / "train.jsonl"), train=[str(sample / "train.jsonl")]), encoder)


def rows_of(batch):
    """Each pair of a batch as (winner's token ids, loser's), read back through the attention mask."""
    ids, attention = batch["pair_input_ids"], batch["pair_attention_mask"]
    return [tuple(tuple(ids[p, s, attention[p, s] > 0].tolist()) for s in range(2)) for p in range(ids.shape[0])]


def test_a_pass_over_the_pairs_takes_each_once_and_the_next_pass_is_another_order(sample_pairs):
    assert len(sample_pairs) == 1000  # the sample's 1,080 pairs less its 80 ties
    batches = PreferenceBatches(sample_pairs, pad_id=0, buckets=[64, 128], global_pairs=8, seed=3)
    every = [
        tuple(tuple(sample_pairs.tokens[i].tolist()) for i in (w, v))
        for w, v in zip(sample_pairs.winners, sample_pairs.losers, strict=True)
    ]
    first = [row for t in range(125) for row in rows_of(batches[t])]
    assert sorted(first) == sorted(every)
    second = [row for t in range(125, 250) for row in rows_of(batches[t])]
    assert sorted(second) == sorted(every) and second != first
    for t in (0, 7, 130):
        batch = batches[t]
        lengths = batch["pair_attention_mask"].sum(-1)
        assert batch["pair_input_ids"].shape[-1] == bucket_length(int(lengths.max()), [64, 128])
        # the mask is each candidate's tokens from the start, and padding is the pad id
        assert np.array_equal(batch["pair_attention_mask"], np.arange(batch["pair_input_ids"].shape[-1]) < lengths[..., None])
        assert np.all(batch["pair_input_ids"][batch["pair_attention_mask"] == 0] == 0)


def test_a_step_has_the_same_pairs_on_every_call_and_for_any_process_count(sample_pairs):
    """What lets a resumed run continue the same pairs with nothing in its checkpoint, and several hosts
    feed one global batch: batch t depends on the seed and t alone."""
    one = PreferenceBatches(sample_pairs, pad_id=0, buckets=[64, 128], global_pairs=8, seed=3)
    again = PreferenceBatches(sample_pairs, pad_id=0, buckets=[64, 128], global_pairs=8, seed=3)
    for t in (0, 1, 200):
        whole = one[t]
        for key, value in again[t].items():
            np.testing.assert_array_equal(value, whole[key])
        shares = [
            PreferenceBatches(sample_pairs, pad_id=0, buckets=[64, 128], global_pairs=8, seed=3, process_index=i, process_count=4)[t]
            for i in range(4)
        ]
        for key, value in whole.items():
            np.testing.assert_array_equal(np.concatenate([s[key] for s in shares]), value)
    other_seed = PreferenceBatches(sample_pairs, pad_id=0, buckets=[64, 128], global_pairs=8, seed=4)
    assert rows_of(other_seed[0]) != rows_of(one[0])


def test_fewer_pairs_than_a_step_takes_are_refused(sample_pairs):
    with pytest.raises(ValueError, match=r"1000 judged pairs are fewer than one step's train\.pair_batch_size=1024"):
        PreferenceBatches(sample_pairs, pad_id=0, buckets=[64], global_pairs=1024, seed=0)
