"""Export to a Hugging Face folder, import from one, round trips, verification, refusals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from omnidistill.cli import main
from omnidistill.export.hf_export import ExportError, export_run, export_tensors
from omnidistill.export.hf_import import import_hf
from omnidistill.export.model_card import EXAMPLE
from omnidistill.models.published import PublishedFormatError
from omnidistill.models.weights import WeightMismatchError
from omnidistill.scorer import Scorer
from tests.export.card import card_scores
from tests.models.hf_fixtures import TINY_BERT, save_tiny, save_tiny_bert
from tests.models.test_deberta_v2_parity import V3
from tests.models.test_gemma3_parity import TINY as GEMMA3
from tests.models.test_modernbert_parity import TINY as MODERNBERT
from tests.models.test_qwen2_parity import TINY as QWEN2
from tests.models.test_qwen3_parity import TINY as QWEN3
from tests.models.test_xlm_roberta_parity import TINY as XLMR

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture()
def hf_classifier(tmp_path, tiny_tokenizer_dir):
    """A random 4-label BertForSequenceClassification with the tiny tokenizer."""
    folder = save_tiny_bert(tmp_path / "hf", classification=True, vocab_size=1024)
    transformers.AutoTokenizer.from_pretrained(tiny_tokenizer_dir).save_pretrained(folder)
    return folder


FAMILY_CLASSIFIERS = {
    "bert": lambda folder: save_tiny_bert(folder, classification=True, vocab_size=1024),
    "deberta_v2": lambda folder: save_tiny(folder, "DebertaV2", V3, classification=True, perturb="LayerNorm", vocab_size=1024),
    "modernbert": lambda folder: save_tiny(folder, "ModernBert", MODERNBERT, classification=True, perturb="norm", vocab_size=1024),
    "xlm_roberta": lambda folder: save_tiny(folder, "XLMRoberta", XLMR, classification=True, perturb="LayerNorm", vocab_size=1024),
    # a decoder: its bias-free score layer on the last non-padding token (model.head_bias: false, last_token)
    "qwen3": lambda folder: save_tiny(folder, "Qwen3", QWEN3, classification=True, perturb="norm", vocab_size=1024),
    "qwen2": lambda folder: save_tiny(folder, "Qwen2", QWEN2, classification=True, perturb="bias", vocab_size=1024),
    "gemma3": lambda folder: save_tiny(folder, "Gemma3Text", GEMMA3, classification=True, perturb="norm", vocab_size=1024),
}


@pytest.mark.parametrize("family", sorted(FAMILY_CLASSIFIERS))
def test_import_then_export_round_trips_tensors_exactly(tmp_path, tiny_tokenizer_dir, family):
    hf_classifier = FAMILY_CLASSIFIERS[family](tmp_path / "hf")
    transformers.AutoTokenizer.from_pretrained(tiny_tokenizer_dir).save_pretrained(hf_classifier)
    summary = import_hf(str(hf_classifier), tmp_path / "run")
    assert summary["family"] == family and summary["random_init"] == []
    result = export_run(tmp_path / "run", tmp_path / "out")
    assert result["verified"] and result["max_abs_diff"] < 1e-5
    original = load_file(str(hf_classifier / "model.safetensors"))
    exported = load_file(str(tmp_path / "out" / "model.safetensors"))
    original = {k: v for k, v in original.items() if not k.endswith("position_ids")}
    assert set(exported) == set(original)
    for key, value in original.items():
        np.testing.assert_array_equal(exported[key], value, err_msg=key)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert len(config["id2label"]) == 4 and config["problem_type"] == "multi_label_classification"
    assert list(config["id2label"].values()) == ["informativeness", "clarity", "plausibility", "faithfulness"]
    assert config["architectures"][0].endswith("ForSequenceClassification")
    reloaded = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "out")
    assert reloaded.config.model_type == transformers.AutoConfig.from_pretrained(hf_classifier).model_type


def test_trained_sharded_checkpoint_exports_and_scores_the_same(tmp_path, trained_tiny, capfd):
    pytest.importorskip("omniscore")  # the default (paper) head exports in its format
    from transformers.utils import logging as hf_logging

    run = trained_tiny  # trained on a data 1 x fsdp 8 mesh
    verbosity = hf_logging.get_verbosity()
    capfd.readouterr()
    assert main(["export", str(run), str(tmp_path / "hf"), "--verify", "on"]) == 0
    # the check loads the folder as the omniscore package does, without its bars and its own deprecation warning
    printed = capfd.readouterr()
    assert "verified with omniscore.OmniScorer" in printed.out
    assert "Loading weights" not in printed.err and "deprecated" not in printed.err, printed.err
    assert hf_logging.get_verbosity() == verbosity and hf_logging.is_progress_bar_enabled()
    # Every snippet of the model card (plain transformers, omnidistill) prints the run's own scores:
    ours = list(Scorer.load(run).score(candidates=[EXAMPLE["candidate"]], sources=[EXAMPLE["source"]])[0].values())
    outputs = card_scores(tmp_path / "hf")
    assert len(outputs) == 3  # the paper's head exports as omniscore: the package, plain transformers, omnidistill
    for scores in outputs:
        np.testing.assert_allclose(scores, ours, atol=1e-5)
    assert "data/sample/train.jsonl" in (tmp_path / "hf" / "README.md").read_text()


def test_verification_failure_is_reported(tmp_path, hf_classifier, monkeypatch):
    import_hf(str(hf_classifier), tmp_path / "run")
    from omnidistill.export import hf_export

    real = hf_export.flax_to_hf

    def corrupt(params, table):
        out = real(params, table)
        out["classifier.bias"] = out["classifier.bias"] + 1.0
        return out

    monkeypatch.setattr(hf_export, "flax_to_hf", corrupt)
    with pytest.raises(ExportError, match="differs from the JAX model"):
        export_run(tmp_path / "run", tmp_path / "out", verify=True)
    assert not (tmp_path / "out").exists()  # nothing half-written under the final name


def test_non_standard_head_and_non_finite_values_are_refused():
    with pytest.raises(ExportError, match="has no published equivalent"):
        export_tensors("bert", None, {}, "mean", "shared_mlp")
    with pytest.raises(ExportError, match="export it with --format omniscore"):
        export_tensors("bert", None, {}, "cls_raw", "linear_sigmoid")
    from omnidistill.models.bert.config import BertConfig

    arch = BertConfig(
        vocab_size=4, hidden_size=4, num_hidden_layers=0, num_attention_heads=1, intermediate_size=4, max_position_embeddings=4
    )
    params = {
        "encoder": {
            "embeddings": {
                "word_embeddings": {"embedding": np.zeros((4, 4))},
                "position_embeddings": {"embedding": np.zeros((4, 4))},
                "token_type_embeddings": {"embedding": np.zeros((2, 4))},
                "layer_norm": {"scale": np.ones(4), "bias": np.zeros(4)},
            }
        },
        "pooler": {"dense": {"kernel": np.full((4, 4), np.nan), "bias": np.zeros(4)}},
        "head": {"linear": {"kernel": np.zeros((4, 4)), "bias": np.zeros(4)}},
    }
    with pytest.raises(ExportError, match=r"non-finite values in: bert\.pooler\.dense\.weight"):
        export_tensors("bert", arch, params, "cls", "linear_sigmoid")


def test_a_model_built_from_shapes_must_get_every_parameter():
    """``abstract_regressor`` (how checkpoints and exports are loaded) holds no values: ``set_params``
    refuses to leave a parameter without one, naming it, and given all of them the model is complete."""
    import jax
    from flax import nnx

    from omnidistill.config import ModelConfig
    from omnidistill.models.hf_io import set_params
    from omnidistill.models.regressor import abstract_regressor

    tiny = dict(model_type="bert", hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8, vocab_size=9)
    model = abstract_regressor(ModelConfig(family="bert"), tiny)
    full = jax.tree.map(lambda s: np.ones(s.shape, s.dtype), nnx.to_pure_dict(nnx.state(model, nnx.Param)))
    with pytest.raises(ValueError, match=r"^head/linear/\w+: no value .* \(2 unset\)"):
        set_params(model, {k: v for k, v in full.items() if k != "head"})
    set_params(model, full)
    assert all(isinstance(x, jax.Array) and float(x.min()) == 1.0 for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def test_a_model_built_from_shapes_never_asks_a_tracer_for_its_sharding(monkeypatch):
    """The abstract build draws its RNG keys without flax's traced counter update, which asks a tracer
    for its ``sharding``: JAX answers with an error whose message walks every operation traced so far,
    which made the build quadratic in the model's size (BERT-large: 2.6 s, docs/scoring.md). The model
    has the structure, shapes and dtypes of a randomly initialised one."""
    import jax
    import jax._src.core as jax_core
    from flax import nnx

    from omnidistill.config import ModelConfig
    from omnidistill.models.regressor import abstract_regressor, build_regressor

    asked, answer = [], jax_core.Tracer.sharding.fget

    def counted(tracer):
        asked.append(tracer)
        return answer(tracer)

    monkeypatch.setattr(jax_core.Tracer, "sharding", property(counted))
    cfg = ModelConfig(family="bert", dropout=0.0)
    tiny = dict(model_type="bert", hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=8, vocab_size=9)
    graphdef, shapes = nnx.split(abstract_regressor(cfg, tiny))
    assert asked == []
    real_graphdef, real = nnx.split(build_regressor(cfg, tiny))
    assert graphdef == real_graphdef
    assert jax.tree.map(lambda x: (x.shape, x.dtype), shapes) == jax.tree.map(lambda x: (x.shape, x.dtype), real)


def test_import_lists_missing_and_unexpected_tensors(tmp_path, hf_classifier):
    tensors = load_file(str(hf_classifier / "model.safetensors"))
    tensors["bert.encoder.layer.0.attention.self.extra.weight"] = np.zeros((2, 2), np.float32)
    del tensors["bert.encoder.layer.1.output.dense.bias"]
    save_file(tensors, str(hf_classifier / "model.safetensors"))
    with pytest.raises(WeightMismatchError) as err:
        import_hf(str(hf_classifier), tmp_path / "run")
    assert "missing tensors: bert.encoder.layer.1.output.dense.bias" in str(err.value)
    assert "unexpected tensors: bert.encoder.layer.0.attention.self.extra.weight" in str(err.value)


def test_bare_backbone_imports_encoder_and_reports_random_head(tmp_path, tiny_tokenizer_dir, hf_classifier, caplog):
    folder = save_tiny_bert(tmp_path / "backbone", vocab_size=1024)
    transformers.AutoTokenizer.from_pretrained(tiny_tokenizer_dir).save_pretrained(folder)
    summary = import_hf(str(folder), tmp_path / "run")
    assert summary["random_init"] == ["classifier.weight", "classifier.bias"]
    # scoring it (score, eval and export load it the same way) says its head is random, as transformers would
    with caplog.at_level("WARNING", logger="omnidistill.runs.load"):
        Scorer.load(tmp_path / "run")
    assert "with classifier.weight, classifier.bias at random initialisation and not trained" in caplog.text
    caplog.clear()
    import_hf(str(hf_classifier), tmp_path / "complete")
    with caplog.at_level("WARNING", logger="omnidistill.runs.load"):
        Scorer.load(tmp_path / "complete")
    assert "random initialisation" not in caplog.text
    with pytest.raises(PublishedFormatError, match=r"architectures=\['BertModel'\]: a backbone with no scoring head"):
        import_hf(str(folder), tmp_path / "run2", require_head=True)


def test_a_folder_without_four_scores_is_refused_by_its_config_field(tmp_path, tiny_tokenizer_dir, sample_dir, capsys):
    """A backbone (``BertModel``, as a sentence-transformers folder has it) and a classifier of
    transformers' default 2 labels (v5 writes no ``id2label`` for it) are refused by ``score`` and
    ``import`` naming ``config.json``'s field, where a list of missing tensors or of shapes came out."""
    backbone = save_tiny_bert(tmp_path / "backbone", vocab_size=1024)
    two = tmp_path / "two"
    transformers.BertForSequenceClassification(transformers.BertConfig(**{**TINY_BERT, "vocab_size": 1024})).save_pretrained(two)
    assert "id2label" not in json.loads((two / "config.json").read_text())
    for folder in (backbone, two):
        transformers.AutoTokenizer.from_pretrained(tiny_tokenizer_dir).save_pretrained(folder)
    with pytest.raises(PublishedFormatError, match=r"backbone/config.json: architectures=\['BertModel'\]: a backbone with no scoring head"):
        Scorer.load(backbone)
    with pytest.raises(PublishedFormatError, match=r"two/config.json: a classifier with 2 labels; .* has 4 \(informativeness"):
        Scorer.load(two)
    with pytest.raises(PublishedFormatError, match=r"two/config.json: a classifier with 2 labels"):
        import_hf(str(two), tmp_path / "run")
    args = ["score", "--model", str(backbone), "--input", str(sample_dir / "test.jsonl"), "--output", str(tmp_path / "s.jsonl")]
    assert main(args) == 2
    assert "set model.init_from=" in capsys.readouterr().err


