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
    with pytest.raises(ConfigError, match=r"c\.yaml: train\.batch_sise: unknown key \(did you mean batch_size\? valid keys: "):
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


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.batch_size=0", "train.batch_size: must be >= 1, got 0"),  # was a ZeroDivisionError in the pipeline
        ("train.epochs=0", "train.epochs: must be > 0, got 0.0"),
        ("model.head_dropout=1.5", "model.head_dropout: must be in [0, 1), got 1.5"),
        ("optim.lr=-1e-5", "optim.lr: must be >= 0, got -1e-05"),
        ("optim.warmup_ratio=1.2", "optim.warmup_ratio: must be in [0, 1], got 1.2"),
        ("optim.b2=1", "optim.b2: must be in [0, 1), got 1.0"),
        ("data.length_buckets=[64,0]", "data.length_buckets: must be >= 1, got 0"),
        ("loss.dimension_weights=[1,1,1]", "loss.dimension_weights: must have 4 items, got 3"),  # [2] broadcast silently
        ('optim.param_groups=[{pattern: "embeddings", lr: -1}]', "optim.param_groups[0].lr: must be >= 0, got -1.0"),
        ("eval.length_step=0", "eval.length_step: must be >= 1, got 0"),
    ],
)
def test_values_out_of_range_are_refused_by_key(repo_root, override, message):
    with pytest.raises(ConfigError) as err:
        load_config(repo_root / "configs" / "tiny.yaml", [override])
    assert message in str(err.value)


def test_range_edges_are_accepted_and_every_rule_names_a_real_field(repo_root):
    import dataclasses

    import omnidistill.config as config_module
    from omnidistill.config.limits import LIMITS, LIST_LENGTHS

    edges = ["train.batch_size=1", "model.head_dropout=0", "optim.lr=0", "optim.warmup_ratio=1", "optim.b1=0", "train.epochs=0.01"]
    cfg = load_config(repo_root / "configs" / "tiny.yaml", [*edges, "loss.dimension_weights=[0,1,0,1]", "optim.grad_clip=null"])
    assert cfg.train.batch_size == 1 and cfg.optim.grad_clip is None and cfg.loss.dimension_weights == [0, 1, 0, 1]
    for owner, field in [*LIMITS, *LIST_LENGTHS]:
        cls = getattr(config_module, owner)
        assert field in {f.name for f in dataclasses.fields(cls)}, (owner, field)
    rows = {key: doc for key, _, _, doc in config_rows()}
    assert rows["train.batch_size"].endswith("Range: >= 1.") and rows["loss.dimension_weights"].endswith("Range: 4 items, each >= 0.")


