"""Score API and CLI: run directories and exported folders, determinism, input handling."""

import gzip
import json
import logging
import shutil
import sys
import types
from pathlib import Path

import jax
import numpy as np
import pytest

from omnidistill import Scorer
from omnidistill.cli import main
from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS


@pytest.fixture(scope="module")
def run_and_export(tmp_path_factory, trained_tiny):
    """The session's shared tiny run (read only) and its export."""
    folder = tmp_path_factory.mktemp("scorer") / "hf"
    assert main(["export", str(trained_tiny), str(folder), "--verify", "off"]) == 0
    return trained_tiny, folder


def test_loading_a_model_draws_no_random_weights(run_and_export, tmp_path, bert_random_draws):
    """A run directory and both export formats load into a model built from shapes alone: BERT's
    initializer never draws real arrays only for the checkpoint to overwrite them (2-3 s per load of a
    base model), and the scores are the same from all three."""
    from omnidistill.config import ModelConfig
    from omnidistill.models.regressor import build_regressor

    drawn = bert_random_draws
    run, folder = run_and_export
    assert main(["export", str(run), str(tmp_path / "os"), "--format", "omniscore", "--verify", "off"]) == 0
    drawn.clear()  # export may draw; loading must not
    texts = ["Yes.", "No, it is not.", "x " * 30]
    records = [Record(id=str(i), task="qa", lang="en", candidate=c, question="Why?") for i, c in enumerate(texts)]
    scores = [Scorer.load(path).score_records(records) for path in (run, folder, tmp_path / "os")]
    assert drawn == []
    np.testing.assert_allclose(scores[1], scores[0], atol=1e-5)
    np.testing.assert_allclose(scores[2], scores[0], atol=1e-5)
    tiny = dict(model_type="bert", hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8, vocab_size=9)
    build_regressor(ModelConfig(family="bert"), tiny)
    assert drawn  # the spy sees a random init when there is one


INPUTS = dict(
    candidates=["Paris is the capital of France.", "", "Der Mond umkreist die Erde.", "Bees pollinate crops " * 80],
    questions=["What is the capital of France?", None, None, "Why are bees important?"],
    sources=[None, None, "The Moon orbits the Earth.", None],
    tasks=["qa", "qa", "mt", "chat"],
    langs=["en", "en", "de", "en"],
)


def test_run_dir_and_exported_folder_score_the_same(run_and_export, caplog):
    run, hf = run_and_export
    a, b = Scorer.load(run), Scorer.load(hf)
    with caplog.at_level(logging.WARNING):
        sa = a.score(**INPUTS)
    sb = b.score(**INPUTS)
    assert sa[1] is None and sb[1] is None  # empty candidate: no score
    assert "empty" in caplog.text and "truncated" in caplog.text
    for x, y in zip(sa, sb, strict=True):
        if x is not None:
            assert set(x) == {"informativeness", "clarity", "plausibility", "faithfulness"}
            np.testing.assert_allclose(list(x.values()), list(y.values()), atol=1e-5)
            assert all(1 <= v <= 5 for v in x.values())


def test_a_hub_id_loads_as_omniscore_scorer_takes_one(run_and_export, tmp_path, monkeypatch, capsys):
    """``omniscore.OmniScorer("org/name")`` downloads the model; ``Scorer.load`` and ``score --model``
    refused the same id as 'neither a run directory nor a folder'. The Hub is played by a local copy."""
    import huggingface_hub

    _, folder = run_and_export
    asked = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **_: asked.append(repo_id) or str(folder))
    monkeypatch.chdir(tmp_path)  # no local folder of that name
    ours = Scorer.load("me/omnidistill-scorer").score(**INPUTS)
    expected = Scorer.load(folder).score(**INPUTS)
    assert asked == ["me/omnidistill-scorer"] and ours == expected
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "a", "candidate": "Paris.", "question": "Capital?"}) + "\n")
    assert main(["score", "--model", "me/omnidistill-scorer", "--input", "in.jsonl", "--output", "out.jsonl"]) == 0
    assert "me/omnidistill-scorer" in asked[1:] and (tmp_path / "out.jsonl").read_text().count("\n") == 1


def test_scores_are_deterministic_and_order_independent(run_and_export):
    scorer = Scorer.load(run_and_export[0])
    first = scorer.score(**INPUTS)
    assert scorer.score(**INPUTS) == first  # bit for bit
    reordered = scorer.score(**{k: v[::-1] for k, v in INPUTS.items()})[::-1]
    for x, y in zip(first, reordered, strict=True):
        if x is not None:
            np.testing.assert_allclose(list(x.values()), list(y.values()), atol=1e-6)
    with pytest.raises(ValueError, match="sources has 1 items"):
        scorer.score(candidates=["a", "b"], sources=["x"])
    # one string is one item (it was scored character by character, 15 items for 15 letters)
    one = scorer.score(candidates="Paris is the capital of France.")
    assert len(one) == 1 and one == scorer.score(candidates=["Paris is the capital of France."])
    # each item is checked as a file's record is: a number was "empty", a half emoji a TypeError from the tokenizer
    for kwargs, message in [
        ({"candidates": ["a", 5]}, "candidate 1: candidate must be a string, got int"),
        ({"candidates": ["a"], "sources": [7]}, "candidate 0: source must be a string, got int"),
        ({"candidates": ["cut \ud83d"]}, r"candidate 0: candidate holds a lone surrogate \(\\ud83d\)"),
        ({"predictions": [3.5]}, "prediction 0: candidate must be a string, got float"),
    ]:
        with pytest.raises(ValueError, match=message):
            scorer.score(**kwargs)


