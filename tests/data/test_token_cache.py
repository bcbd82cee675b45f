"""Token cache: the cached examples are the encoder's, batches from the cache equal batches tokenized on
the fly (bucketed and packed), a changed input makes a new cache, an interrupted build leaves nothing
that is read, and training from the cache gives the same losses."""

from __future__ import annotations

import dataclasses
import gc
import json
from itertools import islice

import jax
import numpy as np
import pytest
from transformers import AutoTokenizer

from omnidistill.cli import main
from omnidistill.config import load_config
from omnidistill.data import token_cache
from omnidistill.data.pipeline import PackSpec, packed_train_dataset, train_dataset
from omnidistill.data.schema import Record
from omnidistill.data.sources import read_records
from omnidistill.data.token_cache import TokenCache, cached_examples
from omnidistill.data.tokenize import RecordEncoder, count_truncated
from omnidistill.runs.checkpoint import read_state_arrays
from omnidistill.train.prepare import run_tokenizer
from omnidistill.train.setup import training_records
from tests.shared_runs import TRAINED_TINY


@pytest.fixture(scope="module")
def encoder(tiny_tokenizer_dir):
    return RecordEncoder(AutoTokenizer.from_pretrained(tiny_tokenizer_dir), max_length=96)


@pytest.fixture(scope="module")
def records(sample_dir):
    return read_records(sample_dir / "train.jsonl")[0]


def assert_same_batches(a, b):
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


@pytest.mark.parametrize("truncation", ["context_first", "right"])
def test_every_cached_example_is_the_encoders(tmp_path, encoder, records, truncation):
    """Batched tokenization (one call per chunk) gives each record's own ids, over-long ones included."""
    encoder = RecordEncoder(encoder.tokenizer, max_length=96, truncation=truncation)
    assert sum(len(encoder.tokenizer(encoder.text(r))["input_ids"]) > 96 for r in records) > 20  # truncation is exercised
    cache, built = cached_examples(records, encoder, tmp_path, split="train")
    assert built and len(cache) == len(records)
    lengths = []
    for i, record in enumerate(records):
        want = encoder(record)
        got = cache[i]
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{record.id}: {key}")
        lengths.append(len(want["input_ids"]))
    assert cache.lengths.tolist() == lengths  # what a packer or bucketer can read without the tokens
    assert not cache.tokens.flags.owndata and not cache.tokens.flags.writeable  # a read-only view of the file's memory map


def test_batches_from_the_cache_equal_batches_tokenized_on_the_fly(tmp_path, encoder, records):
    cache, _ = cached_examples(records, encoder, tmp_path)
    kwargs = dict(global_batch=8, seed=5, buckets=[32, 64, 96])
    assert_same_batches(
        islice(iter(train_dataset(records, encoder, **kwargs).to_iter_dataset()), 40),
        islice(iter(train_dataset(cache, encoder, **kwargs).to_iter_dataset()), 40),
    )


def test_a_changed_input_makes_a_new_cache_and_the_same_input_reuses_it(tmp_path, encoder, records):
    first, built = cached_examples(records, encoder, tmp_path, split="train")
    again, rebuilt = cached_examples(records, encoder, tmp_path, split="train")
    assert built and not rebuilt and again.directory == first.directory
    shorter = RecordEncoder(encoder.tokenizer, max_length=64)
    relabelled = [dataclasses.replace(records[0], labels=(1.0, 1.0, 1.0, 1.0)), *records[1:]]
    right = RecordEncoder(encoder.tokenizer, max_length=96, truncation="right")
    folders = {first.directory}
    for recs, enc in ((records, shorter), (relabelled, encoder), (records, right)):
        cache, built = cached_examples(recs, enc, tmp_path, split="train")
        assert built and cache.directory not in folders
        folders.add(cache.directory)
    assert cached_examples(relabelled, encoder, tmp_path, split="train")[0].labels[0].tolist() == [1.0] * 4


