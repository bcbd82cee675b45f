"""Tokenization, truncation, bucketed padding, determinism and process sharding of the grain pipeline."""

import grain
import numpy as np
import pytest
from transformers import AutoTokenizer

from omnidistill.data.pipeline import ShuffledBatchIndices, bucket_length, eval_dataset, train_dataset
from omnidistill.data.schema import Record
from omnidistill.data.sources import read_records
from omnidistill.data.tokenize import RecordEncoder, allocate


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer_dir):
    return AutoTokenizer.from_pretrained(tiny_tokenizer_dir)


@pytest.fixture(scope="module")
def records(sample_dir):
    return read_records(sample_dir / "train.jsonl")[0]


def test_input_equals_tokenizing_the_joined_fields(tokenizer, records):
    enc = RecordEncoder(tokenizer, max_length=512)
    for record in records[:20]:
        text = f" {tokenizer.sep_token} ".join(
            t.strip()
            for t in (record.context, record.question, record.title, record.source, record.reference, record.candidate)
            if t and t.strip()
        )
        assert enc(record)["input_ids"].tolist() == tokenizer(text)["input_ids"]


def test_no_task_id_in_input(tokenizer):
    rec = Record(id="x", task="summarization", lang="en", candidate="Bees matter.", source="Bees pollinate crops.")
    ids = RecordEncoder(tokenizer, 64)(rec)["input_ids"]
    assert "summarization" not in tokenizer.decode(ids)


def test_truncation_cuts_context_first_and_keeps_candidate(tokenizer):
    long_source = " ".join(["Paris"] * 300)
    rec = Record(id="x", task="mt", lang="en", candidate="The Moon orbits the Earth.", source=long_source)
    ids = RecordEncoder(tokenizer, 32)(rec)["input_ids"]
    assert len(ids) == 32 and ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    cand = tokenizer("The Moon orbits the Earth.", add_special_tokens=False)["input_ids"]
    assert ids[-1 - len(cand) : -1].tolist() == cand


def test_allocate_longest_first():
    assert allocate([10, 3, 5], 100) == [10, 3, 5]
    out = allocate([50, 10, 8], 30)
    assert sum(out) <= 30 and out[-1] == 8 and out[1] == 10
    assert allocate([5, 100], 20)[-1] == 15  # candidate gets what context leaves


def test_bucket_length():
    assert bucket_length(10, [32, 64]) == 32 and bucket_length(33, [32, 64]) == 64 and bucket_length(70, [32, 64]) == 70


def test_batches_padded_to_bucket_with_label_masks(tokenizer, records):
    enc = RecordEncoder(tokenizer, 192)
    ds = train_dataset(records, enc, global_batch=8, seed=0, buckets=[64, 128, 192])
    for i in range(5):
        batch = ds[i]
        seq = batch["input_ids"].shape[1]
        longest = batch["attention_mask"].sum(1).max()
        assert seq in (64, 128, 192) and longest <= seq and (seq == 64 or longest > seq // 2 or seq == 192)
        assert ((batch["input_ids"] == enc.pad_id) | (batch["attention_mask"] == 1)).all()
        for row, idx in enumerate(batch["index"]):
            expected = [v is not None for v in records[idx].labels]
            assert batch["label_mask"][row].astype(bool).tolist() == expected


def test_deterministic_per_seed_and_reshuffled_per_epoch(tokenizer, records):
    enc = RecordEncoder(tokenizer, 128)
    a = train_dataset(records, enc, global_batch=8, seed=3, buckets=[128])
    b = train_dataset(records, enc, global_batch=8, seed=3, buckets=[128])
    c = train_dataset(records, enc, global_batch=8, seed=4, buckets=[128])
    assert all((a[i]["index"] == b[i]["index"]).all() for i in range(4))
    assert any((a[i]["index"] != c[i]["index"]).any() for i in range(4))
    per_epoch = len(records) // 8
    epoch0 = np.concatenate([a[i]["index"] for i in range(per_epoch)])
    assert len(set(epoch0.tolist())) == len(epoch0)  # no repeats within an epoch
    epoch1 = np.concatenate([a[i]["index"] for i in range(per_epoch + 1, 2 * per_epoch)])
    assert not np.array_equal(epoch0[: len(epoch1)], epoch1)


def test_process_slices_partition_the_global_batch(tokenizer, records):
    enc = RecordEncoder(tokenizer, 128)
    full = train_dataset(records, enc, global_batch=8, seed=0, buckets=[64, 128])
    parts = [train_dataset(records, enc, global_batch=8, seed=0, buckets=[64, 128], process_index=p, process_count=4) for p in range(4)]
    for i in range(3):
        joined = {k: np.concatenate([p[i][k] for p in parts]) for k in full[i]}
        for k in full[i]:
            np.testing.assert_array_equal(joined[k], full[i][k])


def test_eval_dataset_covers_every_record_once(tokenizer, records):
    enc = RecordEncoder(tokenizer, 128)
    ds = eval_dataset(enc.token_ids_many(records[:37]), pad_id=enc.pad_id, global_batch=8, buckets=[64, 128])
    seen = np.concatenate([b["index"][b["example_mask"] > 0] for b in ds])
    assert sorted(seen.tolist()) == list(range(37))


def test_reader_threads_do_not_change_the_batches(tokenizer, records):
    import grain

    enc = RecordEncoder(tokenizer, 128)
    ds = train_dataset(records, enc, global_batch=8, seed=5, buckets=[64, 128])
    one = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=1)))
    many = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=8, prefetch_buffer_size=64)))
    for _ in range(6):
        a, b = next(one), next(many)
        np.testing.assert_array_equal(a["index"], b["index"])
        np.testing.assert_array_equal(a["input_ids"], b["input_ids"])


