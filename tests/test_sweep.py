"""The shipped head-ablation sweep runs end to end on the tiny default and writes one table."""

import json
import re
from pathlib import Path

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
def finished_run(cfg) -> dict:
    """What a stand-in for training leaves: the run's config (what ``--resume`` compares) and the
    summary of a finished run; returns that summary."""
    from omnidistill.config import dump_config
    from omnidistill.runs.run_dir import TRAIN_SUMMARY

    run = Path(cfg.train.output_dir)
    run.mkdir(parents=True)
    dump_config(cfg, run / "config.yaml")
    (run / TRAIN_SUMMARY).write_text('{"steps": 3}')
    return {"steps": 3}


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


@pytest.mark.parametrize("name", ["heads", "recipe", "soft_labels", "lr_grid", "weights_average", "preferences"])
def test_shipped_sweep_configs_are_valid(repo_root, tmp_path, name):
    from omnidistill.sweep import sweep_configs

    path = repo_root / "configs" / "ablations" / f"{name}.yaml"
    spec = load_sweep(path)
    configs = sweep_configs(path, spec, spec.get("overrides", []), tmp_path)  # as the sweep command passes them
    if name == "soft_labels":  # the folders the docs' table names, each with its seed
        assert [(run, cfg.train.seed) for run, cfg in configs.items()][:3] == [("mse_s0", 0), ("mse_s1", 1), ("mse_s2", 2)]
        assert len(configs) == 12 and configs["distribution_s2"].loss.name == "distribution"
    if name == "lr_grid":  # every combination of the two rates, with each seed
        rates = {(cfg.optim.lr, cfg.optim.head_lr, cfg.train.seed) for cfg in configs.values()}
        assert rates == {(lr, head, s) for lr in (3e-4, 1e-3, 3e-3) for head in (1e-3, 3e-3) for s in (0, 1, 2)}
        assert "lr=0.0003+head_lr=0.001_s0" in configs
    if name == "preferences":  # every run on the sample's judged pairs, weight 0 among them
        weights = [(run, cfg.loss.pair_weight, cfg.data.pairs) for run, cfg in configs.items()][::3]
        assert weights == [(f"pair_weight={w}_s0", float(w), "data/sample/pairs/train.jsonl") for w in ("0.0", "0.1", "0.3", "1.0")]
        assert spec["test"] and spec["test_pairs"] == "data/sample/pairs/test.jsonl"
    if name == "weights_average":  # null is off
        assert [(run, cfg.optim.ema_decay) for run, cfg in configs.items()][::3] == [
            ("ema_decay=null_s0", None), ("ema_decay=0.95_s0", 0.95), ("ema_decay=0.99_s0", 0.99)
        ]  # fmt: skip


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