def test_pandas_missing_values_are_missing_fields(run_and_export, monkeypatch):
    """A column from pandas marks a missing value with NaN (an empty CSV cell read by ``read_csv``):
    such a field is left out as ``None`` is, and such a candidate gets no score. NaN was refused as
    ``source must be a string, got float`` (the ``omniscore`` package fails on it with an AttributeError)."""
    scorer = Scorer.load(run_and_export[0])
    nan = float("nan")
    given = scorer.score(
        candidates=[*INPUTS["candidates"][:1], np.float64("nan"), *INPUTS["candidates"][2:]],
        questions=[q if q is not None else nan for q in INPUTS["questions"]],
        sources=[s if s is not None else np.nan for s in INPUTS["sources"]],
        tasks=[nan, "qa", "mt", "chat"],
        langs=["en", nan, "de", "en"],
    )
    assert given == scorer.score(**{**INPUTS, "tasks": [None, "qa", "mt", "chat"], "langs": ["en", None, "de", "en"]})
    assert given[1] is None and given[0] is not None
    with pytest.raises(ValueError, match="prediction 1 is empty or missing"):
        scorer.score(predictions=["Paris.", nan])
    # pandas' nullable dtypes (convert_dtypes(), dtype_backend=) mark it with pandas.NA, NaT for times:
    # told apart by identity with the attributes of the pandas the caller imported (a stand-in here, as
    # the suite does not install pandas; any other use of it fails)
    pandas = types.ModuleType("pandas")
    pandas.NA, pandas.NaT = object(), object()
    monkeypatch.setitem(sys.modules, "pandas", pandas)
    nullable = scorer.score(
        candidates=[*INPUTS["candidates"][:1], pandas.NA, *INPUTS["candidates"][2:]],
        questions=[q if q is not None else pandas.NA for q in INPUTS["questions"]],
        sources=[s if s is not None else pandas.NaT for s in INPUTS["sources"]],
        tasks=[pandas.NA, "qa", "mt", "chat"],
        langs=["en", pandas.NA, "de", "en"],
    )
    assert nullable == given


def test_score_cli_jsonl_and_csv(run_and_export, repo_root, tmp_path, capsys):
    run, hf = run_and_export
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(hf), "--input", str(repo_root / "data" / "sample" / "test.jsonl"), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 300 and set(rows[0]["scores"]) == {"informativeness", "clarity", "plausibility", "faithfulness"}
    items = [json.loads(line) for line in (repo_root / "data" / "sample" / "test.jsonl").read_text().splitlines()]
    unlabelled = [{k: v for k, v in item.items() if k not in ("labels", "annotations", "label_dist")} for item in items]
    assert [{k: v for k, v in row.items() if k != "scores"} for row in rows] == unlabelled  # each line: its item's fields, no labels
    printed = capsys.readouterr().out
    assert "mean scores" in printed and "| lang=hi |" in printed and "| task=qa |" in printed
    csv = tmp_path / "in.csv"
    csv.write_text("id,task,lang,question,candidate\na,qa,en,What is it?,Paris.\nb,qa,en,,Berlin.\n")
    assert main(["score", "--model", str(run), "--input", str(csv), "--output", str(tmp_path / "csv.jsonl")]) == 0
    assert len((tmp_path / "csv.jsonl").read_text().splitlines()) == 2
    packed = tmp_path / "in.csv.gz"  # a compressed input reads as the plain file, here in a worker process
    packed.write_bytes(gzip.compress(csv.read_bytes()))
    gz = ["score", "--model", str(run), "--input", str(packed), "--output", str(tmp_path / "gz.jsonl"), "--input-workers", "1"]
    assert main(gz) == 0
    assert (tmp_path / "gz.jsonl").read_text() == (tmp_path / "csv.jsonl").read_text()


def test_score_as_labels_writes_the_scores_as_a_training_files_labels(run_and_export, repo_root, tmp_path):
    """A sigmoid head's ``--as-labels`` output: the scores ``score`` writes, as ``labels`` that the
    training reader takes (no ``label_dist``: the head has no distribution); resuming it without the
    flag is refused by name."""
    from omnidistill.data.sources import read_records

    _, hf = run_and_export
    items = tmp_path / "items.jsonl"
    items.write_text("".join((repo_root / "data" / "sample" / "test.jsonl").read_text().splitlines(keepends=True)[:40]))
    plain, labelled = tmp_path / "scores.jsonl", tmp_path / "labels.jsonl"
    assert main(["score", "--model", str(hf), "--input", str(items), "--output", str(plain)]) == 0
    assert main(["score", "--model", str(hf), "--input", str(items), "--output", str(labelled), "--as-labels"]) == 0
    scores = [json.loads(line)["scores"] for line in plain.read_text().splitlines()]
    records, skipped = read_records([str(labelled)])
    assert skipped == 0 and [dict(zip(DIMENSIONS, r.labels, strict=True)) for r in records] == scores
    assert all(not r.label_dist and not r.annotations for r in records)
    assert json.loads((tmp_path / "labels.jsonl.scorer.json").read_text())["as_labels"] is True
    labelled.write_text(labelled.read_text().splitlines(keepends=True)[0])
    from omnidistill.score_file import score_file

    with pytest.raises(ValueError, match=r"written with --as-labels .*: resume it with --as-labels, not without"):
        score_file(Scorer.load(hf), [items], labelled, resume=True)


