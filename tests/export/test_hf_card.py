"""The model card of an ``hf`` folder (``model.pooling: cls``; a decoder's ``last_token``): each of its snippets (plain ``transformers``,
the ``text-classification`` pipeline, omnidistill) prints the run's own scores, for each tokenizer kind
and input format. The pipeline gives ``sigmoid(logit)`` sorted by value; its snippet puts it back."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.config import DataConfig
from omnidistill.export.hf_export import export_run
from omnidistill.export.model_card import EXAMPLE
from omnidistill.scorer import Scorer
from tests.export.card import card_scores
from tests.export.tiny_runs import RELEASED, make_run

pytest.importorskip("torch")

CASES = [
    ("bert", DataConfig(input_format="sep", max_length=128)),  # WordPiece, the tokenizer's own [SEP] between fields
    ("modernbert", DataConfig(input_format="omniscore", max_length=128)),  # byte-level BPE
    ("deberta_v2", DataConfig(input_format="omniscore", layout=RELEASED, max_length=120)),  # SentencePiece, a task line
    ("qwen3", DataConfig(input_format="omniscore", max_length=128, truncation="right")),  # a decoder: its last token
]
KINDS = {"bert": "wordpiece", "modernbert": "bpe", "deberta_v2": "unigram", "qwen3": "bpe"}


@pytest.mark.parametrize(("family", "data"), CASES, ids=[family for family, _ in CASES])
def test_every_snippet_of_an_hf_card_prints_the_runs_scores(tmp_path, tokenizer_dirs, family, data):
    decoder = family == "qwen3"  # Qwen3ForSequenceClassification: the last non-padding token, a bias-free layer
    pooling, model = ("last_token", {"head_bias": False}) if decoder else ("cls", {})
    run = make_run(tmp_path / "run", family, pooling, tokenizer_dirs[KINDS[family]], data, seed=5, **model)
    assert export_run(run, tmp_path / "hf", verify=False)["format"] == "hf"
    task = ["qa"] if data.layout.task_prefix else None
    ours = list(Scorer.load(run).score(candidates=[EXAMPLE["candidate"]], sources=[EXAMPLE["source"]], tasks=task)[0].values())
    outputs = card_scores(tmp_path / "hf")
    assert len(outputs) == 3  # plain transformers, the pipeline, omnidistill
    for scores in outputs:
        np.testing.assert_allclose(scores, ours, atol=1e-5)
    card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    assert 'pipeline("text-classification"' in card and "pipeline show `sigmoid(logit)`" in card
