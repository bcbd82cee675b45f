"""``model.arch``: a field the family's port does not read is refused by name, since a mistyped one
would otherwise train the default model without a word; and every field a port writes into an
export's ``config.json`` is one it reads back."""

from __future__ import annotations

import pytest

from omnidistill.cli import main
from omnidistill.config import ConfigError, ModelConfig
from omnidistill.models.config_fields import fields_read
from omnidistill.models.loader import StartingPoint, load_model
from omnidistill.models.registry import get_family
from tests.models.hf_fixtures import TINY_BERT, save_tiny
from tests.models.test_remat import ARCH, EXTRA, MODEL_TYPES

FAMILIES = sorted(MODEL_TYPES)
WRITTEN_NOT_READ = {"modernbert": {"classifier_pooling"}}
"""Fields a port writes for transformers' own classes only: ModernBERT's head pools as ``model.pooling`` says."""


def arch_of(family: str) -> dict:
    """A tiny shape of ``family`` without ``vocab_size`` (the loader takes the tokenizer's)."""
    return {k: v for k, v in {**ARCH, **EXTRA.get(family, {})}.items() if k != "vocab_size"}


def model_config(family: str, tokenizer, **fields) -> ModelConfig:
    pooling = get_family(family).default_pooling({})
    return ModelConfig(family=family, tokenizer=str(tokenizer), pooling=pooling, **fields)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_field_a_port_writes_is_one_it_reads(family):
    port = get_family(family).config_from_hf
    written = port({**ARCH, **EXTRA.get(family, {}), "model_type": MODEL_TYPES[family]}).to_hf()
    assert set(written) - fields_read(port, written) == WRITTEN_NOT_READ.get(family, set())


@pytest.mark.parametrize("family", FAMILIES)
def test_a_mistyped_arch_field_is_refused_by_name(family, tiny_tokenizer_dir):
    loaded = load_model(model_config(family, tiny_tokenizer_dir, arch={**arch_of(family), "num_hidden_layers": 3}), shapes_only=True)
    assert loaded.model.arch.num_hidden_layers == 3
    typo = model_config(family, tiny_tokenizer_dir, arch={**arch_of(family), "num_hidden_layer": 3})
    pattern = rf"model\.arch\.num_hidden_layer: the {family} port does not read this field.*did you mean num_hidden_layers\?"
    with pytest.raises(ConfigError, match=pattern):
        load_model(typo, shapes_only=True)


def test_a_field_read_only_in_some_configs_is_refused_where_it_is_not(tiny_tokenizer_dir):
    # Gemma 3 takes hidden_act only from a config without hidden_activation: set beside it, it is ignored
    arch = {**arch_of("gemma3"), "hidden_activation": "gelu_pytorch_tanh"}
    assert (
        load_model(model_config("gemma3", tiny_tokenizer_dir, arch=arch), shapes_only=True).model.arch.hidden_activation
        == "gelu_pytorch_tanh"
    )
    with pytest.raises(ConfigError, match=r"model\.arch\.hidden_act: the gemma3 port"):
        load_model(model_config("gemma3", tiny_tokenizer_dir, arch={**arch, "hidden_act": "gelu"}), shapes_only=True)


def test_unread_fields_of_init_from_or_a_saved_run_are_not_the_users(tmp_path, tiny_tokenizer_dir):
    # a real config.json holds fields no port reads (initializer_range, architectures): only model.arch is checked
    pytest.importorskip("torch")  # to write one
    folder = save_tiny(tmp_path / "bert", "Bert", {**TINY_BERT, "vocab_size": 1024})
    cfg = ModelConfig(family="bert", init_from=str(folder), tokenizer=str(tiny_tokenizer_dir), arch={"hidden_dropout_prob": 0.2})
    assert load_model(cfg, shapes_only=True).model.arch.hidden_dropout_prob == 0.2
    with pytest.raises(ConfigError, match=r"model\.arch\.initializer_range: the bert port"):
        load_model(ModelConfig(family="bert", init_from=str(folder), tokenizer=str(tiny_tokenizer_dir), arch={"initializer_range": 0.05}))
    saved = {**arch_of("bert"), "model_type": "bert", "cls_token_id": 2, "sep_token_id": 3}  # a run's hf_config
    run = StartingPoint("run", saved, tiny_tokenizer_dir)
    assert load_model(model_config("bert", tiny_tokenizer_dir), shapes_only=True, start=run).model.arch.hidden_size == 16
    with pytest.raises(ConfigError, match=r"model\.arch\.hidden_szie: .*did you mean hidden_size\?"):
        load_model(model_config("bert", tiny_tokenizer_dir, arch={"hidden_szie": 8}), shapes_only=True, start=run)