def test_score_cli_malformed_input_names_the_line(run_and_export, tmp_path, capsys):
    """The error is a line of its own: the progress bar is closed first (it was printed after the bar)."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"candidate": "fine"}\n{"candidate": ""}\n')
    assert main(["score", "--model", str(run_and_export[0]), "--input", str(bad), "--output", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "score: 0item" in err  # the bar was shown
    assert "omnidistill score: error: " + str(bad) + ":2: missing or empty 'candidate'" in err.splitlines()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # no empty output, no .scorer.json
    # an error after lines were written keeps them, for --resume once the input is fixed
    assert (
        main(["score", "--model", str(run_and_export[0]), "--input", str(bad), "--output", str(tmp_path / "o.jsonl"), "--chunk", "1"]) == 2
    )
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 1 and (tmp_path / "o.jsonl.scorer.json").is_file()
    bad.write_text('{"candidate": "fine"}\n{"candidate": "fixed"}\n')
    assert main(["score", "--model", str(run_and_export[0]), "--input", str(bad), "--output", str(tmp_path / "o.jsonl"), "--resume"]) == 0
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 2


def test_ctrl_c_keeps_the_written_lines_and_says_how_to_continue(run_and_export, tmp_path, capsys, monkeypatch):
    """Ctrl-C printed a 30-line traceback ending in KeyboardInterrupt; now one line says what is kept
    and how to go on (exit status 130), and --resume does."""
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "candidate": f"answer {i}"}) + "\n" for i in range(3)))
    out = tmp_path / "out.jsonl"
    real, calls = Scorer.predict, []

    def interrupted_at_the_second_chunk(self, records, **kwargs):
        calls.append(len(records))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, records, **kwargs)

    monkeypatch.setattr(Scorer, "predict", interrupted_at_the_second_chunk)
    args = ["score", "--model", str(run_and_export[1]), "--input", str(data), "--output", str(out), "--chunk", "1"]
    assert main(args) == 130
    assert f"omnidistill score: interrupted; the lines already written to {out} are kept" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 1
    monkeypatch.setattr(Scorer, "predict", real)
    assert main([*args, "--resume"]) == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["0", "1", "2"]


def test_score_cli_checks_its_paths_before_loading_the_model(run_and_export, repo_root, tmp_path, capsys, monkeypatch):
    """A missing input, an output that is an input, or an output that exists is refused before the model
    loads and writes nothing; an output in a new folder gets the folder."""
    sample = tmp_path / "in.jsonl"
    shutil.copy(repo_root / "data" / "sample" / "test.jsonl", sample)
    (tmp_path / "done.jsonl").write_text("kept\n")
    loaded = []
    real_load = Scorer.load
    monkeypatch.setattr(Scorer, "load", staticmethod(lambda *a, **k: loaded.append(a) or real_load(*a, **k)))
    refusals = [
        (["--input", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "o.jsonl")], "missing.jsonl: file not found"),
        (["--input", str(sample), "--output", str(tmp_path / "." / "in.jsonl"), "--resume"], "is one of the inputs"),
        (["--input", str(sample), "--output", str(tmp_path / "done.jsonl")], "exists: pass --resume"),
        (["--input", str(sample), "--output", str(tmp_path), "--resume"], "is a folder: name the JSONL file"),
        (["--input", str(sample), "--output", str(tmp_path / "o.jsonl.gz")], "written as plain JSONL, a line at a time"),
        # JSONL was written under these names, which pandas.read_parquet and read_csv then refuse or misread
        (["--input", str(sample), "--output", str(tmp_path / "o.parquet")], "written as JSONL, a line at a time, not as Parquet"),
        (["--input", str(sample), "--output", str(tmp_path / "o.CSV")], "not as CSV; name a .jsonl file"),
        # a pattern is expanded before the output check, so it cannot take the output for an input
        (["--input", str(tmp_path / "*.jsonl"), "--output", str(tmp_path / "done.jsonl"), "--resume"], "is one of the inputs"),
        (["--input", str(tmp_path / "x-*.jsonl"), "--output", str(tmp_path / "o.jsonl")], "x-*.jsonl: no file matches this pattern"),
    ]
    for args, message in refusals:
        assert main(["score", "--model", str(run_and_export[0]), *args]) == 2
        assert message in capsys.readouterr().err
    assert loaded == [] and sorted(p.name for p in tmp_path.iterdir()) == ["done.jsonl", "in.jsonl"]
    out = tmp_path / "new" / "folder" / "o.jsonl"
    assert main(["score", "--model", str(run_and_export[0]), "--input", str(sample), "--output", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 300 and loaded


def test_fields_of_the_users_own_are_carried_to_the_output_when_named(run_and_export, tmp_path, capsys):
    """A dataset's own columns (a system name, a prompt id) were refused as unknown fields, so a user had
    to drop them and join the scores back; ``--keep-fields`` reads them, never as model input, and writes
    them beside the scores. An unnamed field is still refused, naming the option; a schema field cannot be kept."""
    model = str(run_and_export[0])
    rows = [{"id": "a", "candidate": "Paris.", "question": "Capital?", "system": "sys-1", "prompt": {"n": 3}}]
    rows.append({"id": "b", "candidate": "Rome."})
    (tmp_path / "own.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "plain.jsonl").write_text("".join(json.dumps({k: r[k] for k in r if k not in ("system", "prompt")}) + "\n" for r in rows))
    args = ["score", "--model", model, "--input", str(tmp_path / "own.jsonl"), "--output"]
    assert main([*args, str(tmp_path / "o1.jsonl"), "--keep-fields", "system"]) == 2  # prompt is not named
    assert "unknown field(s) prompt; only the schema's fields are read" in capsys.readouterr().err
    assert main([*args, str(tmp_path / "o1.jsonl"), "--keep-fields", "question,system"]) == 2
    assert "--keep-fields question: the schema or the output line has such a field" in capsys.readouterr().err
    assert main([*args, str(tmp_path / "o2.jsonl"), "--keep-fields", "system, prompt"]) == 0
    assert main(["score", "--model", model, "--input", str(tmp_path / "plain.jsonl"), "--output", str(tmp_path / "o3.jsonl")]) == 0
    kept, plain = ([json.loads(line) for line in (tmp_path / name).read_text().splitlines()] for name in ("o2.jsonl", "o3.jsonl"))
    assert [(r["system"], r["prompt"]) for r in kept[:1]] == [("sys-1", {"n": 3})] and "system" not in kept[1]
    assert [{k: v for k, v in r.items() if k not in ("system", "prompt")} for r in kept] == plain  # the same scores
    capsys.readouterr()
    assert main([*args, str(tmp_path / "o4.jsonl"), "--keep-fields", "prompt", "--group-by", "system"]) == 0  # read as kept, too
    table = capsys.readouterr().out
    for i, name in enumerate(("sys-1", "(none)")):  # the mean of one item is its scores
        assert f"| system={name} | 1 | " + " | ".join(f"{kept[i]['scores'][d]:.3f}" for d in DIMENSIONS) + " |" in table
    assert [json.loads(line) for line in (tmp_path / "o4.jsonl").read_text().splitlines()] == kept
    saved = json.loads((tmp_path / "o4.jsonl.means.json").read_text())  # the table's figures, for scripts
    assert saved["by"]["system"]["sys-1"] == {"items": 1, "means": kept[0]["scores"]}
    both = {d: (kept[0]["scores"][d] + kept[1]["scores"][d]) / 2 for d in DIMENSIONS}
    assert saved["items"] == 2 and saved["means"] == pytest.approx(both)


def test_one_compiled_function_per_length_bucket(run_and_export, repo_root):
    """Many batches of varied lengths compile once per bucket they use, never once per batch."""
    from omnidistill.data.sources import read_records

    records = read_records(repo_root / "data" / "sample" / "test.jsonl")[0]
    scorer = Scorer.load(run_and_export[0], batch_size=8)
    texts = [r.candidate for r in records]
    scorer.score(candidates=texts, sources=[r.source for r in records])
    batches = -(-len(texts) // 8)
    compiled = scorer.program.predict_fn._cache_size()
    assert 1 <= compiled <= len(scorer.program.buckets) < batches
    scorer.score(candidates=texts[::-1], sources=[r.source for r in records][::-1])
    assert scorer.program.predict_fn._cache_size() == compiled  # a second call reuses them


def test_warm_up_compiles_exactly_what_scoring_then_uses(run_and_export, repo_root):
    """After warm_up(records), scoring them compiles nothing more (eval's timing excludes compilation)."""
    from omnidistill.data.sources import read_records

    records = read_records(repo_root / "data" / "sample" / "test.jsonl")[0][:40]
    scorer = Scorer.load(run_and_export[0], batch_size=8)
    scorer.warm_up(records)
    compiled = scorer.program.predict_fn._cache_size()
    scorer.score_records(records)
    assert scorer.program.predict_fn._cache_size() == compiled >= 1


def test_batches_filled_by_tokens_score_as_batches_of_items(run_and_export, repo_root, tmp_path):
    """``eval.batch_tokens`` (the default for BERT) fills batches by real tokens, one group per batch shard,
    and runs the layers unpadded: ``score`` writes the scores that batches of padded items give."""
    from omnidistill.data.sources import read_records

    run, hf = run_and_export
    records = read_records(repo_root / "data" / "sample" / "test.jsonl")[0][:64]
    by_tokens, by_items = Scorer.load(hf, batch_tokens=512), Scorer.load(hf, batch_tokens=0)
    budget = by_tokens.program.budget
    assert budget.groups == len(jax.devices()) and budget.per_group == 512 and by_items.program.budget is None
    assert Scorer.load(hf).program.budget is None  # unset on several batch shards: batches of items
    b = by_items.score_records(records)
    assert np.max(np.abs(b - b[::-1])) > 1e-3  # items score apart by far more than the tolerance: a mix-up would show
    data = tmp_path / "in.jsonl"
    data.write_text("".join((repo_root / "data" / "sample" / "test.jsonl").read_text().splitlines(keepends=True)[:64]))
    out = tmp_path / "scores.jsonl"
    assert main(["score", "--model", str(run), "--input", str(data), "--output", str(out), "--batch-tokens", "512"]) == 0
    written = np.array([list(json.loads(line)["scores"].values()) for line in out.read_text().splitlines()])
    np.testing.assert_allclose(written, b, atol=1e-5)


def test_scoring_counts_the_inputs_it_truncates(run_and_export, tmp_path, caplog):
    """The Scorer and ``score`` count the inputs over ``max_length`` from the one tokenizer pass that gives
    the ids: as many as the tokenizer itself puts over the limit, and say so once per call."""
    from omnidistill.score_file import score_file

    scorer = Scorer.load(run_and_export[1])
    records = [
        Record(id=str(i), task="qa", lang="en", candidate=" ".join(["word"] * n), source="Why?") for i, n in enumerate((3, 400, 40, 900, 7))
    ]
    over = sum(len(scorer.tokenizer(scorer.encoder.text(r))["input_ids"]) > scorer.max_length for r in records)
    assert over == 2 and scorer.predict(records).truncated == over
    data = tmp_path / "in.jsonl"
    data.write_text(
        "".join(json.dumps({"id": r.id, "task": "qa", "lang": "en", "source": r.source, "candidate": r.candidate}) + "\n" for r in records)
    )
    with caplog.at_level(logging.WARNING, logger="omnidistill.scorer"):
        assert score_file(scorer, [data], tmp_path / "out.jsonl", chunk=2)["truncated"] == over
    warned = f"{over} input(s) exceed {scorer.max_length} tokens and are truncated (data.truncation={scorer.encoder.truncation})"
    assert [r.getMessage() for r in caplog.records if r.name == "omnidistill.scorer"] == [warned]


def test_unset_batch_tokens_fill_by_tokens_only_on_one_cpu_shard():
    """The measured default (2,048 real tokens) applies on one CPU batch shard; several shards, and GPU or
    TPU (no budget measured there yet), keep batches of items unless ``eval.batch_tokens`` is set."""
    from omnidistill.eval.predict import DEFAULT_BATCH_TOKENS, default_batch_tokens

    assert default_batch_tokens(1, "cpu") == DEFAULT_BATCH_TOKENS
    assert [default_batch_tokens(8, "cpu"), default_batch_tokens(1, "gpu"), default_batch_tokens(1, "tpu")] == [0, 0, 0]


def test_batches_are_sorted_by_tokens_not_characters(run_and_export):
    """A long word is one token and a short spaced string many: token counts decide the batching, and the
    one partial batch holds the shortest inputs."""
    from omnidistill.data.pipeline import eval_dataset

    scorer = Scorer.load(run_and_export[0], batch_size=2)
    few_tokens = Record(id="few", task="qa", lang="en", candidate="x" * 120)  # over WordPiece's word limit: one [UNK]
    many_tokens = Record(id="many", task="qa", lang="en", candidate=" ".join("abcdefghijklmnopqrst"))
    middle = Record(id="mid", task="qa", lang="en", candidate="a b c d e f")
    records = [many_tokens, middle, few_tokens]
    lengths = [len(scorer.encoder(r)["input_ids"]) for r in records]
    assert lengths[2] < lengths[1] < lengths[0] and len(few_tokens.candidate) > len(many_tokens.candidate)
    batches = [
        b["index"].tolist()
        for b in eval_dataset(
            scorer.encoder.token_ids_many(records), pad_id=scorer.encoder.pad_id, global_batch=2, buckets=scorer.program.buckets
        )
    ]
    assert batches == [[2, -1], [1, 0]]


def test_eval_reports_cost_per_1000_items(run_and_export, tmp_path, capsys):
    run, _ = run_and_export
    args = ["eval", str(run), "--no-plots", "--bootstrap", "0", "--usd-per-hour", "2.49", "--out", str(tmp_path)]
    assert main([*args, "--xla-option", "xla_gpu_graph_min_graph_size=2"]) == 0  # a GPU option: checked, no effect on a CPU
    meta = json.loads((tmp_path / "test.json").read_text())["meta"]
    assert meta["usd_per_1000"] == pytest.approx(meta["seconds_per_1000"] / 3600 * 2.49)
    assert meta["compiler_options"] == {"xla_gpu_graph_min_graph_size": 2}  # the time depends on them
    assert "per 1,000 at $2.49/h" in (tmp_path / "test.md").read_text()


def strict_json_loads(text: str):
    """``json.loads`` as JSON's grammar reads: ``NaN`` and ``Infinity`` (Python's extensions) refused."""

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_undefined_metrics_are_null_in_the_json_report(run_and_export, repo_root, tmp_path):
    """Labels that never vary leave Pearson r undefined; test.json held ``NaN``, which strict JSON readers
    (JavaScript's JSON.parse, Go, Rust) refuse, so the whole report could not be read there."""
    run, _ = run_and_export
    rows = [json.loads(line) for line in (repo_root / "data" / "sample" / "test.jsonl").read_text().splitlines()[:30]]
    for row in rows:
        row["labels"] = dict.fromkeys(("informativeness", "clarity", "plausibility", "faithfulness"), 3)
        row.pop("annotations", None)
    (tmp_path / "flat.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
    assert main(["eval", str(run), "--data", str(tmp_path / "flat.jsonl"), "--no-plots", "--bootstrap", "20", "--out", str(tmp_path)]) == 0
    report = strict_json_loads((tmp_path / "test.json").read_text())
    assert report["overall"]["pearson"] is None and report["overall"]["mae"] > 0
    assert "| – |" in (tmp_path / "test.md").read_text()


def test_every_text_field_of_the_schema_is_a_score_column(run_and_export):
    """contexts= and titles= build the input text as the record fields do (and change the scores)."""

    scorer = Scorer.load(run_and_export[0])
    kwargs = dict(
        candidates=["Yes, it opens at nine.", "A calm night at sea."],
        questions=["When does it open?", None],
        contexts=["user: is the museum open today?\nassistant: yes", None],
        titles=[None, "Sea stories"],
        references=[None, "A quiet night on the ocean."],
        tasks=["chat", "headline"],
        langs="en",
        ids=["a", "b"],
        datasets="mine",
        src_langs=None,
        tgt_langs="en",
        group_ids=["g1", "g2"],
    )
    got = scorer.score(**kwargs)
    records = [
        Record(
            id="a", task="chat", lang="en", candidate=kwargs["candidates"][0], question="When does it open?", context=kwargs["contexts"][0]
        ),
        Record(
            id="b", task="headline", lang="en", candidate=kwargs["candidates"][1], title="Sea stories", reference=kwargs["references"][1]
        ),
    ]
    want = scorer.score_records(records)
    np.testing.assert_array_equal(np.array([list(g.values()) for g in got]), want)
    without = scorer.score(candidates=kwargs["candidates"], questions=kwargs["questions"], references=kwargs["references"])
    assert list(without[0].values()) != list(got[0].values()) and list(without[1].values()) != list(got[1].values())


def test_code_written_for_the_omniscore_package_runs_unchanged_with_the_same_scores(run_and_export):
    """``score(predictions, sources=, references=, tasks=)`` as OmniScorer takes it, and its result's
    shape: checked against the real package on the exported folder."""
    omniscore = pytest.importorskip("omniscore")
    _, folder = run_and_export
    preds = ["Paris is the capital of France.", "Der Mond umkreist die Erde.", "It is blue because of scattering."]
    call = dict(
        sources=["What is the capital of France?", "The Moon orbits the Earth.", None], references=[None, "The Moon circles Earth.", None]
    )
    theirs = omniscore.OmniScorer(str(folder), device="cpu", max_length=192).score(preds, **call, batch_size=2)
    ours = Scorer.load(folder).score(preds, **call, batch_size=2)  # positional, as written for OmniScorer
    assert ours.score_names == tuple(theirs.score_names) and ours.scores.shape == theirs.scores.shape == (3, 4)
    np.testing.assert_allclose(ours.scores, theirs.scores, atol=1e-4)
    np.testing.assert_allclose(ours.overall, theirs.overall, atol=1e-4)
    assert ours.to_list()[0].keys() == theirs.to_list()[0].keys()
    np.testing.assert_allclose(list(ours.mean().values()), list(theirs.mean().values()), atol=1e-4)
    one = Scorer.load(folder).score(predictions=preds[0], sources=call["sources"][0])  # a single string, as the package allows
    np.testing.assert_allclose(one.scores[0], theirs.scores[0], atol=1e-4)
    tasks = ["qa", "mt", "chat"]  # the package writes a given task into the text; so does this call
    theirs = omniscore.OmniScorer(str(folder), device="cpu", max_length=192).score(preds, **call, tasks=tasks)
    ours = Scorer.load(folder).score(predictions=preds, **call, tasks=tasks)
    np.testing.assert_allclose(ours.scores, theirs.scores, atol=1e-4)
    with pytest.raises(ValueError, match="exactly one"):
        Scorer.load(folder).score(candidates=preds, predictions=preds)
    with pytest.raises(ValueError, match="its own max_length=192"):
        Scorer.load(folder).score(predictions=preds, max_length=64)


def test_score_resumes_an_interrupted_output_without_rescoring(run_and_export, repo_root, tmp_path, capsys):
    """A cut output (complete lines plus half a line) is continued: kept lines stay byte for byte, the
    cut line is redone, the rest is scored; a foreign output, repeated input ids and another model are
    refused (the same model exported may continue it)."""
    run, folder = run_and_export
    data = repo_root / "data" / "sample" / "test.jsonl"
    full = tmp_path / "full.jsonl"
    assert main(["score", "--model", str(run), "--input", str(data), "--output", str(full), "--chunk", "64"]) == 0
    lines = full.read_text(encoding="utf-8").splitlines(keepends=True)
    written_by = full.with_name("full.jsonl.scorer.json")
    assert json.loads(written_by.read_text())["model"] == str(run)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:130]) + lines[130][:25], encoding="utf-8")
    shutil.copy(written_by, tmp_path / "cut.jsonl.scorer.json")  # as an interrupted run leaves it
    assert main(["score", "--model", str(run), "--input", str(data), "--output", str(cut)]) == 2
    assert "exists: pass --resume" in capsys.readouterr().err
    assert main(["score", "--model", str(run), "--input", str(data), "--output", str(cut), "--chunk", "64", "--resume"]) == 0
    assert "(kept 130 already scored, scored 170)" in capsys.readouterr().out
    again = cut.read_text(encoding="utf-8").splitlines(keepends=True)
    assert again[:130] == lines[:130] and len(again) == 300
    for a, b in zip(again[130:], lines[130:], strict=True):
        a, b = json.loads(a), json.loads(b)
        assert a["id"] == b["id"]
        np.testing.assert_allclose(list(a["scores"].values()), list(b["scores"].values()), atol=1e-5)
    other = tmp_path / "other.jsonl"
    other.write_text("".join(lines[1:3]), encoding="utf-8")
    assert main(["score", "--model", str(run), "--input", str(data), "--output", str(other), "--resume"]) == 2
    assert f"{other}:1: id 'test-0001', but input item 1 is 'test-0000'" in capsys.readouterr().err
    dup = tmp_path / "dup.jsonl"
    rows = data.read_text(encoding="utf-8").splitlines()
    dup.write_text("\n".join([*rows[:4], rows[1]]) + "\n", encoding="utf-8")
    partial = tmp_path / "partial.jsonl"
    partial.write_text(lines[0], encoding="utf-8")
    assert main(["score", "--model", str(run), "--input", str(dup), "--output", str(partial), "--resume"]) == 2
    assert f"id 'test-0001' at {dup}:5 repeats {dup}:2" in capsys.readouterr().err

    # another model (one tensor changed) may not continue the output; the same model, exported, may
    from safetensors.numpy import load_file, save_file

    changed = tmp_path / "changed"
    shutil.copytree(folder, changed)
    tensors = load_file(str(changed / "model.safetensors"))
    key = sorted(tensors)[-1]
    tensors[key] = tensors[key] + np.float32(1e-3)
    save_file(tensors, str(changed / "model.safetensors"))
    half = tmp_path / "half.jsonl"
    half.write_text("".join(lines[:10]) + lines[10][:7], encoding="utf-8")
    shutil.copy(written_by, tmp_path / "half.jsonl.scorer.json")
    assert main(["score", "--model", str(changed), "--input", str(data), "--output", str(half), "--resume"]) == 2
    assert f"{half} was scored by {run} (half.jsonl.scorer.json), and {changed} is another model" in capsys.readouterr().err
    assert half.read_text(encoding="utf-8") == "".join(lines[:10]) + lines[10][:7]  # refused before any change
    assert main(["score", "--model", str(folder), "--input", str(data), "--output", str(half), "--resume"]) == 0
    assert len(half.read_text(encoding="utf-8").splitlines()) == 300