def test_seeds_train_each_run_once_per_seed_and_the_table_gives_mean_and_spread(tmp_path, repo_root, monkeypatch, capsys):
    """``seeds: [0, 1, 2]`` trains every run once per seed into ``<run>_s<seed>`` with that
    ``train.seed``, and tables each run's mean and sample standard deviation over its seeds (training
    and the dev evaluation stand in here: the sweep's own work is the expansion and the table)."""
    import numpy as np

    dev_mae = {"a_s0": 0.80, "a_s1": 0.90, "a_s2": 0.85, "b_s0": 0.70, "b_s1": 0.74, "b_s2": 0.72}
    trained = []

    def fake_train(cfg, resume=False):
        trained.append((Path(cfg.train.output_dir).name, cfg.train.seed, cfg.model.head))
        return finished_run(cfg)

    def fake_eval(run_dir, split="dev"):
        mae = dev_mae[Path(run_dir).name]
        pearson = float("nan") if Path(run_dir).name == "b_s2" else 1 - mae  # undefined for one seed: left out
        return {"overall": {"mae_dims": mae, "rmse": mae + 0.2, "pearson": pearson, "acc1": 0.6}}

    monkeypatch.setattr("omnidistill.train.loop.train", fake_train)
    monkeypatch.setattr("omnidistill.eval.run_eval.evaluate_run", fake_eval)
    path = tmp_path / "s.yaml"
    head = [f"base: {repo_root / 'configs' / 'tiny.yaml'}", "runs:", "  a: [model.head=ordinal]", "  b: [model.head=linear_sigmoid]"]
    path.write_text("\n".join([*head, "seeds: [0, 1, 2]"]) + "\n")
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--output-dir", str(out), "--only", "b"]) == 0
    assert trained == [(f"b_s{seed}", seed, "linear_sigmoid") for seed in (0, 1, 2)]
    assert main(["sweep", str(path), "--output-dir", str(out), "--only", "a_s1,a_s0,a_s2", "--resume"]) == 0
    assert trained[3:] == [(f"a_s{seed}", seed, "ordinal") for seed in (0, 1, 2)]
    rows = json.loads((out / "summary.json").read_text())
    assert [(r["run"], r["sweep_run"], r["seed"]) for r in rows] == [(f"{n}_s{s}", n, s) for n in "ab" for s in (0, 1, 2)]
    seeded = json.loads((out / "summary_seeds.json").read_text())
    assert [(r["run"], r["seeds"]) for r in seeded] == [("a", [0, 1, 2]), ("b", [0, 1, 2])]
    for r in seeded:
        maes = np.array([dev_mae[f"{r['run']}_s{s}"] for s in (0, 1, 2)])
        assert r["dev_mae"]["mean"] == pytest.approx(maes.mean(), abs=1e-12)
        assert r["dev_mae"]["sd"] == pytest.approx(maes.std(ddof=1), abs=1e-12)
        assert r["dev_nll"] == {"mean": None, "sd": None}
    assert seeded[1]["dev_pearson"]["mean"] == pytest.approx(1 - 0.72, abs=1e-12)  # b_s2's NaN is left out
    table = (out / "summary.md").read_text()
    a = seeded[0]["dev_mae"]
    assert table.startswith("Mean ± sample standard deviation over seeds:")
    assert f"| a | `model.head=ordinal` | 0, 1, 2 | {a['mean']:.4f} ± {a['sd']:.4f} |" in table
    assert "| b_s2 | `model.head=linear_sigmoid` |" in table.split("Each seed:")[1]
    for text, message in [  # the seed is the sweep's; a run's name may not be another run's seed folder
        ("\n".join([*head, "  c: [train.seed=3]", "seeds: [0, 1]"]), rf"{path}:5: runs.c: train.seed is the sweep's seeds"),
        ("\n".join([*head, "  a_s1: [model.head=ordinal]", "seeds: [0, 1]"]), rf"{path}:5: runs.a_s1: a_s1 is also the folder"),
        ("\n".join([*head, "seeds: [0, 0]"]), rf"{path}:5: seeds must be a list of distinct integers >= 0, got \[0, 0\]"),
    ]:
        path.write_text(text + "\n")
        assert main(["sweep", str(path), "--output-dir", str(tmp_path / "other")]) == 2
        assert re.search(message, capsys.readouterr().err)


def test_test_true_adds_the_test_metrics_of_each_runs_best_dev_checkpoint(tmp_path, repo_root, monkeypatch, capsys):
    """``test: true`` evaluates every run on ``data.test`` after its dev evaluation, and a run finished
    before the key was set gets its test row on ``--resume`` without training again; a run with no
    test data is refused before anything trains (training and evaluation stand in)."""
    trained, evaluated = [], []

    def fake_train(cfg, resume=False):
        trained.append(Path(cfg.train.output_dir).name)
        return finished_run(cfg)

    def fake_eval(run_dir, split="dev", **_):
        evaluated.append((Path(run_dir).name, split))
        mae = {"dev": 0.8, "test": 0.7}[split] + 0.01 * int(Path(run_dir).name[-1])
        return {"overall": {"mae_dims": mae, "rmse": 1.0, "pearson": 0.5, "acc1": 0.6}}

    monkeypatch.setattr("omnidistill.train.loop.train", fake_train)
    monkeypatch.setattr("omnidistill.eval.run_eval.evaluate_run", fake_eval)
    path = tmp_path / "s.yaml"
    text = f"base: {repo_root / 'configs' / 'tiny.yaml'}\nseeds: [0, 1]\nruns:\n  a: [model.head=ordinal]\n"
    path.write_text(text)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--output-dir", str(out)]) == 0
    assert "test_mae" not in json.loads((out / "summary.json").read_text())[0]
    path.write_text(text + "test: true\n")
    assert main(["sweep", str(path), "--output-dir", str(out), "--resume"]) == 0
    assert trained == ["a_s0", "a_s1"] and evaluated[-2:] == [("a_s0", "test"), ("a_s1", "test")]
    rows = json.loads((out / "summary.json").read_text())
    assert [r["test_mae"] for r in rows] == pytest.approx([0.70, 0.71])
    (seeded,) = json.loads((out / "summary_seeds.json").read_text())
    assert seeded["test_mae"]["mean"] == pytest.approx(0.705) and seeded["test_mae"]["sd"] == pytest.approx(0.01 / 2**0.5)
    table = (out / "summary.md").read_text()
    assert "| dev MAE | RMSE | Pearson r | Acc@±1 | NLL | Spearman(std, error) | test MAE | test RMSE |" in table
    assert "| 0.7050 ± 0.0071 |" in table and "| a_s1 | `model.head=ordinal` | 0.8100 |" in table
    assert main(["sweep", str(path), "data.test=[]", "--output-dir", str(tmp_path / "other")]) == 2
    assert f"{path}:4: runs.a: test: true, but data.test names no file" in capsys.readouterr().err
    assert main(["sweep", str(path), f"data.test=[{tmp_path / 'nope.jsonl'}]", "--output-dir", str(tmp_path / "other")]) == 2
    assert "nope.jsonl: file not found (data.test" in capsys.readouterr().err
    assert trained == ["a_s0", "a_s1"] and not (tmp_path / "other").exists()