@pytest.mark.parametrize(("count", "global_batch", "seed"), [(37, 8, 0), (5, 16, 7), (2100, 16, 2**32 - 1)])
def test_batch_indices_equal_grains_shuffle_across_epochs(count, global_batch, seed):
    """The cached reader's one-call-per-batch indices are grain's shuffled, repeated, batched stream,
    including batches that straddle two epochs (count not a multiple of the batch) and seed wrap-around."""
    grains = grain.MapDataset.source(range(count)).shuffle(seed=seed).repeat(None).batch(global_batch, drop_remainder=True)
    ours = ShuffledBatchIndices(count, seed=seed, global_batch=global_batch)
    for b in [*range(12), 131, 10**6]:
        np.testing.assert_array_equal(ours[b], np.asarray(grains[b]), err_msg=f"batch {b}")


def test_process_rows_split_a_global_batch_or_refuse_by_name():
    from omnidistill.data.process_share import process_rows

    assert [process_rows(8, i, 4) for i in range(4)] == [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)]
    with pytest.raises(ValueError, match="global batch of 8 rows does not split over 3 processes"):
        process_rows(8, 0, 3)
    with pytest.raises(ValueError, match="process 2 is not one of 2 processes"):
        process_rows(8, 2, 2)


def test_training_batches_read_ahead_at_most_the_prefetch_buffer_and_stop_when_closed(repo_root, monkeypatch):
    """The training iterator tokenizes at most ``data.prefetch_buffer`` (32) batches beyond those taken
    (grain's buffer holds the batches in flight too), and closing it (``train`` does as it finishes)
    stops the readers.
    With grain's default buffer of 500 a 6-step run tokenized up to 500 batches in its threads, which
    competed with the step's compile for the CPU."""
    import threading
    import time

    from omnidistill.config import load_config
    from omnidistill.models.loader import load_tokenizer
    from omnidistill.train.setup import training_batches

    cfg = load_config(repo_root / "configs" / "tiny.yaml", [f"model.tokenizer={repo_root}/assets/tiny-wordpiece"])
    encoder = RecordEncoder.from_config(load_tokenizer(cfg.model.tokenizer), cfg.data)
    records = read_records(repo_root / "data" / "sample" / "train.jsonl")[0]
    lock, encoded, encode = threading.Lock(), [0], RecordEncoder.__call__

    def counted(self, record):
        with lock:
            encoded[0] += 1
        return encode(self, record)

    def settled() -> int:  # the count once the readers have stopped adding to it
        last, deadline = -1, time.monotonic() + 30
        while encoded[0] != last and time.monotonic() < deadline:
            last = encoded[0]
            time.sleep(0.5)
        return last

    monkeypatch.setattr(RecordEncoder, "__call__", counted)
    batches = training_batches(cfg, records, encoder)
    for _ in range(3):
        next(batches)
    assert settled() <= (3 + 32) * cfg.train.batch_size
    batches.close()
    closed = settled()
    time.sleep(1.0)
    assert encoded[0] == closed