class _ConstantScorer:
    """The Scorer's interface without a model: what score_file needs, for measuring its own memory."""

    source = "constant"

    def __init__(self, encoder):
        self.encoder, self.max_length = encoder, encoder.max_length

    def fingerprint(self):
        return "constant"

    def predict(self, records, encoded=None):
        from omnidistill.scorer import Prediction

        return Prediction(np.full((len(records), 4), 3.0, np.float32))

    def warn_truncated(self, count):
        assert count == 0


def test_scoring_a_file_holds_one_chunk_not_the_file(tmp_path, tiny_tokenizer_dir):
    """Python memory while scoring 1,000 and 4,000 lines in chunks of 125 is the same (the model's own
    arrays are XLA's and not counted): the file is streamed, two chunks at most are held (the one scored
    and the next, read and tokenized ahead), and lines are written as they are scored."""
    import tracemalloc

    from transformers import AutoTokenizer

    from omnidistill.data.tokenize import RecordEncoder
    from omnidistill.score_file import score_file

    scorer = _ConstantScorer(RecordEncoder(AutoTokenizer.from_pretrained(tiny_tokenizer_dir), 512))  # no item cut: one batched call
    peaks = []
    for n in (1_000, 4_000):
        path = tmp_path / f"in{n}.jsonl"
        path.write_text(
            "".join(json.dumps({"id": f"r{i}", "task": "qa", "lang": "en", "candidate": f"answer {i} " * 20}) + "\n" for i in range(n))
        )
        tracemalloc.start()
        try:
            done = score_file(scorer, [path], tmp_path / f"out{n}.jsonl", chunk=125)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert done["items"] == n and len((tmp_path / f"out{n}.jsonl").read_text().splitlines()) == n
    assert peaks[1] < 1.3 * peaks[0], peaks


