"""Packed training rows: every example intact in its own segment, little padding, deterministic,
resumable, and split over processes like plain batches."""

import pickle
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from transformers import AutoTokenizer

from omnidistill.data.packing import PackingPlan
from omnidistill.data.pipeline import PackSpec, packed_train_dataset
from omnidistill.data.sources import read_records
from omnidistill.data.tokenize import RecordEncoder


@pytest.fixture(scope="module")
def encoder(tiny_tokenizer_dir):
    return RecordEncoder(AutoTokenizer.from_pretrained(tiny_tokenizer_dir), 192)


@pytest.fixture(scope="module")
def records(sample_dir):
    return read_records(sample_dir / "train.jsonl")[0]


def take(ds, n, state=None):
    it = iter(ds)
    if state is not None:
        it.set_state(state)
    return [next(it) for _ in range(n)], it.get_state()


def test_each_segment_is_one_whole_example_with_its_labels(encoder, records):
    ds = packed_train_dataset(records, encoder, global_batch=4, seed=0, pack=PackSpec(256, max_segments=6, bins=8))
    batches, _ = take(ds, 5)
    for batch in batches:
        for row in range(4):
            seg, ids = batch["segment_ids"][row], batch["input_ids"][row]
            used = int(batch["example_mask"][row].sum())
            assert 1 <= used <= 6 and seg.max() == used
            assert (batch["index"][row][used:] == -1).all() and (batch["labels"][row][used:] == 0).all()
            real = seg > 0
            assert real[: real.sum()].all() and (np.diff(seg[real]) >= 0).all()  # segments in order, padding last
            for slot in range(used):
                record = records[batch["index"][row, slot]]
                expected = encoder(record)
                np.testing.assert_array_equal(ids[seg == slot + 1], expected["input_ids"])
                np.testing.assert_array_equal(batch["label_mask"][row, slot], expected["label_mask"])
                np.testing.assert_array_equal(batch["labels"][row, slot], expected["labels"])
            assert (batch["attention_mask"][row] == (seg > 0)).all()


def test_padding_under_ten_percent_on_the_sample_distribution(encoder, records):
    """~3 passes over the shipped sample's length distribution, 512-token rows."""
    ds = packed_train_dataset(records, encoder, global_batch=8, seed=1, pack=PackSpec(512))
    batches, _ = take(ds, 100)
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    total = sum(b["attention_mask"].size for b in batches)
    assert 1 - real / total < 0.10
    seen = np.concatenate([b["index"][b["index"] >= 0] for b in batches])
    assert len(seen) > 2 * len(records)


def test_no_repeats_within_the_first_epoch_and_seeded(encoder, records):
    spec = PackSpec(512, bins=16)
    a, _ = take(packed_train_dataset(records, encoder, global_batch=8, seed=3, pack=spec), 20)
    b, _ = take(packed_train_dataset(records, encoder, global_batch=8, seed=3, pack=spec), 20)
    c, _ = take(packed_train_dataset(records, encoder, global_batch=8, seed=4, pack=spec), 20)
    first = np.concatenate([x["index"][x["index"] >= 0] for x in a])
    assert len(first) < len(records) and len(set(first.tolist())) == len(first)
    assert all(np.array_equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x["index"], y["index"]) for x, y in zip(a, c, strict=True))


def test_resume_from_iterator_state_sees_the_same_rows(encoder, records):
    ds = packed_train_dataset(records, encoder, global_batch=4, seed=2, pack=PackSpec(512, bins=8))
    _, state = take(ds, 7)
    straight, _ = take(ds, 12)
    after, _ = take(ds, 5, state)
    for x, y in zip(straight[7:], after, strict=True):
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])


def test_process_slices_partition_the_packed_batch(encoder, records):
    spec = PackSpec(512, bins=8)
    full, _ = take(packed_train_dataset(records, encoder, global_batch=4, seed=0, pack=spec), 3)
    parts = [
        take(packed_train_dataset(records, encoder, global_batch=4, seed=0, pack=spec, process_index=p, process_count=2), 3)[0]
        for p in (0, 1)
    ]
    for i in range(3):
        for k in full[i]:
            np.testing.assert_array_equal(np.concatenate([parts[0][i][k], parts[1][i][k]]), full[i][k])


def test_rows_shorter_than_an_example_are_refused(encoder, records):
    with pytest.raises(ValueError, match=r"data\.pack_length=128 is shorter than data\.max_length=192"):
        packed_train_dataset(records, encoder, global_batch=4, seed=0, pack=PackSpec(128))


def test_worker_processes_resume_exactly(encoder, records):
    from omnidistill.data.pipeline import with_workers

    ds = with_workers(packed_train_dataset(records, encoder, global_batch=4, seed=0, pack=PackSpec(256, bins=8)), 2)
    it = iter(ds)
    for _ in range(3):
        next(it)
    state = it.get_state()
    straight = [next(it) for _ in range(4)]
    it.close()
    again = iter(ds)
    again.set_state(state)
    for x in straight:
        y = next(again)
        for k in x:
            np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]))
        assert int(np.asarray(x["example_mask"]).sum()) >= 4
    again.close()


class _SlowPlan(PackingPlan):
    """Planning an epoch takes long enough for the reading threads to meet inside it."""

    def _plan_epoch(self, epoch):
        time.sleep(0.02)
        return super()._plan_epoch(epoch)


def test_a_packing_plan_read_from_many_threads_is_the_sequential_plan():
    """grain reads rows from a thread pool: the rows must not depend on which thread plans an epoch
    first (before the lock, two threads planned the same epoch and the epochs after it shifted)."""
    lengths = np.random.default_rng(0).integers(5, 90, size=300).astype(np.int32)
    spec = dict(length=192, max_segments=8, seed=5, window=32)
    sequential = PackingPlan(lengths, **spec)
    want = [sequential.row(n).tolist() for n in range(600)]
    shared = _SlowPlan(lengths, **spec)
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda n: shared.row(n).tolist(), reversed(range(600))))[::-1]
    assert got == want
    again = pickle.loads(pickle.dumps(shared))  # grain worker processes get a copy with a lock of its own
    assert [again.row(n).tolist() for n in range(600)] == want
