"""End to end through the CLI: train the tiny default briefly, resume, evaluate; --help documents options."""

import json
import shutil

import jax.numpy as jnp
import pytest
from flax import nnx

from omnidistill.cli import main
from tests.shared_runs import TRAINED_TINY, tiny_run_args


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, repo_root, trained_tiny):
    """A copy of the session's shared run (6 steps, dev evaluations at 3 and 6) with the arguments that
    trained it, pointed at the copy: these tests resume it and evaluate into it."""
    run = tmp_path_factory.mktemp("runs") / "tiny"
    shutil.copytree(trained_tiny, run)
    shutil.rmtree(run / "eval")
    return run, tiny_run_args(repo_root, run, *TRAINED_TINY)


def test_train_writes_checkpoints_logs_and_dev_report(trained_run):
    run, _ = trained_run
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == ["3", "6"]
    assert any(p.name.isdigit() for p in (run / "best").iterdir())
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert any("dev_mae" in r for r in log) and any("tokens_per_s" in r for r in log)
    steps = [r for r in log if "padding_fraction" in r]
    assert steps and all(0 <= r["padding_fraction"] < 1 and r["input_wait_ms"] >= 0 for r in steps)
    assert "| **overall** |" in (run / "dev_report.md").read_text()
    assert (run / "config.yaml").exists() and (run / "tokenizer" / "tokenizer.json").exists()


def test_refuses_to_overwrite_then_resumes(trained_run, capsys, bert_random_draws):
    run, args = trained_run
    assert main(args) == 2
    assert "--resume (train(cfg, resume=True) from Python)" in capsys.readouterr().err
    assert bert_random_draws == []  # refused before building the model
    shutil.rmtree(run / "checkpoints" / "6")  # as if the run had died after step 3's checkpoint
    assert main([*args, "--resume"]) == 0  # the same configuration: the session's compiled step again
    assert bert_random_draws == []  # the model was built from shapes: the checkpoint holds every value
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [3, 6]
    logged = [json.loads(line)["step"] for line in (run / "train_log.jsonl").read_text().splitlines() if "loss" in line]
    assert logged == sorted(set(logged)) and logged[-1] == 6  # steps 4-6 logged once, not twice