def test_a_grid_trains_every_combination_of_its_values_and_the_table_names_the_best(tmp_path, repo_root, monkeypatch, capsys):
    """``grid`` makes each combination of its values a run (each of ``runs`` with each, when given),
    named after the values; the config of each holds exactly those values, and the table ends with
    the run of the lowest dev MAE (training and the dev evaluation stand in)."""
    import itertools

    trained = {}

    def fake_train(cfg, resume=False):
        trained[Path(cfg.train.output_dir).name] = (cfg.loss.name, cfg.optim.lr, cfg.optim.head_lr, cfg.data.length_buckets)
        return finished_run(cfg)

    def fake_eval(run_dir, split="dev", **_):  # a made-up dev MAE, lowest for huber at lr 3e-3 with one bucket
        loss, lr, head_lr, buckets = trained[Path(run_dir).name]
        mae = 1 - 10 * lr - head_lr + 0.01 * len(buckets) - 0.02 * (loss == "huber") + 0.1 * (split == "test")
        return {"overall": {"mae_dims": mae, "rmse": 1.0, "pearson": 0.5, "acc1": 0.6}}

    monkeypatch.setattr("omnidistill.train.loop.train", fake_train)
    monkeypatch.setattr("omnidistill.eval.run_eval.evaluate_run", fake_eval)
    path, out = tmp_path / "s.yaml", tmp_path / "out"
    base = f"base: {repo_root / 'configs' / 'tiny.yaml'}"
    grid = ["grid:", "  optim.lr: [1.0e-3, 3.0e-3]", "  optim.head_lr: [1e-2]", "  data.length_buckets: [[64, 192], [192]]"]
    expected = {}
    for loss, lr, buckets in itertools.product(["mse", "huber"], [1e-3, 3e-3], [[64, 192], [192]]):
        name = f"{loss}+lr={lr!r}+head_lr=1e-2+length_buckets={'_'.join(map(str, buckets))}"
        expected[name] = (loss, lr, 1e-2, buckets)
    path.write_text("\n".join([base, "test: true", *grid, "runs:", "  mse: [loss.name=mse]", "  huber: [loss.name=huber]"]) + "\n")
    assert main(["sweep", str(path), "--output-dir", str(out), "--only", "huber"]) == 0  # a run of the file: all its combinations
    assert sorted(trained) == sorted(name for name in expected if name.startswith("huber+"))
    assert main(["sweep", str(path), "--output-dir", str(out), "--resume"]) == 0
    assert trained == expected  # every combination, each with its run's overrides, the values as YAML read them
    rows = json.loads((out / "summary.json").read_text())
    assert [r["run"] for r in rows] == list(expected)
    assert rows[0]["overrides"] == ["loss.name=mse", "optim.lr=0.001", "optim.head_lr=1e-2", "data.length_buckets=[64, 192]"]
    best = min(rows, key=lambda r: r["dev_mae"])
    assert best["run"] == "huber+lr=0.003+head_lr=1e-2+length_buckets=192"
    table = (out / "summary.md").read_text()  # chosen on dev, and its test MAE reported
    assert table.endswith(f"\nBest dev MAE: **{best['run']}** (dev MAE {best['dev_mae']:.4f}; test MAE {best['test_mae']:.4f})\n")
    assert table in capsys.readouterr().out
    # without runs, the grid's combinations are the runs; with seeds, the best is by mean over seeds
    path.write_text("\n".join([base, "seeds: [0, 1]", "grid:", "  optim.lr: [1.0e-3, 3.0e-3]"]) + "\n")
    assert main(["sweep", str(path), "--output-dir", str(tmp_path / "seeded"), "--only", "lr=0.003"]) == 0
    assert [r["run"] for r in json.loads((tmp_path / "seeded" / "summary.json").read_text())] == ["lr=0.003_s0", "lr=0.003_s1"]
    assert "Best" not in (tmp_path / "seeded" / "summary.md").read_text()  # one run: nothing to choose between
    assert main(["sweep", str(path), "--output-dir", str(tmp_path / "seeded"), "--resume"]) == 0
    means = {r["run"]: r["dev_mae"]["mean"] for r in json.loads((tmp_path / "seeded" / "summary_seeds.json").read_text())}
    assert list(means) == ["lr=0.001", "lr=0.003"] and means["lr=0.003"] < means["lr=0.001"]
    assert (
        (tmp_path / "seeded" / "summary.md")
        .read_text()
        .endswith(f"Best mean dev MAE over seeds: **lr=0.003** (dev MAE {means['lr=0.003']:.4f} ± 0.0000)\n")
    )