def test_train_refuses_a_zero_batch_size_with_its_key(repo_root, tmp_path, capsys):
    from omnidistill.cli import main

    assert main(["train", str(repo_root / "configs" / "tiny.yaml"), f"train.output_dir={tmp_path / 'run'}", "train.batch_size=0"]) == 2
    assert "train.batch_size: must be >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_key_given_twice_is_refused_in_every_yaml_the_project_reads(repo_root, tmp_path):
    """PyYAML keeps the last of two equal keys silently: a second ``optim:`` block dropped the first's
    ``lr`` (the run trained at the default 2e-5). Configs, sweep files, label configs and L-MAE weight
    files all refuse it, naming both lines."""
    from omnidistill.eval.metrics import load_group_weights
    from omnidistill.label.config import load_label_config
    from omnidistill.sweep import load_sweep

    cases = [
        (
            "c.yaml",
            "optim:\n  lr: 1.0e-3\ntrain:\n  batch_size: 8\noptim:\n  head_lr: 3.0e-3\n",
            load_config,
            r"c\.yaml:5: key 'optim' appears twice in one mapping \(first at line 1\)",
        ),
        ("n.yaml", "optim:\n  lr: 1.0e-3\n  lr: 2.0e-3\n", load_config, r"n\.yaml:3: key 'lr' appears twice .*first at line 2"),
        (
            "s.yaml",
            f"base: {repo_root / 'configs' / 'tiny.yaml'}\nruns:\n  a: [optim.lr=1e-3]\n  a: [optim.lr=2e-3]\n",
            load_sweep,
            r"s\.yaml:4: key 'a' appears twice",
        ),
        ("l.yaml", "models: [a]\nconcurrency: 2\nmodels: [b]\n", load_label_config, r"l\.yaml:3: key 'models' appears twice"),
        ("w.yaml", "en: 1\nde: 2\nen: 3\n", load_group_weights, r"w\.yaml:3: key 'en' appears twice"),
    ]
    for name, text, load, message in cases:
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=message):  # ConfigError, or the weights reader's ValueError
            load(tmp_path / name)
    config, label = tmp_path / "c.yaml", tmp_path / "l.yaml"
    config.write_text("optim:\n  lr: 1.0e-3\n  head_lr: 3.0e-3\ntrain:\n  batch_size: 8\n")  # merged: fine
    assert load_config(config).optim.lr == pytest.approx(1e-3)
    label.write_text("models: [a\n")
    with pytest.raises(ConfigError, match=r"l\.yaml: invalid YAML"):  # was a traceback
        load_label_config(label)


def test_eval_compiler_options_keep_their_yaml_types(repo_root):
    """eval.compiler_options go to XLA, which wants a bool as a bool and an int as an int: each value keeps
    the type YAML (or a key=value override) gave it, and an empty value stays an empty string."""
    cfg = load_config(
        repo_root / "configs" / "tiny.yaml",
        ["eval.compiler_options.xla_gpu_enable_command_buffer=", "eval.compiler_options.xla_gpu_graph_min_graph_size=2",
         "eval.compiler_options.xla_gpu_enable_cublaslt=true", "eval.compiler_options.xla_gpu_command_buffer_update_mode=NEVER_UPDATE"],
    )  # fmt: skip
    assert cfg.eval.compiler_options == {
        "xla_gpu_enable_command_buffer": "",
        "xla_gpu_graph_min_graph_size": 2,
        "xla_gpu_enable_cublaslt": True,
        "xla_gpu_command_buffer_update_mode": "NEVER_UPDATE",
    }
    assert load_config(repo_root / "configs" / "tiny.yaml").eval.compiler_options == {}
    with pytest.raises(ConfigError, match=r"eval\.compiler_options\.x"):
        load_config(repo_root / "configs" / "tiny.yaml", ["eval.compiler_options.x=[1, 2]"])


def test_a_config_not_found_says_where_it_was_looked_for(tmp_path, monkeypatch, capsys):
    """Run away from a clone's root (or with omnidistill installed from a wheel, which ships no configs),
    ``omnidistill train configs/tiny.yaml`` said only ``config file not found``."""
    from omnidistill.cli import main

    monkeypatch.chdir(tmp_path)
    here = f"relative paths are read from the current directory, {tmp_path}"
    shipped = "the configs the docs name are in the omnidistill repository's configs/ folder: run from its root"
    for command, what in [
        (["train", "configs/tiny.yaml"], "config file"),
        (["prepare", "configs/tiny.yaml"], "config file"),
        (["sweep", "configs/ablations/heads.yaml"], "sweep file"),
        (["label", "--config", "configs/label/gpt41.yaml", "--input", "x.jsonl", "--output", "y.jsonl"], "config file"),
    ]:
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"{what} not found ({here}; {shipped})" in err, err
    assert main(["train", "mine.yaml"]) == 2
    assert f"mine.yaml: config file not found ({here})\n" in capsys.readouterr().err
    assert main(["train", str(tmp_path / "mine.yaml")]) == 2
    assert f"{tmp_path / 'mine.yaml'}: config file not found\n" in capsys.readouterr().err