def test_ctrl_c_during_training_finishes_the_checkpoint_being_written(trained_tiny, repo_root, tmp_path, capsys, monkeypatch):
    """Ctrl-C right after a checkpoint started (orbax writes it in the background) used to end the
    process under the write: the step stayed an unfinished ``*.orbax-checkpoint-tmp`` folder, with a
    traceback from orbax's thread after the message. The write is now waited for, then the run stops."""
    from omnidistill.runs.checkpoint import RunCheckpoints

    run = shutil.copytree(trained_tiny, tmp_path / "run")
    shutil.rmtree(run / "checkpoints" / "6")
    events, real_save, real_wait = [], RunCheckpoints.save, RunCheckpoints.wait

    def save_then_ctrl_c(self, step, *args, **kwargs):
        real_save(self, step, *args, **kwargs)
        events.append(f"save {step}")
        raise KeyboardInterrupt

    monkeypatch.setattr(RunCheckpoints, "save", save_then_ctrl_c)
    monkeypatch.setattr(RunCheckpoints, "wait", lambda self: events.append("wait") or real_wait(self))
    assert main([*tiny_run_args(repo_root, run, *TRAINED_TINY), "--resume"]) == 130
    assert events == ["save 6", "wait"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["3", "6"]  # step 6 written whole
    assert "omnidistill train: interrupted; the checkpoints already saved are kept" in capsys.readouterr().err


def test_eval_names_where_a_relative_split_file_was_looked_for(trained_tiny, repo_root, tmp_path, monkeypatch, capsys):
    """The run's config keeps data paths as given: eval from another directory names the key, the
    config file and the directory a relative path was read from, and the way out (--data)."""
    from omnidistill.config import dump_config, load_config

    run = shutil.copytree(trained_tiny, tmp_path / "run")
    cfg = load_config(run / "config.yaml")
    cfg.data.test = ["data/sample/test.jsonl"]
    dump_config(cfg, run / "config.yaml")
    monkeypatch.chdir(tmp_path)
    assert main(["eval", str(run), "--no-plots", "--bootstrap", "0", "--out", str(tmp_path / "ev")]) == 2
    err = capsys.readouterr().err
    assert f"data/sample/test.jsonl: file not found (data.test of {run / 'config.yaml'}" in err
    assert f"read from the current directory, {tmp_path}" in err and "--data" in err
    monkeypatch.chdir(repo_root)  # where the path was written from; a pattern is the files it matches, as in training
    cfg.data.test = ["data/sample/te*.jsonl"]  # it was refused as `data/sample/te*.jsonl: file not found`
    dump_config(cfg, run / "config.yaml")
    assert main(["eval", str(run), "--no-plots", "--bootstrap", "0", "--out", str(tmp_path / "ev")]) == 0
    assert json.loads((tmp_path / "ev" / "test.json").read_text())["meta"]["items"] == 300


def test_a_run_before_its_first_dev_evaluation_says_so_and_stays_as_it_is(trained_tiny, tmp_path, capsys):
    run = shutil.copytree(trained_tiny, tmp_path / "run", ignore=shutil.ignore_patterns("best", "eval"))
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    for command in (["eval", str(run), "--no-plots", "--bootstrap", "0"], ["export", str(run), str(tmp_path / "out")]):
        assert main(command) == 2
        assert "best: no checkpoint yet (written at the first dev evaluation; --checkpoint latest" in capsys.readouterr().err
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # no empty best/ left behind
    assert main(["export", str(run), str(tmp_path / "out"), "--checkpoint", "latest", "--verify", "off"]) == 0


def test_eval_writes_json_and_markdown(trained_run, capsys, tmp_path):
    run, _ = trained_run
    judge = tmp_path / "judge.jsonl"
    from omnidistill.config import load_config
    from omnidistill.data.sources import read_records

    cfg = load_config(run / "config.yaml")
    records = read_records(cfg.data.test)[0]
    judge.write_text("\n".join(json.dumps({"id": r.id, "labels": {"clarity": 3.0}}) for r in records))
    import matplotlib

    before = matplotlib.get_backend()
    matplotlib.use("svg")  # the process's own backend, e.g. a notebook's: eval set "Agg" for all of it
    try:
        assert main(["eval", str(run), "--split", "test", "--bootstrap", "50", "--compare", f"llm={judge}"]) == 0
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)
    report = json.loads((run / "eval" / "test.json").read_text())
    assert report["meta"]["items"] == 300
    assert set(report["by_lang"]) == {"ar", "bn", "de", "en", "es", "hi"}
    assert 0 < report["overall"]["mae"] < 4
    assert (run / "eval" / "test.md").read_text().startswith("## test")
    # the constant baseline: the run's training-label means, scored on the same items
    from omnidistill.eval.report import mean_baseline, train_mean_labels

    expected = mean_baseline(records, train_mean_labels(read_records(cfg.data.train)[0]), report["overall"]["mae_dims"])
    assert report["baseline"]["mae_dims"] == pytest.approx(expected["mae_dims"])
    assert "Baseline, the training labels' mean" in (run / "eval" / "test.md").read_text()
    assert len((run / "eval" / "test_predictions.jsonl").read_text().splitlines()) == 300
    for name in ("test_pred_vs_gold.png", "test_error_by_group.png", "test_histograms.png"):
        assert (run / "eval" / name).read_bytes().startswith(b"\x89PNG\r\n")  # PNG files, whatever the backend
    assert (run / "eval" / "test_compare.md").stat().st_size > 0
    # the paired tests: on the cells both judges scored (the judge scored clarity only)
    (diff,) = json.loads((run / "eval" / "test_differences.json").read_text())
    clarity = report["overall"]["dimensions"]["clarity"]
    assert (diff["a"], diff["b"], diff["cells"]) == ("student", "llm", clarity["n"])
    assert diff["pooled"]["mae"]["a"] == pytest.approx(clarity["mae"])
    judge_mae = json.loads((run / "eval" / "test_compare.json").read_text())["llm"]["overall"]["mae"]
    assert diff["pooled"]["mae"]["b"] == pytest.approx(judge_mae)
    assert diff["pooled"]["mae"]["ci"][0] <= diff["pooled"]["mae"]["diff"] <= diff["pooled"]["mae"]["ci"][1]
    assert diff["dimensions"]["informativeness"]["mae"]["a"] is None  # no common cell: null, not NaN
    assert diff["dimensions"]["clarity"]["pearson"]["p"] is None  # a constant judge has no r
    assert "| student − llm | 300 |" in (run / "eval" / "test_compare.md").read_text()
    assert report["agreement"]["annotators"] == 2 and "student_vs_annotator" in report["agreement"]
    assert report["cross_lingual"]["groups"] >= 1
    assert set(report["ci95"]) >= {"mae", "rmse", "pearson", "acc1"}
    assert "pairwise_acc" in report["overall"]["dimensions"]["clarity"]
    out = capsys.readouterr().out
    assert "MAE" in out and "Judges side by side" in out and "Differences between judges" in out
    # ids join the judge's file to the items: an eval file that repeats an id is refused, naming both lines
    lines = (repo_root_of(cfg) / "data" / "sample" / "test.jsonl").read_text().splitlines()
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join([*lines[:5], lines[2]]) + "\n")
    args = [
        "eval",
        str(run),
        "--data",
        str(dup),
        "--bootstrap",
        "0",
        "--no-plots",
        "--out",
        str(tmp_path / "e"),
        "--compare",
        f"llm={judge}",
    ]
    assert main(args) == 2
    assert f"id '{records[2].id}' at {dup}:6 repeats {dup}:3" in capsys.readouterr().err
    assert main(args[:-2]) == 0  # without a join, a repeated id only labels an item