def test_a_grid_is_refused_where_it_clashes(tmp_path, repo_root, capsys):
    """A grid that is not a mapping of keys to lists, that repeats a value, varies the sweep's own keys,
    or varies a key a run or an override also sets, is refused with its line before anything trains."""
    path, out = tmp_path / "s.yaml", tmp_path / "out"
    base = f"base: {repo_root / 'configs' / 'tiny.yaml'}"
    cases = [
        (["grid: [optim.lr]"], rf"{path}:2: grid must map config keys to lists of values"),
        (["grid:", "  optim.lr: 1.0e-3"], rf"{path}:2: grid.optim.lr must be a non-empty list of values, got 0.001"),
        (["grid:", "  optim.lr: [1.0e-3, 0.001]"], rf"{path}:2: grid.optim.lr gives a value twice"),
        (["grid:", "  train.seed: [0, 1]"], rf"{path}:2: grid.train.seed: train.seed is the sweep's \(use seeds: \[...\]\)"),
        (["grid:", "  optim.lr: [1.0e-3]", "runs:", "  a: [optim.lr=1]"], rf"{path}:5: runs.a sets optim.lr, which the grid varies"),
        (["overrides: [optim.lr=1]", "grid:", "  optim.lr: [1.0e-3]"], rf"{path}:2: overrides: optim.lr is the grid's"),
        (["grid:", "  optim.lrr: [1.0e-3]"], rf"{path}:2: runs.lrr=0.001: .*optim.lrr"),
        (["grid:", "  model.tokenizer: [a/b, a_b]"], rf"{path}:2: two of the grid's combinations are both named tokenizer=a_b"),
    ]
    for lines, message in cases:
        path.write_text("\n".join([base, *lines]) + "\n")
        assert main(["sweep", str(path), "--output-dir", str(out)]) == 2
        assert re.search(message, capsys.readouterr().err), message
    path.write_text("\n".join([base, "grid:", "  optim.lr: [1.0e-3]"]) + "\n")
    assert main(["sweep", str(path), "optim.lr=2", "--output-dir", str(out)]) == 2
    assert f"{path}: an override on the command line: optim.lr is the grid's" in capsys.readouterr().err
    assert not out.exists()


def test_the_best_line_names_the_runs_the_seeds_do_not_tell_apart_from_the_best(tmp_path):
    """With seeds, the runs whose mean dev MAE is within the larger standard deviation of the best's
    are named after it: an ablation whose best wins by less than a seed's spread says so."""
    import numpy as np

    from omnidistill.sweep import summary_markdown

    maes = {"a": [0.80, 0.82], "b": [0.815, 0.825], "c": [0.90, 0.91]}
    rows = [
        {"run": f"{run}_s{seed}", "sweep_run": run, "seed": seed, "overrides": [], "dev_mae": mae, "steps": 1, "wall_s": 1.0}
        for run, values in maes.items()
        for seed, mae in enumerate(values)
    ]
    a, b = np.array(maes["a"]), np.array(maes["b"])
    assert b.mean() - a.mean() <= max(a.std(ddof=1), b.std(ddof=1))  # b is within a's spread; c is not
    line = summary_markdown(rows).splitlines()[-1]
    best = f"Best mean dev MAE over seeds: **a** (dev MAE {a.mean():.4f} ± {a.std(ddof=1):.4f}). Within a standard deviation of it: b"
    assert line.startswith(best + ". Paired by seed against it (dev MAE, t-test): b +0.0100 (p ")


