"""The shipped head-ablation sweep runs end to end on the tiny default and writes one table."""

import json

import pytest

from omnidistill.cli import main
from omnidistill.config import ConfigError
from omnidistill.sweep import load_sweep


class PreemptSecondRun:
    """Stands in for the training loop's PreemptionGuard: the second run trained is preempted after step 1."""

    runs = 0

    def __init__(self, *_a, **_k):
        PreemptSecondRun.runs += 1
        self.preempt = PreemptSecondRun.runs == 2

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def should_stop(self, step: int) -> bool:
        return self.preempt and step == 1


@pytest.mark.slow
def test_shipped_heads_sweep_runs_and_resumes(repo_root, tmp_path, monkeypatch, capsys):
    """Two of the four heads train (a sigmoid head and a level head, which adds the uncertainty
    columns); ``--only`` still checks every run's config, and names the runs when it finds none. The
    second run is preempted: the sweep stops there, a plain rerun is refused, a rerun with another
    config is refused by key, and ``--resume`` continues that run from its checkpoint while the
    finished run keeps its row and is not trained again."""
    monkeypatch.chdir(repo_root)
    out = tmp_path / "sweep"
    args = [
        "sweep",
        "configs/ablations/heads.yaml",
        "train.max_steps=2",
        "train.eval_every_steps=2",
        "data.length_buckets=[192]",
        "eval.length_step=192",  # one compiled evaluation shape per run
        "--output-dir",
        str(out),
    ]
    assert main([*args, "--only", "ordinal,linear_sigmoid,nope"]) == 2
    assert "no run named nope (runs: linear_sigmoid, shared_mlp, ordinal, classification)" in capsys.readouterr().err

    monkeypatch.setattr("omnidistill.train.loop.PreemptionGuard", PreemptSecondRun)
    assert main([*args, "--only", "classification,linear_sigmoid"]) == 0
    assert "preempted during run classification" in capsys.readouterr().out
    rows = json.loads((out / "summary.json").read_text())
    assert [r["run"] for r in rows] == ["linear_sigmoid"]
    assert (out / "linear_sigmoid" / "train_summary.json").is_file() and not (out / "classification" / "train_summary.json").exists()
    finished_log = (out / "linear_sigmoid" / "train_log.jsonl").read_text()

    assert main([*args, "--only", "classification,linear_sigmoid"]) == 2
    assert "linear_sigmoid already holds a run; pass --resume" in capsys.readouterr().err
    assert main([*args[:-2], "train.seed=7", *args[-2:], "--only", "classification", "--resume"]) == 2
    assert "another config (train.seed: 0 != 7)" in capsys.readouterr().err

    monkeypatch.undo()
    monkeypatch.chdir(repo_root)
    assert main([*args, "--only", "classification", "--resume"]) == 0
    rows = json.loads((out / "summary.json").read_text())
    assert [r["run"] for r in rows] == ["linear_sigmoid", "classification"]  # the file's order
    assert rows[0]["resumed"] is False and rows[1]["resumed"] is True
    assert (out / "linear_sigmoid" / "train_log.jsonl").read_text() == finished_log  # not trained again
    saved = sorted(int(p.name) for p in (out / "classification" / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [1, 2]  # step 1 saved at the preemption, step 2 after the resume
    assert all(0 < r["dev_mae"] < 4 and r["steps"] == 2 and r["wall_s"] > 0 for r in rows)
    assert rows[1]["dev_nll"] is not None and rows[0]["dev_nll"] is None
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(r["run"] for r in rows)
    table = (out / "summary.md").read_text()
    assert "| classification |" in table and "dev MAE" in table and "(resumed: this part)" in table
    assert "| classification |" in capsys.readouterr().out


def test_recipe_sweep_configs_are_valid(repo_root):
    from omnidistill.config import load_config

    spec = load_sweep(repo_root / "configs" / "ablations" / "recipe.yaml")
    for overrides in spec["runs"].values():
        load_config(spec["base"], overrides)


def test_malformed_sweep_is_named(tmp_path, repo_root):
    path = tmp_path / "s.yaml"
    base = repo_root / "configs" / "tiny.yaml"
    path.write_text(f"base: {base}\nruns: {{a: model.head=ordinal}}\nextra: 1\n")
    with pytest.raises(ConfigError, match=f"{path}:3: unknown key"):
        load_sweep(path)
    path.write_text(f"base: {base}\nruns:\n  a: [model.head=ordinal]\n  b: model.head=ordinal\n")
    with pytest.raises(ConfigError, match=rf"{path}:4: runs\.b must be a list"):
        load_sweep(path)
    path.write_text("output_dir: x\nbase: missing.yaml\nruns: {a: [model.head=ordinal]}\n")
    with pytest.raises(ConfigError, match=f"{path}:2: base: 'missing.yaml' is not a file"):
        load_sweep(path)
    # a run trains into OUTPUT_DIR/<name>: ".." trained into the sweep folder's parent
    names = [('".."', r"run name '\.\.' must be a folder name"), ('"a/b"', "run name 'a/b' must be"), ("7", "run name 7 is not text")]
    for name, message in names:
        path.write_text(f"base: {base}\nruns:\n  ok: [model.head=ordinal]\n  {name}: [model.head=ordinal]\n")
        with pytest.raises(ConfigError, match=rf"{path}:4: {message}"):
            load_sweep(path)


def test_every_run_is_checked_before_the_first_trains(tmp_path, repo_root, capsys):
    """A run that training would refuse only at its model or its first step (an unknown head, a loss
    the head cannot take) stops the sweep before any run trains, naming the sweep file's line and the run."""
    path = tmp_path / "s.yaml"
    lines = [f"base: {repo_root / 'configs' / 'tiny.yaml'}", "runs:", "  fine: [model.head=ordinal]"]
    out = tmp_path / "out"
    path.write_text("\n".join([*lines, "  typo: [model.head=ordinall]"]) + "\n")
    assert main(["sweep", str(path), "--output-dir", str(out)]) == 2
    assert f"{path}:4: runs.typo: unknown head 'ordinall'" in capsys.readouterr().err
    path.write_text("\n".join([*lines, "  mismatch: [loss.name=cross_entropy]"]) + "\n")
    assert main(["sweep", str(path), "--output-dir", str(out)]) == 2
    assert f"{path}:4: runs.mismatch: loss 'cross_entropy' needs model.head=classification" in capsys.readouterr().err
    path.write_text("\n".join([*lines, "  bad_override: [optim.lrr=1]"]) + "\n")
    assert main(["sweep", str(path), "--output-dir", str(out)]) == 2
    assert f"{path}:4: runs.bad_override: " in capsys.readouterr().err
    # a run's own output directory was ignored silently (it trained into OUT/<name> all the same)
    path.write_text("\n".join([*lines, f"  elsewhere: [train.output_dir={tmp_path / 'mine'}]"]) + "\n")
    assert main(["sweep", str(path), "--output-dir", str(out)]) == 2
    assert f"{path}:4: runs.elsewhere: train.output_dir is the sweep's: each run trains into {out}/<run name>" in capsys.readouterr().err
    # a run reading other data whose file is missing stopped the sweep after the runs before it had trained
    path.write_text("\n".join([*lines, "  other_data: ['data.dev=[data/sample/dev-v2.jsonl]']"]) + "\n")
    assert main(["sweep", str(path), "--output-dir", str(out)]) == 2
    assert f"{path}:4: runs.other_data: data/sample/dev-v2.jsonl: file not found (data.dev;" in capsys.readouterr().err
    path.write_text("\n".join([*lines[:1], "overrides: [train.output_dir=x]", *lines[1:]]) + "\n")
    assert main(["sweep", str(path), "--output-dir", str(out)]) == 2
    assert f"{path}:2: overrides: train.output_dir is the sweep's" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "mine").exists()  # nothing trained


def test_an_undefined_metric_is_null_in_the_summary_and_a_dash_in_its_table(tmp_path):
    """A dev Pearson r over labels that never vary is NaN: summary.json held ``NaN`` (not JSON), and a
    summary read back with null in it could not be tabled (``format(None, '.3f')``)."""
    from omnidistill.sweep import _read_rows, write_summary

    row = {"run": "a", "overrides": ["model.head=ordinal"], "dev_mae": 0.8, "dev_rmse": 1.0, "dev_pearson": float("nan"),
           "dev_acc1": 0.7, "dev_nll": None, "dev_std_error_spearman": None, "steps": 2, "wall_s": 1.5}  # fmt: skip
    write_summary(tmp_path, [row])
    assert '"dev_pearson": null' in (tmp_path / "summary.json").read_text()
    (back,) = _read_rows(tmp_path)
    write_summary(tmp_path, [back])  # what --resume does with the rows it read
    assert "| 0.8000 | 1.0000 | — | 0.700 |" in (tmp_path / "summary.md").read_text()