@pytest.mark.parametrize(("bidirectional", "pooling"), [(True, "mean"), (False, "last_token")])
def test_a_gemma_backbone_imports_with_its_own_pooling(tmp_path, tiny_tokenizer_dir, bidirectional, pooling):
    """EmbeddingGemma (bidirectional) is pooled by the mean, a causal Gemma 3 by its last token; the
    imported encoder's pooled state equals the PyTorch model's under padding."""
    folder = save_tiny(tmp_path / "gemma", "Gemma3Text", GEMMA3, perturb="norm", vocab_size=1024, use_bidirectional_attention=bidirectional)
    transformers.AutoTokenizer.from_pretrained(tiny_tokenizer_dir).save_pretrained(folder)
    assert main(["import", str(folder), str(tmp_path / "run")]) == 0
    from flax import nnx

    from omnidistill.runs.load import load_trained

    cfg, graphdef, params, _, _ = load_trained(tmp_path / "run", "best")
    assert cfg.model.pooling == pooling
    ids = np.array([[2, 40, 41, 42, 3, 0, 0], [2, 50, 51, 52, 53, 54, 3]], np.int32)
    mask = (ids > 0).astype(np.int32)
    with torch.no_grad():
        states = transformers.AutoModel.from_pretrained(folder)(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask))
    states = states.last_hidden_state.numpy()
    expected = (states * mask[..., None]).sum(1) / mask.sum(1, keepdims=True) if bidirectional else states[[0, 1], mask.sum(1) - 1]
    model = nnx.merge(graphdef, params)
    np.testing.assert_allclose(np.asarray(model.pooling([model.encoder(ids, mask)], mask)), expected, atol=1e-4)