def test_train_refuses_a_mistyped_arch_field_before_reading_data(tmp_path, repo_root, capsys, monkeypatch):
    def no_data(*_a, **_k):
        raise AssertionError("the training data was read")

    monkeypatch.setattr("omnidistill.train.setup.training_records", no_data)
    monkeypatch.chdir(repo_root)  # the tiny config's relative data paths (they are looked for before the model)
    args = ["train", str(repo_root / "configs" / "tiny.yaml"), f"train.output_dir={tmp_path / 'run'}", "model.arch.num_hidden_layer=1"]
    assert main(args) == 2
    assert "model.arch.num_hidden_layer: the bert port does not read this field" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("arch", "dropout", "message"),
    [
        ({"num_hidden_layers": "abc"}, None, r"model\.arch\.num_hidden_layers: expected int, got 'abc'"),
        ({"hidden_size": 64.5}, None, r"model\.arch\.hidden_size: expected int, got 64\.5"),
        ({"layer_norm_eps": "tiny"}, None, r"model\.arch\.layer_norm_eps: expected float, got 'tiny'"),
        ({"hidden_dropout_prob": 0.2}, 0.1, r"model\.arch\.hidden_dropout_prob: model\.dropout=0\.1 sets every dropout rate"),
    ],
)
def test_a_wrong_value_or_an_overridden_rate_is_refused_by_name(tiny_tokenizer_dir, arch, dropout, message):
    cfg = model_config("bert", tiny_tokenizer_dir, arch={**arch_of("bert"), **arch}, dropout=dropout)
    with pytest.raises(ConfigError, match=message):
        load_model(cfg, shapes_only=True)


ROPE = {"rope_type": "default", "rope_theta": 1e6}


@pytest.mark.parametrize(
    ("family", "nested", "legacy", "base_of"),
    [
        ("qwen3", ROPE, "rope_theta", lambda arch: arch.rope_theta),
        ("gemma3", {"full_attention": ROPE, "sliding_attention": ROPE}, "rope_local_base_freq", lambda arch: arch.sliding_rope.theta),
        ("modernbert", {"full_attention": ROPE, "sliding_attention": ROPE}, "global_rope_theta", lambda arch: arch.global_rope_theta),
    ],
)
def test_an_older_rope_field_is_refused_beside_rope_parameters(tiny_tokenizer_dir, family, nested, legacy, base_of):
    """transformers takes a RoPE base from ``rope_parameters`` first and the older top-level field only
    where the nested one is absent; the ports read them in that order, so the older field set beside a
    nested base changes nothing and is refused, and set alone it is the base."""
    alone = load_model(model_config(family, tiny_tokenizer_dir, arch={**arch_of(family), legacy: 5000.0}), shapes_only=True)
    assert base_of(alone.model.arch) == 5000.0
    beside = model_config(family, tiny_tokenizer_dir, arch={**arch_of(family), "rope_parameters": nested, legacy: 5000.0})
    with pytest.raises(ConfigError, match=rf"model\.arch\.{legacy}: the {family} port does not read this field"):
        load_model(beside, shapes_only=True)


def test_modernbert_reads_the_older_global_layer_pattern_only_without_layer_types(tiny_tokenizer_dir):
    pattern = load_model(model_config("modernbert", tiny_tokenizer_dir, arch={**arch_of("modernbert"), "global_attn_every_n_layers": 1}))
    assert pattern.model.arch.layer_types == ("full_attention", "full_attention")
    arch = {**arch_of("modernbert"), "layer_types": ["full_attention", "sliding_attention"], "global_attn_every_n_layers": 1}
    with pytest.raises(ConfigError, match=r"model\.arch\.global_attn_every_n_layers: the modernbert port does not read"):
        load_model(model_config("modernbert", tiny_tokenizer_dir, arch=arch), shapes_only=True)
