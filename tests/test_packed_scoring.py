"""Packed scoring (``eval.pack_length``: several items per row, segment ids) gives the padded path's
scores, for every family, and packs what fits while padding what does not."""

import numpy as np
import pytest
from flax import nnx
from transformers import AutoTokenizer

from omnidistill.config import DataConfig, ModelConfig
from omnidistill.data.pipeline import packed_eval_dataset
from omnidistill.data.sources import read_records
from omnidistill.eval.predict import inference_packing
from omnidistill.models.regressor import build_regressor
from omnidistill.scorer import Scorer
from tests.train.test_packing_loss import ARCHS, BASE

POOLING = {"qwen3": "last_token", "qwen2": "last_token", "gemma3": "mean"}  # the decoders' usual poolings
MAX_LENGTH, PACK_LENGTH = 96, 64


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer_dir):
    return AutoTokenizer.from_pretrained(tiny_tokenizer_dir)


@pytest.fixture(scope="module")
def records(sample_dir):
    return read_records(sample_dir / "test.jsonl")[0][:32]


def scorers(family: str, tokenizer, head: str = "linear_sigmoid") -> tuple[Scorer, Scorer]:
    arch = {**BASE, **ARCHS[family], "vocab_size": len(tokenizer), "max_position_embeddings": MAX_LENGTH + 4}
    model = build_regressor(ModelConfig(family=family, pooling=POOLING.get(family, "cls_raw"), head=head, dropout=0.0), arch, seed=0)
    graphdef, state = nnx.split(model, nnx.Param)
    params, data = nnx.to_pure_dict(state), DataConfig(max_length=MAX_LENGTH)
    # one padded shape (length_step = max_length) and one packed shape: two compiles per scorer
    padded = Scorer(graphdef, params, tokenizer, data, batch_size=8, length_step=MAX_LENGTH, batch_tokens=0)  # items, padded
    return padded, Scorer(graphdef, params, tokenizer, data, batch_size=8, length_step=MAX_LENGTH, pack_length=PACK_LENGTH)


@pytest.mark.parametrize("family", list(ARCHS))
def test_packed_scores_equal_padded_scores(family, tokenizer, records):
    padded, packed = scorers(family, tokenizer)
    a, b = padded.score_records(records), packed.score_records(records)
    assert np.max(np.abs(a - b)) <= 1e-5
    assert np.max(np.abs(a - a[::-1])) > 2e-4  # items score apart by far more than the tolerance: a mix-up would show


def test_packed_level_distributions_equal_padded_ones(tokenizer, records):
    padded, packed = scorers("bert", tokenizer, head="classification")
    a, b = padded.predict(records), packed.predict(records)
    assert np.max(np.abs(a.scores - b.scores)) <= 1e-5
    assert np.max(np.abs(a.level_probs - b.level_probs)) <= 1e-5


def test_rows_hold_several_items_and_long_items_stay_padded(tokenizer, records):
    padded, _ = scorers("bert", tokenizer)
    lengths = [min(n, MAX_LENGTH) for n in padded.encoder.full_lengths(records)]
    packing = inference_packing(PACK_LENGTH, 8, MAX_LENGTH)
    batches = list(
        packed_eval_dataset(
            padded.encoder.token_ids_many(records), pad_id=padded.encoder.pad_id, global_batch=8, buckets=(32, 64, 96), packing=packing
        )
    )
    packed = [b for b in batches if "segment_ids" in b]
    seen = np.concatenate([b["index"].reshape(-1) for b in batches])
    assert sorted(seen[seen >= 0].tolist()) == list(range(len(records)))  # every item exactly once
    per_row = [(row > 0).sum() for b in packed for row in b["index"] + 1]
    assert max(per_row) >= 2 and max(per_row) <= packing.max_segments
    for b in packed:  # each slot holds its item's tokens, numbered by slot
        for row, slots in zip(b["segment_ids"], b["index"], strict=True):
            for slot, item in enumerate(slots):
                if item >= 0:
                    assert (row == slot + 1).sum() == lengths[item]
    long = {i for i, n in enumerate(lengths) if n > PACK_LENGTH}
    assert long and long == {int(i) for b in batches if "segment_ids" not in b for i in b["index"] if i >= 0}


def test_warm_up_compiles_the_packed_rows_and_only_the_long_items_buckets(tokenizer, records):
    """A packed scorer's warm-up compiles one packed shape plus the padded lengths of the items longer
    than a row, and scoring then compiles nothing more."""
    padded, packed = scorers("bert", tokenizer)
    packed = Scorer(packed.graphdef, packed.params, tokenizer, packed.data, batch_size=8, length_step=32, pack_length=PACK_LENGTH)
    packed.warm_up(records)
    compiled = packed.program.predict_fn._cache_size()
    long_buckets = {-(-min(n, MAX_LENGTH) // 32) * 32 for n in padded.encoder.full_lengths(records) if min(n, MAX_LENGTH) > PACK_LENGTH}
    assert compiled == 1 + len(long_buckets)
    packed.score_records(records)
    assert packed.program.predict_fn._cache_size() == compiled