def test_scoring_a_file_reads_and_tokenizes_the_next_chunk_while_one_is_scored(tmp_path, tiny_tokenizer_dir):
    """score_file hands each chunk's token ids to the scorer (none made again there), and the next chunk
    is read and tokenized while the scorer scores one: the host's input work overlaps the device's."""
    import threading

    from transformers import AutoTokenizer

    from omnidistill.data.tokenize import RecordEncoder
    from omnidistill.score_file import score_file

    encoder = RecordEncoder(AutoTokenizer.from_pretrained(tiny_tokenizer_dir), 64)
    tokenized = [threading.Event() for _ in range(4)]
    calls = iter(tokenized)

    class LoggingEncoder:
        max_length = encoder.max_length

        def encode_inputs(self, records):
            out = encoder.encode_inputs(records)
            next(calls).set()
            return out

    class OverlapScorer(_ConstantScorer):
        scored = 0

        def predict(self, records, encoded=None):
            assert [len(x) for x in encoded.ids] == [len(x) for x in encoder.encode_inputs(records).ids]
            following = self.scored + 1  # the next chunk, if there is one, is tokenized before this one is done
            if following < 3:
                assert tokenized[following].wait(timeout=30), f"chunk {following} was not read while chunk {self.scored} was scored"
            self.scored += 1
            return super().predict(records)

    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "task": "qa", "lang": "en", "candidate": f"answer {i}"}) + "\n" for i in range(25)))
    done = score_file(OverlapScorer(LoggingEncoder()), [path], tmp_path / "out.jsonl", chunk=10)
    assert done["scored"] == 25 and [json.loads(x)["id"] for x in (tmp_path / "out.jsonl").read_text().splitlines()] == [
        f"r{i}" for i in range(25)
    ]