def repo_root_of(cfg):
    from pathlib import Path

    return Path(cfg.data.test[0]).parents[2]


def test_bad_override_is_a_clear_cli_error(repo_root, capsys):
    assert main(["train", str(repo_root / "configs" / "tiny.yaml"), "optim.lrr=1"]) == 2
    assert "optim.lrr: unknown key" in capsys.readouterr().err


def test_output_dir_that_is_a_file_is_refused_first(repo_root, tmp_path, capsys):
    """It failed with ``[Errno 20] Not a directory: '.../checkpoints'`` after tokenizing the data."""
    (tmp_path / "notes").write_text("mine")
    assert main(["train", str(repo_root / "configs" / "tiny.yaml"), f"train.output_dir={tmp_path / 'notes'}"]) == 2
    assert "is a file: name a folder for the run" in capsys.readouterr().err
    assert (tmp_path / "notes").read_text() == "mine"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["score", "--model", "m", "--input", "i.jsonl", "--output", "o.jsonl", "--chunk", "0"], "--chunk: must be >= 1, got 0"),
        (["score", "--model", "m", "--input", "i.jsonl", "--output", "o.jsonl", "--batch-size", "0"], "--batch-size: must be >= 1"),
        (["score", "--model", "m", "--input", "i.jsonl", "--output", "o.jsonl", "--pack-length", "-8"], "--pack-length: must be >= 0"),
        (["eval", "run", "--bootstrap", "-1"], "--bootstrap: must be >= 0, got -1"),
        (["eval", "run", "--batch-tokens", "-1"], "--batch-tokens: must be >= 0"),
        (["eval", "run", "--usd-per-hour", "-3"], "--usd-per-hour: must be >= 0.0, got -3"),
        (["eval", "run", "--batch-size", "two"], "--batch-size: invalid int value: 'two'"),
    ],
)
def test_numeric_options_are_checked_by_the_parser(args, message, capsys):
    """``score --chunk 0`` used to read nothing and write an empty output with status 0."""
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code == 2 and message in capsys.readouterr().err