def test_runs_are_tested_against_the_best_paired_by_seed():
    """The paired t-test over seeds against R's example of ``t.test(extra ~ group, data = sleep, paired =
    TRUE)`` (Student's sleep data, 10 patients as 10 seeds): t = -4.0621, df = 9, p-value = 0.002833."""
    from omnidistill.sweep import seed_summary

    drug1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
    drug2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
    rows = [
        {"run": f"{run}_s{seed}", "sweep_run": run, "seed": seed, "overrides": [], "dev_mae": value + 10, "steps": 1, "wall_s": 1.0}
        for run, values in (("one", drug1), ("two", drug2))
        for seed, value in enumerate(values)
    ]
    summary = {r["run"]: r for r in seed_summary(rows)}
    assert "vs_best" not in summary["one"]  # the best (the lower mean dev MAE)
    test = summary["two"]["vs_best"]["dev_mae"]
    assert test["seeds"] == 10 and test["diff"] == pytest.approx(1.58) and test["p"] == pytest.approx(0.002833, abs=5e-7)
    rows[-1]["dev_mae"] = float("nan")  # a seed without a value is left out of the pairs
    short = {r["run"]: r for r in seed_summary(rows)}["two"]["vs_best"]["dev_mae"]
    assert short["seeds"] == 9 and short["p"] > 0.002833


def test_test_pairs_adds_the_agreement_with_the_judges_pairwise_choices(tmp_path, repo_root, monkeypatch, capsys):
    """``test_pairs`` passes its file to each run's test evaluation and the table gains the overall
    pairwise accuracy (``eval --pairs``), also for runs finished before the key was set (on
    ``--resume``, without training again); a file that cannot be read, or the key without ``test:
    true``, is refused before anything trains (training and evaluation stand in)."""
    trained, pairs_given = [], []

    def fake_train(cfg, resume=False):
        trained.append(Path(cfg.train.output_dir).name)
        return finished_run(cfg)

    def fake_eval(run_dir, split="dev", pairs=None, **_):
        report = {"overall": {"mae_dims": 0.8, "rmse": 1.0, "pearson": 0.5, "acc1": 0.6}}
        if split == "test":
            pairs_given.append(pairs)
        if pairs is not None:
            report["preferences"] = {
                "overall": {"pairs": 4, "correct": 3, "ties": 0, "accuracy": 0.75 - 0.25 * (Path(run_dir).name == "b")}
            }
        return report

    monkeypatch.setattr("omnidistill.train.loop.train", fake_train)
    monkeypatch.setattr("omnidistill.eval.run_eval.evaluate_run", fake_eval)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"id_a": "x", "id_b": "y", "winner": "x"}\n')
    path = tmp_path / "s.yaml"
    text = f"base: {repo_root / 'configs' / 'tiny.yaml'}\ntest: true\nruns:\n  a: [model.head=ordinal]\n  b: [loss.name=huber]\n"
    path.write_text(text)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--output-dir", str(out)]) == 0
    assert pairs_given == [None, None] and "pairwise" not in (out / "summary.md").read_text()
    path.write_text(text + f"test_pairs: {pairs}\n")
    assert main(["sweep", str(path), "--output-dir", str(out), "--resume"]) == 0
    assert trained == ["a", "b"] and pairs_given[2:] == [str(pairs), str(pairs)]
    assert [r["test_pair_accuracy"] for r in json.loads((out / "summary.json").read_text())] == [0.75, 0.5]
    table = (out / "summary.md").read_text()
    assert "| test Acc@±1 | test pairwise agreement |" in table and "| 0.600 | 0.750 |" in table
    (tmp_path / "bad.jsonl").write_text('{"id_a": "x", "id_b": "y"}\n')
    for extra, message in [
        (f"test_pairs: {tmp_path / 'bad.jsonl'}\n", "bad.jsonl:1: no winner"),
        (f"test_pairs: {tmp_path / 'gone.jsonl'}\n", "gone.jsonl: file not found (test_pairs:"),
    ]:
        path.write_text(text + extra)
        assert main(["sweep", str(path), "--output-dir", str(tmp_path / "other")]) == 2
        assert message in capsys.readouterr().err
    path.write_text(text.replace("test: true\n", "") + f"test_pairs: {pairs}\n")
    assert main(["sweep", str(path), "--output-dir", str(tmp_path / "other")]) == 2
    assert f"{path}:5: test_pairs names a pairs file for the test split, with test: true" in capsys.readouterr().err
    assert trained == ["a", "b"] and not (tmp_path / "other").exists()