def test_eval_of_an_exported_folder_names_import_and_the_hint_works(run_and_export, repo_root, tmp_path, capsys):
    """``eval`` takes a run directory; given an export (or a Hub checkpoint) it says how to make one of
    it, and the command it names makes a run of it."""
    from omnidistill.runs.run_dir import load_run_metadata

    _, folder = run_and_export
    dev = str(repo_root / "data" / "sample" / "dev.jsonl")
    assert main(["eval", str(folder), "--data", dev, "--no-plots", "--out", str(tmp_path / "no")]) == 2
    assert f"`omnidistill import {folder} RUN_DIR` makes a run of it" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
    assert main(["import", str(folder), str(tmp_path / "back")]) == 0
    load_run_metadata(tmp_path / "back")  # what eval reads first (an imported run scores as its export: test_omniscore_format.py)
    hub_id = "me/omnidistill-scorer"  # no such folder: a Hub id, which `import` takes (`score` too, not `eval`)
    assert main(["eval", hub_id, "--data", dev, "--no-plots", "--out", str(tmp_path / "no")]) == 2
    assert f"{hub_id}: no such folder (from {Path.cwd()}); for a model on the Hugging Face Hub, `omnidistill import {hub_id} RUN_DIR`" in (
        capsys.readouterr().err
    )