def test_help_documents_every_config_key(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for key in ("optim.head_lr", "train.grad_accum", "mesh.fsdp", "data.skip_invalid", "--resume"):
        assert key in out


def test_version_names_the_installed_package_and_its_stack(capsys):
    """``omnidistill --version`` (for bug reports): the version the package was installed as, which
    ``omnidistill.__version__`` must equal, and the stack's versions, on one line."""
    from importlib.metadata import version

    import omnidistill

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and out.count("\n") == 1
    assert out.startswith(f"omnidistill {version('omnidistill')} (Python ") and omnidistill.__version__ == version("omnidistill")
    assert f"jax {version('jax')}" in out and f"transformers {version('transformers')}" in out


def test_a_bad_lang_weights_file_is_refused_before_any_work(trained_run, tmp_path, capsys, bert_random_draws, monkeypatch):
    """``eval.lang_weights`` is read when training starts (it used to fail at the first dev evaluation,
    after an epoch of training), and ``eval --lang-weights`` before the scoring pass."""
    run, args = trained_run
    bad = tmp_path / "weights.yaml"
    bad.write_text("en: 1\nhi: -2\n")
    fresh = tmp_path / "fresh"
    assert main([*args, f"train.output_dir={fresh}", f"eval.lang_weights={bad}"]) == 2
    assert f"{bad}: weight of 'hi' must be a non-negative number, got -2" in capsys.readouterr().err
    assert bert_random_draws == [] and not fresh.exists()  # no model was built, nothing was written

    def no_scoring(*_a, **_k):
        raise AssertionError("eval scored the items before reading --lang-weights")

    monkeypatch.setattr("omnidistill.eval.program.ScoringProgram.predict", no_scoring)
    assert main(["eval", str(run), "--bootstrap", "0", "--no-plots", "--out", str(tmp_path / "e"), "--lang-weights", str(bad)]) == 2
    assert f"{bad}: weight of 'hi' must be a non-negative number" in capsys.readouterr().err


def test_an_eval_folder_that_cannot_be_written_fails_before_the_scoring(trained_tiny, tmp_path, capsys, monkeypatch):
    """The report folder was made only when the reports were written, after the scoring and the bootstrap."""
    monkeypatch.setattr("omnidistill.eval.program.ScoringProgram.predict", lambda *a, **k: pytest.fail("eval scored the items"))
    (tmp_path / "a_file").write_text("mine")
    for out, message in [(tmp_path / "a_file", "is a file: eval writes its reports into a folder"), (tmp_path / "a_file" / "sub", "")]:
        assert main(["eval", str(trained_tiny), "--bootstrap", "0", "--no-plots", "--out", str(out)]) == 2
        assert message in capsys.readouterr().err
    assert (tmp_path / "a_file").read_text() == "mine"


def test_a_bad_compare_file_fails_before_the_scoring(trained_tiny, repo_root, tmp_path, capsys, monkeypatch):
    """``--compare`` files were read after the scoring pass."""
    monkeypatch.setattr("omnidistill.eval.program.ScoringProgram.predict", lambda *a, **k: pytest.fail("eval scored the items"))
    judge = tmp_path / "judge.jsonl"
    judge.write_text(json.dumps({"id": "test-0000", "labels": {"clarity": 3}}) + "\n")
    data = repo_root / "data" / "sample" / "test.jsonl"
    args = ["eval", str(trained_tiny), "--data", str(data), "--no-plots", "--out", str(tmp_path / "e"), "--compare"]
    assert main([*args, f"j={judge}"]) == 2
    assert "judge.jsonl: no prediction for 299 item(s)" in capsys.readouterr().err


def test_eval_compares_with_another_run_that_scores_the_items_itself(trained_tiny, repo_root, tmp_path, capsys):
    """``--compare NAME=RUN_DIR``: that run's best checkpoint scores the items. The evaluated run given as
    a judge, once as a folder and once as its own predictions file, is the same judge as the student; a
    folder that is no run directory is refused before any scoring, with the command that makes it one."""
    data = tmp_path / "items.jsonl"
    data.write_text("".join((repo_root / "data" / "sample" / "test.jsonl").read_text().splitlines(keepends=True)[:60]))
    args = ["eval", str(trained_tiny), "--data", str(data), "--no-plots", "--bootstrap", "0"]
    assert main([*args, "--out", str(tmp_path / "first")]) == 0
    predictions = tmp_path / "first" / "test_predictions.jsonl"
    assert main([*args, "--out", str(tmp_path / "e"), "--compare", f"file={predictions}", "--compare", f"run={trained_tiny}"]) == 0
    differences = json.loads((tmp_path / "e" / "test_differences.json").read_text())
    assert [(d["a"], d["b"]) for d in differences] == [("student", "file"), ("student", "run"), ("file", "run")]
    for d in differences:
        assert d["cells"] == 240 and d["pooled"]["mae"]["diff"] == pytest.approx(0, abs=1e-6)
    capsys.readouterr()
    (tmp_path / "folder").mkdir()
    assert main([*args, "--out", str(tmp_path / "e2"), "--compare", f"x={tmp_path / 'folder'}"]) == 2
    assert f"omnidistill import {tmp_path / 'folder'} RUN_DIR" in capsys.readouterr().err


def test_missing_training_data_is_refused_before_the_model_is_loaded(repo_root, tmp_path, capsys, monkeypatch):
    """A config for a Hub backbone (configs/mbert.yaml) downloaded the model, then stopped at
    ``data/omniscore/train.jsonl: file not found``."""

    def no_model(*_a, **_k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("omnidistill.train.setup.checked_model", no_model)
    monkeypatch.chdir(repo_root)  # the tiny config's relative paths
    config = repo_root / "configs" / "tiny.yaml"
    for split, files, message in [
        (
            "train",
            "[data/omniscore/train.jsonl]",
            f"data/omniscore/train.jsonl: file not found (data.train; relative paths are read from the current directory, {repo_root})",
        ),
        ("dev", f"[{repo_root}/data/sample/dev-*.jsonl]", "dev-*.jsonl: no file matches this pattern (data.dev)"),
    ]:
        assert main(["train", str(config), f"data.{split}={files}", f"train.output_dir={tmp_path / 'run'}"]) == 2
        assert message in capsys.readouterr().err
    for override, message in [  # names a later eval of the run would refuse
        ("data.keep_fields=[system, candidate]", "data.keep_fields candidate: the schema or the output line has such a field"),
        ("eval.group_by=[lang]", "eval.group_by lang: every report already groups by task and lang"),
    ]:
        assert main(["train", str(config), override, f"train.output_dir={tmp_path / 'run'}"]) == 2
        assert message in capsys.readouterr().err
    pairs = "data.pairs=data/sample/pairs/train.jsonl"
    for overrides, message in [  # the teacher's pairwise choices, and where their candidates are
        (["data.pairs=data/sample/no_pairs.jsonl"], "data/sample/no_pairs.jsonl: file not found (data.pairs: the output of omnidistill"),
        (["data.pairs=data/sample/train.jsonl"], "data/sample/train.jsonl:1: no id_a (a pair line of label --pairwise has"),
        ([pairs, "data.pair_items=[data/sample/gone.jsonl]"], "gone.jsonl: file not found (data.pair_items"),
        ([pairs, "train.pair_batch_size=4", "mesh.data=8"], "train.pair_batch_size=4 must be divisible by train.grad_accum=1, then by"),
        (["data.dev_pairs=data/sample/pairs/nope.jsonl"], "data/sample/pairs/nope.jsonl: file not found (data.dev_pairs:"),
        (["train.early_stopping_patience=2", "train.early_stopping_metric=dev_pair_accuracy"], "dev_pair_accuracy needs data.dev_pairs"),
    ]:
        assert main(["train", str(config), *overrides, f"train.output_dir={tmp_path / 'run'}"]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_loss_the_head_cannot_take_is_refused_before_the_data_is_read(trained_run, tmp_path, capsys, monkeypatch):
    """It used to fail at the first step's trace, after the data was read and the run directory written."""
    _, args = trained_run

    def no_data(*_a, **_k):
        raise AssertionError("the training data was read")

    monkeypatch.setattr("omnidistill.train.setup.training_records", no_data)
    fresh = tmp_path / "fresh"
    assert main([*args, f"train.output_dir={fresh}", "loss.name=ordinal"]) == 2
    assert "loss 'ordinal' needs model.head=ordinal" in capsys.readouterr().err
    assert not fresh.exists()


def test_resume_into_a_folder_without_checkpoints_says_it_starts_at_step_0(trained_run, tmp_path, monkeypatch, caplog):
    """A mistyped train.output_dir with --resume trained from scratch without a word."""
    _, args = trained_run

    class Stop(Exception):
        pass

    monkeypatch.setattr("omnidistill.train.setup.training_records", lambda *a, **k: (_ for _ in ()).throw(Stop()))
    with caplog.at_level("WARNING", logger="omnidistill.train.setup"), pytest.raises(Stop):
        main([*args, f"train.output_dir={tmp_path / 'typo'}", "--resume"])
    assert f"--resume: {tmp_path / 'typo'} has no checkpoint yet (no such folder); training starts at step 0" in caplog.text


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.max_length=300"], "data.max_length=300 exceeds the model's 256 positions"),
        (["data.max_length=250", "data.length_buckets=[64,512]"], "pad inputs of data.max_length=250 tokens to 512, beyond the model's"),
        (["data.pack_length=512"], "data.pack_length=512 exceeds the model's 256 positions"),
    ],
)
def test_rows_longer_than_the_model_positions_are_refused_before_the_data_is_read(
    trained_run, tmp_path, capsys, monkeypatch, overrides, message
):
    """The tiny BERT has 256 positions. A longer row used to fail when the first batch holding a long
    item was traced, which may be deep into training (the sample's items are short: never, here)."""
    _, args = trained_run
    monkeypatch.setattr("omnidistill.train.setup.training_records", lambda *a, **k: pytest.fail("the training data was read"))
    fresh = tmp_path / "fresh"
    assert main([*args, f"train.output_dir={fresh}", *overrides]) == 2
    assert message in capsys.readouterr().err
    assert not fresh.exists()


def test_the_position_limit_is_the_models_own(trained_tiny):
    """The check's limit is where the model refuses to trace: 256 tokens pass, 257 do not; 256 is
    accepted by the check too (max_length and a bucket of exactly the table's size)."""
    import jax

    from omnidistill.config import load_config
    from omnidistill.runs.load import load_trained
    from omnidistill.train.setup import check_sequence_lengths

    _, graphdef, params, _, _ = load_trained(trained_tiny)
    model = nnx.merge(graphdef, params)
    for length in (256, 257):
        ids = jax.ShapeDtypeStruct((1, length), jnp.int32)
        if length == 256:
            jax.eval_shape(model, ids, ids)
        else:
            with pytest.raises(ValueError, match="exceeds the 256 positions"):
                jax.eval_shape(model, ids, ids)
    cfg = load_config(trained_tiny / "config.yaml", ["data.max_length=256", "data.length_buckets=[64,256]"])
    check_sequence_lengths(cfg, model.arch)


def test_resume_refuses_what_would_change_the_sequence_of_batches(trained_tiny, repo_root, tmp_path, capsys):
    """The saved data iterator's position means the same batches only with the same seed, batch size,
    packing and number of training examples; resuming with others used to go on silently."""
    run = shutil.copytree(trained_tiny, tmp_path / "run")
    args = tiny_run_args(repo_root, run, *TRAINED_TINY)
    assert json.loads((run / "train_data.json").read_text()) == {"examples": 2100}
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    shorter = tmp_path / "train.jsonl"
    shorter.write_text("".join((repo_root / "data" / "sample" / "train.jsonl").read_text().splitlines(keepends=True)[:2000]))
    for extra, message in [
        (["train.seed=7"], "train.seed: checkpoint 0 != config 7"),
        (["train.batch_size=8"], "train.batch_size: checkpoint 16 != config 8"),
        (["data.pack_length=192"], "data.pack_length: checkpoint 0 != config 192"),
        ([f"data.train=[{shorter}]"], "training examples: 2100 when the run started, 2000 now"),
        ([f"data.pairs={repo_root}/data/sample/pairs/train.jsonl"], "data.pairs: checkpoint '' != config"),
    ]:
        assert main([*args, *extra, "--resume"]) == 2
        assert "resuming would not continue the same sequence of training batches" in (err := capsys.readouterr().err), extra
        assert message in err
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before


def test_resume_with_a_different_model_is_refused(trained_run, capsys):
    _, args = trained_run
    assert main([*args, "model.arch.hidden_size=32", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "different model" in err and "hidden_size: checkpoint 64 != config 32" in err


def test_a_different_model_is_what_the_port_reads_not_the_saved_dict():
    """A default written out in one config and left out of the other (the tiny default gave its dropout
    in model.arch until 2026-11-29), or a key the port does not read, is the same model on resume."""
    from omnidistill.models.config_fields import model_differences
    from omnidistill.models.registry import get_family

    port = get_family("bert").config_from_hf
    base = {"vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
    assert model_differences(port, {**base, "hidden_dropout_prob": 0.1, "cls_token_id": 2}, base) == []
    assert model_differences(port, base, {**base, "hidden_size": 32, "hidden_dropout_prob": 0.2}) == [
        "hidden_size: checkpoint 64 != config 32",
        "hidden_dropout_prob: checkpoint 0.1 != config 0.2",
    ]


def test_resume_with_another_input_format_is_refused(trained_run, capsys):
    _, args = trained_run
    assert main([*args, "data.input_format=omniscore", "data.truncation=right", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "data.input_format: checkpoint 'sep' != config 'omniscore'" in err and "data.truncation" in err


def test_input_counts_reach_the_log_and_eval_skips_invalid_on_request(trained_run, tmp_path, repo_root):
    run, _ = trained_run
    first = json.loads((run / "train_log.jsonl").read_text().splitlines()[0])
    assert {"skipped_train", "skipped_dev", "truncated_train", "truncated_dev"} <= set(first) and first["skipped_train"] == 0
    rows = (repo_root / "data" / "sample" / "test.jsonl").read_text().splitlines()[:20]
    long = json.loads(rows[0]) | {"id": "long", "candidate": "word " * 400}
    data = tmp_path / "messy.jsonl"
    data.write_text("\n".join([*rows, '{"candidate": "x", "labels": {"clarity": 7}}', json.dumps(long)]) + "\n")
    args = ["eval", str(run), "--data", str(data), "--out", str(tmp_path / "ev"), "--bootstrap", "0", "--no-plots"]
    assert main(args) == 2  # the bad line stops it, naming the file and line
    assert main([*args, "--skip-invalid"]) == 0
    meta = json.loads((tmp_path / "ev" / "test.json").read_text())["meta"]
    assert meta["items"] == 21 and meta["skipped_records"] == 1 and meta["truncated_inputs"] >= 1
    assert "1 invalid record(s) skipped" in (tmp_path / "ev" / "test.md").read_text()


def test_the_label_command_loads_neither_jax_nor_the_model_ports():
    """``omnidistill label`` only calls an HTTP endpoint: its modules start without jax, flax and the ports
    (a module-level import of the registry in ``runs/run_dir.py`` once pulled them all in)."""
    import subprocess
    import sys

    heavy = ("jax", "flax", "omnidistill.models.registry")
    imports = "import sys, omnidistill.cli, omnidistill.label.config, omnidistill.label.labeler"
    code = f"{imports}; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
