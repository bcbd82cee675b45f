"""Typed configs: YAML + dotted overrides, errors that name the key."""

from pathlib import Path

import pytest

from omnidistill.config import Config, ConfigError, load_config
from omnidistill.config.reference import config_rows


def test_tiny_config_loads_with_typed_overrides(repo_root):
    cfg = load_config(repo_root / "configs" / "tiny.yaml", ["optim.lr=3e-5", "mesh.data=8", "data.skip_invalid=true"])
    assert isinstance(cfg, Config)
    assert cfg.optim.lr == pytest.approx(3e-5) and isinstance(cfg.optim.lr, float)
    assert cfg.mesh.data == 8 and cfg.data.skip_invalid is True
    assert cfg.model.arch["hidden_size"] == 64


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).parents[1] / "configs").glob("*.yaml")))
def test_shipped_configs_are_valid(repo_root, name):
    cfg = load_config(repo_root / "configs" / name)
    from omnidistill.models.registry import get_family

    family = get_family(cfg.model.family)
    # the shipped encoder configs use the paper's head (OmniScore §3); decoders pool as their embedding
    # models do: the last token (Qwen), the mean (EmbeddingGemma, bidirectional)
    expected = {"gemma3": "mean"}.get(family.name, "last_token" if family.decoder else "cls_raw")
    assert cfg.model.pooling == expected


def test_unknown_key_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"optim\.learning_rate: unknown key"):
        load_config(None, ["optim.learning_rate=1e-4"])
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  batch_sise: 4\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: train\.batch_sise: unknown key"):
        load_config(path)


@pytest.mark.parametrize(
    "override,pattern",
    [
        ("optim.lr=fast", r"optim\.lr: expected float"),
        ("train.batch_size=1.5", r"train\.batch_size: expected int"),
        ("train.compute_dtype=float16", r"train\.compute_dtype: expected one of"),
        ("data.skip_invalid=maybe", r"data\.skip_invalid: expected bool"),
        ("optim.param_groups=[{pattern: x, lr: high}]", r"optim\.param_groups\[0\]\.lr: expected float"),
    ],
)
def test_wrong_type_is_named(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config(None, [override])


def test_param_group_rules_parse():
    cfg = load_config(None, ["optim.param_groups=[{pattern: '^encoder/embeddings/', lr: 0.0}]"])
    assert cfg.optim.param_groups[0].pattern == "^encoder/embeddings/" and cfg.optim.param_groups[0].lr == 0.0


def test_reference_documents_every_leaf_key():
    keys = {row[0] for row in config_rows()}
    assert {"optim.lr", "train.grad_accum", "mesh.fsdp", "data.skip_invalid", "model.init_from"} <= keys
    assert all(doc for key, _, _, doc in config_rows() if key in {"optim.head_lr", "train.batch_size"})


def test_config_reference_page_is_current(repo_root):
    import importlib.util

    spec = importlib.util.spec_from_file_location("config_reference_tool", repo_root / "tools" / "config_reference.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    text = (repo_root / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert tool.updated_page(text) == text, "run: python tools/config_reference.py --write"