def test_xla_options_reach_the_scoring_program_and_unknown_ones_fail_by_name(run_and_export, tmp_path, monkeypatch, capsys):
    """eval.compiler_options (and --xla-option over it) are compiled into the scoring program; XLA checks
    them when scoring starts, so a misspelt option fails naming the field before any batch is scored."""
    import omnidistill.eval.run_eval as run_eval
    import omnidistill.scorer as scorer_module
    from omnidistill.cli import xla_option

    run, hf = run_and_export
    records = [Record(id="a", task="qa", lang="en", candidate="Paris.", question="Capital of France?")]
    plain = Scorer.load(hf).predict(records).scores
    options = {"xla_gpu_enable_command_buffer": "", "xla_gpu_graph_min_graph_size": 2}  # GPU options: parsed on any backend
    tuned = Scorer.load(hf, compiler_options=options)
    assert tuned.compiler_options == options
    np.testing.assert_array_equal(tuned.predict(records).scores, plain)
    with pytest.raises(ValueError, match=r"eval.compiler_options: .*No such compile option: 'xla_gpu_no_such_option'"):
        Scorer.load(run, compiler_options={"xla_gpu_no_such_option": True})
    with pytest.raises(ValueError, match=r"eval.compiler_options: .*xla_gpu_graph_min_graph_size"):  # a wrong type, by name
        Scorer.load(run, compiler_options={"xla_gpu_graph_min_graph_size": "two"})
    # past the check, an option reaches the program's compile: an unknown one fails there, so it was passed
    monkeypatch.setattr(scorer_module, "checked_compiler_options", lambda options, where: dict(options))
    with pytest.raises(Exception, match="No such compile option: 'xla_gpu_no_such_option'"):
        Scorer.load(hf, compiler_options={"xla_gpu_no_such_option": True}).predict(records)
    monkeypatch.undo()
    # the CLI: NAME=VALUE read as YAML, for score and eval
    assert xla_option("xla_gpu_enable_command_buffer=") == ("xla_gpu_enable_command_buffer", "")
    assert xla_option("a=true") == ("a", True) and xla_option("a=4") == ("a", 4)
    with pytest.raises(Exception, match="NAME=VALUE"):
        xla_option("=4")
    out = tmp_path / "out.jsonl"
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": "a", "task": "qa", "lang": "en", "candidate": "Paris.", "question": "Capital?"}) + "\n")
    capsys.readouterr()
    score = ["score", "--model", str(run), "--input", str(source), "--output", str(out)]
    assert main([*score, "--xla-option", "xla_gpu_no_such_option=1"]) == 2
    assert "eval.compiler_options: " in capsys.readouterr().err and not out.exists()
    seen = {}

    def stop(*args, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stopped before scoring")

    monkeypatch.setattr(run_eval.ScoringProgram, "build", stop)
    args = ["eval", str(run), "--no-plots", "--bootstrap", "0", "--out", str(tmp_path / "ev")]
    assert main([*args, "--xla-option", "xla_gpu_graph_min_graph_size=3"]) == 2 and "stopped before scoring" in capsys.readouterr().err
    assert seen["compiler_options"] == {"xla_gpu_graph_min_graph_size": 3}


def test_bfloat16_scoring_computes_in_bf16_close_to_float32(run_and_export, repo_root, tmp_path, capsys):
    """eval.compute_dtype / --dtype bfloat16 builds the scoring model in bf16 (as training computes): its
    scores are not float32's bit for bit, but close; the fingerprint tells the two apart, so a --resume
    cannot mix them; float32 stays the default and matches the export."""
    from omnidistill.data.sources import read_records

    run, hf = run_and_export
    lines = (repo_root / "data" / "sample" / "test.jsonl").read_text().splitlines()[:48]
    (tmp_path / "few.jsonl").write_text("\n".join(lines) + "\n")
    records, _ = read_records([str(tmp_path / "few.jsonl")])
    full = Scorer.load(run)
    half = Scorer.load(run, compute_dtype="bfloat16")
    assert (full.compute_dtype, half.compute_dtype) == ("float32", "bfloat16")
    a, b = full.predict(records).scores, half.predict(records).scores
    gap = np.abs(a - b)
    assert gap.max() > 0 and gap.max() < 0.01, gap.max()  # bf16 matmuls: changed, slightly (0.0017 at most measured)
    np.testing.assert_allclose(Scorer.load(hf).predict(records).scores, a, atol=1e-5)  # the default is the export's float32
    np.testing.assert_allclose(Scorer.load(hf, compute_dtype="bfloat16").predict(records).scores, b, atol=1e-2)  # an export too
    assert full.fingerprint() == Scorer.load(hf).fingerprint() != half.fingerprint()
    with pytest.raises(ValueError, match="compute_dtype='float16'"):
        Scorer.load(run, compute_dtype="float16")
    out = tmp_path / "ev"
    args = ["eval", str(run), "--data", str(tmp_path / "few.jsonl"), "--no-plots", "--bootstrap", "0", "--out", str(out)]
    assert main([*args, "--dtype", "bfloat16"]) == 0
    assert json.loads((out / "test.json").read_text())["meta"]["compute_dtype"] == "bfloat16"


def test_score_pairs_reports_how_often_the_scores_order_each_pair_as_the_judges_chose(run_and_export, repo_root, tmp_path, capsys):
    """``score --pairs``: pairs of the sample's test items that share an input, the winner the one with
    the higher mean label (null on equal means), plus a pair naming an id not in the file. The
    agreement in ``OUTPUT.pairs.json`` is numpy's, from the output's own scores; a resumed output gives
    the same; a malformed pair file is refused before the model loads."""
    import itertools
    from collections import defaultdict

    run, _ = run_and_export
    data = repo_root / "data" / "sample" / "test.jsonl"
    items = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    by_input = defaultdict(list)
    for item in items:
        by_input[tuple(item.get(k) for k in ("task", "source", "question", "reference", "context"))].append(item)
    mean_label = lambda item: np.mean([v for v in item["labels"].values() if v is not None])
    pairs = []
    for group in by_input.values():
        for a, b in itertools.combinations(group, 2):
            winner = None if mean_label(a) == mean_label(b) else max((a, b), key=mean_label)["id"]
            pairs.append({"id_a": a["id"], "id_b": b["id"], "winner": winner})
    pairs.append({"id_a": "elsewhere-1", "id_b": items[0]["id"], "winner": "elsewhere-1"})
    pair_file = tmp_path / "pairs.jsonl"
    pair_file.write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    out = tmp_path / "scores.jsonl"
    assert main(["score", "--model", str(run), "--input", str(data), "--output", str(out), "--pairs", str(pair_file), "--chunk", "64"]) == 0
    printed = capsys.readouterr().out
    got = json.loads(out.with_name("scores.jsonl.pairs.json").read_text())
    task = {item["id"]: item["task"] for item in items}

    def expected(output: Path, key: str = "scores") -> tuple[float, np.ndarray, np.ndarray, list]:
        """The overall accuracy, winners' and losers' scores, and the pairs compared, from ``output``'s own
        scores (``key``: ``scores`` in score's output, ``pred`` in eval's predictions)."""
        scores = {line["id"]: np.array(list(line[key].values())) for line in map(json.loads, output.read_text().splitlines())}
        decided = [p for p in pairs if p["winner"] is not None and p["id_a"] in scores and p["id_b"] in scores]
        win = np.array([scores[p["winner"]] for p in decided])
        lose = np.array([scores[p["id_b"] if p["winner"] == p["id_a"] else p["id_a"]] for p in decided])
        return np.mean(win.mean(axis=1) > lose.mean(axis=1)), win, lose, decided

    accuracy, win, lose, decided = expected(out)
    assert len(decided) > 100 and got["overall"]["pairs"] == len(decided)
    assert got["overall"]["accuracy"] == pytest.approx(accuracy, abs=1e-12)
    for k, dim in enumerate(DIMENSIONS):
        assert got["by_dimension"][dim]["accuracy"] == pytest.approx(np.mean(win[:, k] > lose[:, k]), abs=1e-12)
    for t, acc in got["by_task"].items():
        rows = np.array([task[p["winner"]] == t for p in decided])
        assert acc["pairs"] == rows.sum() and acc["accuracy"] == pytest.approx(np.mean(win[rows].mean(1) > lose[rows].mean(1)), abs=1e-12)
    assert got["judges_tied"] == sum(p["winner"] is None for p in pairs) > 0
    assert (got["not_scored"], got["missing_examples"]) == (1, ["elsewhere-1"])
    assert f"| overall (mean of the dimensions) | {len(decided)} | {got['overall']['accuracy']:.3f} |" in printed
    # resumed from a cut output: the kept lines' scores are read back (the rest are scored in other
    # batches, equal to float32 rounding: the oracle reads the resumed output's own scores)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(out.read_text().splitlines(keepends=True)[:150]), encoding="utf-8")
    shutil.copy(out.with_name("scores.jsonl.scorer.json"), tmp_path / "cut.jsonl.scorer.json")
    assert main(["score", "--model", str(run), "--input", str(data), "--output", str(cut), "--pairs", str(pair_file), "--resume"]) == 0
    resumed = json.loads(cut.with_name("cut.jsonl.pairs.json").read_text())
    assert resumed["overall"]["pairs"] == len(decided) and resumed["overall"]["accuracy"] == pytest.approx(expected(cut)[0], abs=1e-12)
    # eval --pairs: the same agreement in the report, from the predictions it writes; with --compare,
    # each judge's too: the labels themselves, as a judge, order every pair whose four labels they all
    # have as the pairs were made (by mean label), and leave the others out
    argv = ["eval", str(run), "--out", str(tmp_path / "ev"), "--no-plots", "--bootstrap", "0", "--pairs", str(pair_file)]
    assert main([*argv, "--compare", f"labels={data}"]) == 0
    labelled = {item["id"] for item in items if all(v is not None for v in item["labels"].values())}
    full = [p for p in decided if p["id_a"] in labelled and p["id_b"] in labelled]
    compared = json.loads((tmp_path / "ev" / "test_compare.json").read_text())
    assert compared["labels"]["preferences"]["overall"] == {"pairs": len(full), "correct": len(full), "ties": 0, "accuracy": 1.0}
    assert compared["student"]["preferences"]["overall"]["pairs"] == len(decided)
    student = compared["student"]["preferences"]["overall"]["accuracy"]
    row = f"| pairwise choices agreed (pairs) | {student:.3f} ({len(decided)}) | 1.000 ({len(full)}) |"
    assert row in (tmp_path / "ev" / "test_compare.md").read_text()
    report = json.loads((tmp_path / "ev" / "test.json").read_text())["preferences"]
    assert report["file"] == str(pair_file) and report["overall"]["pairs"] == len(decided)
    assert report["overall"]["accuracy"] == pytest.approx(expected(tmp_path / "ev" / "test_predictions.jsonl", "pred")[0], abs=1e-12)
    assert "### Agreement with the judges' pairwise choices" in (tmp_path / "ev" / "test.md").read_text()
    pair_file.write_text('{"id_a": "a", "id_b": "b", "winner": "c"}\n', encoding="utf-8")
    assert (
        main(
            [
                "score",
                "--model",
                str(tmp_path / "no-model"),
                "--input",
                str(data),
                "--output",
                str(tmp_path / "x.jsonl"),
                "--pairs",
                str(pair_file),
            ]
        )
        == 2
    )
    assert f"{pair_file}:1: winner 'c' is neither id_a 'a' nor id_b 'b'" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "no-run"), "--pairs", str(pair_file)]) == 2  # before the run is loaded
    assert f"{pair_file}:1: winner 'c' is neither" in capsys.readouterr().err