def test_unsupported_model_type_is_rejected(tmp_path, hf_classifier):
    shutil.copytree(hf_classifier, tmp_path / "gpt")
    cfg = json.loads((tmp_path / "gpt" / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (tmp_path / "gpt" / "config.json").write_text(json.dumps(cfg))
    assert main(["import", str(tmp_path / "gpt"), str(tmp_path / "run")]) == 2


def test_modernbert_mean_pooled_classifier_is_refused_by_name(tmp_path, tiny_tokenizer_dir):
    """Its head would be run with [CLS] pooling and score differently: refused, never imported silently."""
    folder = save_tiny(tmp_path / "hf", "ModernBert", MODERNBERT, classification=True, vocab_size=1024, classifier_pooling="mean")
    transformers.AutoTokenizer.from_pretrained(tiny_tokenizer_dir).save_pretrained(folder)
    with pytest.raises(ValueError, match="classifier_pooling='mean' is not supported"):
        import_hf(str(folder), tmp_path / "run")
    assert main(["import", str(folder), str(tmp_path / "run2")]) == 2
    backbone = save_tiny(tmp_path / "bb", "ModernBert", MODERNBERT, vocab_size=1024, classifier_pooling="mean")
    transformers.AutoTokenizer.from_pretrained(tiny_tokenizer_dir).save_pretrained(backbone)
    assert import_hf(str(backbone), tmp_path / "run3")["family"] == "modernbert"  # a backbone's head setting is irrelevant


def test_import_into_an_existing_run_needs_overwrite_and_replaces_everything(tmp_path, tiny_tokenizer_dir):
    from omnidistill.scorer import Scorer

    first, second = (save_tiny_bert(tmp_path / f"hf{s}", classification=True, seed=s, vocab_size=1024) for s in (1, 2))
    for folder in (first, second):
        transformers.AutoTokenizer.from_pretrained(tiny_tokenizer_dir).save_pretrained(folder)
    run = tmp_path / "run"
    import_hf(str(first), run)
    (run / "stale.txt").write_text("from the old run")
    with pytest.raises(ValueError, match="not empty"):
        import_hf(str(second), run)
    assert main(["import", str(second), str(run)]) == 2
    assert main(["import", str(second), str(run), "--overwrite"]) == 0
    assert not (run / "stale.txt").exists()
    # the run now scores like the second model (checked against its PyTorch forward), not the first
    text = ["the answer is paris"]
    ours = Scorer.load(str(run)).score(candidates=text)[0]
    tok = transformers.AutoTokenizer.from_pretrained(second)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(second).eval()
    with torch.no_grad():
        reference = 1 + 4 * torch.sigmoid(model(**tok(text, return_tensors="pt")).logits)[0].numpy()
    np.testing.assert_allclose(list(ours.values()), reference, atol=1e-4)


def test_export_refuses_a_folder_whose_files_it_would_lose(tmp_path, hf_classifier, capsys):
    """Export replaces its folder as a whole: the run, a folder holding it, or a folder of other files is refused up front."""
    run = tmp_path / "runs" / "run"
    import_hf(str(hf_classifier), run)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    (tmp_path / "a_file").write_text("mine")
    for target, why in [
        (run, "holds the run"),
        (run.parent, "holds the run"),
        (tmp_path, "holds the run"),
        (run / "best", "export did not write"),
        (tmp_path / "notes", "export did not write"),
        (hf_classifier, "export did not write"),  # a pretrained model folder: config.json without the omnidistill block
        (tmp_path / "a_file", "is a file"),
    ]:
        assert main(["export", str(run), str(target), "--verify", "off"]) == 2, target
        assert why in capsys.readouterr().err, target
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine" and (tmp_path / "a_file").read_text() == "mine"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.parts[len(tmp_path.parts)] not in ("notes", "a_file")) == before
    out = tmp_path / "out"
    for _ in range(2):  # a new folder, then the earlier export is replaced
        assert main(["export", str(run), str(out), "--verify", "off"]) == 0
    assert not (tmp_path / "out.partial").exists() and (out / "model.safetensors").is_file()


def test_a_failed_import_leaves_the_run_it_would_replace(tmp_path, hf_classifier, tiny_tokenizer_dir):
    run = tmp_path / "run"
    import_hf(str(hf_classifier), run)
    text = ["the answer is paris"]
    scores = Scorer.load(str(run)).score(candidates=text)
    files = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert main(["import", str(tmp_path / "no-such-model"), str(run), "--overwrite"]) == 2
    inside = shutil.copytree(hf_classifier, run / "source")
    assert main(["import", str(inside), str(run), "--overwrite"]) == 2  # --overwrite would remove the source
    shutil.rmtree(inside)
    broken = shutil.copytree(hf_classifier, tmp_path / "broken")
    weights = load_file(str(broken / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if "layer.0." not in k}, str(broken / "model.safetensors"))
    with pytest.raises(WeightMismatchError):
        import_hf(str(broken), run, overwrite=True)  # fails after reading, before anything is replaced
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == files
    assert Scorer.load(str(run)).score(candidates=text) == scores
    assert not (tmp_path / "run.partial").exists()


@pytest.mark.parametrize(
    ("model_type", "pattern"),
    [
        ("gte", r"model_type='gte' \(GTE-multilingual \(Snowflake Arctic.*remote code"),
        ("gpt_neox", "no omnidistill port.*gpt_neox"),
        # the released OmniScore checkpoint: the package that runs its code is named, as what to use instead
        ("score_predictor", r"released QCRI/OmniScore-deberta-v3.*remote code.*omniscore\.OmniScorer\('QCRI/OmniScore-deberta-v3'\)"),
    ],
)
def test_unported_architectures_are_refused_by_name(tmp_path, model_type, pattern):
    folder = tmp_path / "hub"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": ["GteModel"], "hidden_size": 8}))
    with pytest.raises(ValueError, match=pattern):
        import_hf(str(folder), tmp_path / "run")