def test_an_interrupted_build_leaves_no_cache(tmp_path, encoder, records, monkeypatch):
    real_save = np.save
    calls = []

    def failing_save(path, array):
        calls.append(path)
        if len(calls) == 3:
            raise OSError("disk full")
        real_save(path, array)

    monkeypatch.setattr(token_cache.np, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        cached_examples(records[:50], encoder, tmp_path, split="train")
    assert list(tmp_path.iterdir()) == []  # no finished folder, no staging folder
    monkeypatch.setattr(token_cache.np, "save", real_save)
    cache, built = cached_examples(records[:50], encoder, tmp_path, split="train")
    assert built and len(TokenCache.open(cache.directory)) == 50


@pytest.mark.slow
def test_prepare_then_train_reads_the_cache_and_trains_identically(tmp_path, repo_root, monkeypatch, trained_tiny):
    """A run reading ``omnidistill prepare``'s cache trains exactly as the session's shared run, which
    tokenized on the fly with the same configuration: the same losses, the same final parameters. Its
    files carry a field of the user's own (``system``, named in ``data.keep_fields``), which training
    reads and ignores."""
    monkeypatch.chdir(repo_root)
    own = ["data.keep_fields=[system]"]
    for split in ("train", "dev", "test"):
        rows = [
            json.loads(line) | {"system": f"sys{i % 3}"} for i, line in enumerate((repo_root / "data" / "sample" / f"{split}.jsonl").open())
        ]
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        own.append(f"data.{split}=[{tmp_path / f'{split}.jsonl'}]")
    # a split whose file is missing stops prepare before any cache is built (it stopped after train's)
    assert main(["prepare", "configs/tiny.yaml", f"data.token_cache={tmp_path / 'tc'}", *own, "data.test=[data/sample/tst.jsonl]"]) == 2
    assert not (tmp_path / "tc").exists()
    assert main(["prepare", "configs/tiny.yaml", f"data.token_cache={tmp_path / 'tc'}", *own[1:]]) == 2  # system is not named
    assert not (tmp_path / "tc").exists()
    # the shared run's shapes and schedule (one bucket; several buckets from the cache:
    # test_batches_from_the_cache_equal_batches_tokenized_on_the_fly): its compiled steps serve this run
    assert main(["prepare", "configs/tiny.yaml", f"data.token_cache={tmp_path / 'tc'}", *own]) == 0
    folders = sorted(p.name.split("-")[0] for p in (tmp_path / "tc").iterdir())
    assert folders == ["dev", "test", "train"]
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "tc").rglob("*.npy")}
    cached = tmp_path / "cached"
    args = [f"train.output_dir={cached}", *TRAINED_TINY, f"data.token_cache={tmp_path / 'tc'}", *own]
    assert main(["train", "configs/tiny.yaml", *args]) == 0
    read_log = lambda run: [
        (r["step"], r["loss"]) for r in map(json.loads, (run / "train_log.jsonl").read_text().splitlines()) if "loss" in r
    ]
    log = read_log(cached)
    assert log == read_log(trained_tiny) and [step for step, _ in log] == [2, 4, 6]
    for a, b in zip(*(jax.tree.leaves(read_state_arrays(run / "checkpoints", 6)) for run in (cached, trained_tiny)), strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "tc").rglob("*.npy")} == before  # reused, not rebuilt


def test_each_process_reads_only_its_rows_and_the_global_batch_is_unchanged(tmp_path, encoder, records):
    cache, _ = cached_examples(records, encoder, tmp_path)
    reads = []

    class CountingTokens(np.ndarray):  # records every slice of the token array (one per row read)
        def __getitem__(self, key):
            if isinstance(key, slice):
                reads.append(key)
            return super().__getitem__(key)

    counting = TokenCache(np.asarray(cache.tokens).view(CountingTokens), cache.offsets, cache.labels, cache.label_mask, cache.label_dist)
    kwargs = dict(global_batch=8, seed=2, buckets=[32, 64, 96])
    steps = 12
    whole_ds = train_dataset(records, encoder, **kwargs)
    whole = [whole_ds[i] for i in range(steps)]  # random access: no read-ahead to count
    for count in (2, 4):
        parts = []
        for index in range(count):
            reads.clear()
            ds = train_dataset(counting, encoder, **kwargs, process_index=index, process_count=count)
            parts.append([ds[i] for i in range(steps)])
            assert len(reads) == steps * 8 // count  # its own rows, not the global batch
        for step in range(steps):
            for key in whole[step]:
                joined = np.concatenate([part[step][key] for part in parts])
                np.testing.assert_array_equal(joined, whole[step][key], err_msg=f"{count} processes, step {step}: {key}")


def test_packed_rows_from_the_cache_hold_each_example_of_an_epoch_once_within_limits(tmp_path, encoder, records):
    cache, _ = cached_examples(records, encoder, tmp_path)
    spec = PackSpec(length=192, max_segments=8, bins=4)
    whole = packed_train_dataset(cache, encoder, global_batch=4, seed=5, pack=spec)
    batches = list(islice(iter(whole), 300))  # about 1.5 epochs at ~2.6 examples per 192-token row
    seen = np.concatenate([b["index"][b["index"] >= 0] for b in batches])
    epoch_rows = next(n for n in range(1, 10_000) if len(np.unique(seen[:n])) < n) - 1  # first repeat ends epoch 0
    assert sorted(seen[:epoch_rows].tolist()) == list(range(len(records)))  # every example once per epoch
    for b in batches:
        for row in range(len(b["input_ids"])):
            slots = b["index"][row] >= 0
            assert slots.sum() <= spec.max_segments and b["segment_ids"][row].max() == slots.sum()
            for slot in np.flatnonzero(slots):  # each segment holds exactly that example's cached tokens
                tokens = b["input_ids"][row][b["segment_ids"][row] == slot + 1]
                np.testing.assert_array_equal(tokens, cache[int(b["index"][row][slot])]["input_ids"])
                np.testing.assert_array_equal(b["labels"][row][slot], cache[int(b["index"][row][slot])]["labels"])
    padding = 1 - sum(b["attention_mask"].sum() for b in batches) / sum(b["attention_mask"].size for b in batches)
    assert padding < 0.1  # first-fit over a window fills rows


def test_packed_batches_split_over_processes_and_resume_exactly(tmp_path, encoder, records):
    cache, _ = cached_examples(records, encoder, tmp_path)
    spec = dict(seed=1, pack=PackSpec(length=192, max_segments=8, bins=4))
    whole = list(islice(iter(packed_train_dataset(cache, encoder, global_batch=4, **spec)), 8))
    parts = [
        list(islice(iter(packed_train_dataset(cache, encoder, global_batch=4, process_index=p, process_count=2, **spec)), 8))
        for p in (0, 1)
    ]
    for step in range(8):
        for key in whole[step]:
            np.testing.assert_array_equal(np.concatenate([parts[0][step][key], parts[1][step][key]]), whole[step][key])
    it = iter(packed_train_dataset(cache, encoder, global_batch=4, **spec))
    for _ in range(5):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(3)]
    again = iter(packed_train_dataset(cache, encoder, global_batch=4, **spec))
    again.set_state(state)
    assert_same_batches([next(again) for _ in range(3)], expected)


def _live_records() -> int:
    gc.collect()
    return sum(isinstance(o, Record) for o in gc.get_objects())


def test_a_training_split_read_through_the_cache_holds_no_record_objects(tmp_path, repo_root, sample_dir, tiny_tokenizer_dir):
    """``training_records`` streams the file through the cache (fingerprint, then build) and keeps none
    of its records; tokenizing on the fly keeps all of them (so the count would see a leak)."""
    overrides = [f"data.train=[{sample_dir / 'train.jsonl'}]", f"model.tokenizer={tiny_tokenizer_dir}"]
    cfg = load_config(repo_root / "configs" / "tiny.yaml", [*overrides, f"data.token_cache={tmp_path}"])
    encoder = RecordEncoder.from_config(run_tokenizer(cfg), cfg.data)
    before = _live_records()
    for _ in range(2):  # built, then reused
        cache, skipped = training_records(cfg, encoder)
        assert isinstance(cache, TokenCache) and len(cache) == 2100 and skipped == 0
        assert _live_records() == before
    plain, _ = training_records(load_config(repo_root / "configs" / "tiny.yaml", overrides), encoder)
    assert _live_records() == before + len(plain) == before + 2100


@pytest.mark.parametrize("truncation", ["context_first", "right"])
def test_the_cache_counts_truncated_inputs_as_count_truncated_does(tmp_path, tiny_tokenizer_dir, records, monkeypatch, truncation):
    short = RecordEncoder(AutoTokenizer.from_pretrained(tiny_tokenizer_dir), max_length=40, truncation=truncation)
    cache, _ = cached_examples(records, short, tmp_path / "all")
    assert cache.truncation == count_truncated(short, records)
    assert 0 < cache.truncation["truncated"] < len(records) and not cache.truncation["sampled"]
    monkeypatch.setattr(token_cache, "TRUNCATION_SAMPLE", 300)  # over 300 records: measured on a seeded sample
    sampled, _ = cached_examples(records, short, tmp_path / "sampled")
    assert sampled.truncation == count_truncated(short, records, sample=300, seed=0) and sampled.truncation["sampled"]
