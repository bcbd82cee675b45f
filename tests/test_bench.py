"""The benchmark tools run and print peer-format JSON lines (tiny shapes; no timing assertions)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.xla_env import child_env, emitters_as_users_compile, xla_flags


def one_device_env() -> dict[str, str]:
    """The tools on one CPU device, as a user runs them (the suite's 8 simulated devices make every
    compile of a sharded step slower, and the tools' figures are per device anyway)."""
    return child_env()


def run(repo_root, tool, *args, tiny: bool = True):
    done = subprocess.run(
        [sys.executable, str(repo_root / "tools" / tool), *(["--tiny"] if tiny else []), "--steps", "2", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo_root,
        env=one_device_env(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def bench_rows(repo_root, monkeypatch, capsys, kind: str, *args, tiny: bool = True) -> list[dict]:
    """``tools/bench_{kind}.py`` (``memory`` or ``score``) run in this process, as ``run`` runs it in a
    fresh one, without the few seconds that starting a Python with JAX costs. The memory estimates
    come from shapes alone and scoring runs on one device, so the worker's simulated devices change
    nothing; ``--case`` adds to the tool's table of cases, which is restored afterwards."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_cases

    monkeypatch.setattr(bench_cases, "CASES", dict(bench_cases.CASES))
    capsys.readouterr()
    bench_cases.run_cli(kind, [*(["--tiny"] if tiny else []), "--steps", "2", *args])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_bench_train_every_family(repo_root, tmp_path, monkeypatch, capsys):
    """Every case's model builds and traces a training step (memory estimates, no compile); one case
    trains for real through the tool (tests/test_families.py trains and exports every family
    through the CLI), with the levers off and its op mix profiled."""
    args = ("--only", "qwen3", "--batch", "8", "--seq", "64", "--dtype", "float32", "--no-donate", "--feed", "host", "--ema-decay", "0.9")
    rows = run(repo_root, "bench_train.py", *args, "--profile", str(tmp_path))
    trained = [r for r in rows if "model" in r]
    assert [r["model"] for r in trained] == ["qwen3-0.6b"]
    assert all("error" not in r and r["train_tok_s"] > 0 and {"step_ms", "mfu_vs_989", "params_M"} <= set(r) for r in trained)
    assert trained[0]["donate"] is False and trained[0]["feed"] == "host" and trained[0]["ema_decay"] == 0.9
    assert trained[0]["attention"] == "blocked"  # auto resolved as the step traced it: one CPU device, 64 tokens (layers.BLOCKED_FROM)
    mix = trained[0]["op_mix"]
    assert mix["by_kind_ms"]["matmul"] > 0 and (tmp_path / "qwen3-0.6b" / "step.hlo.txt").is_file()
    # tools/op_mix.py reads the kept folder again: the bench's line, and with a long --top every op
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import op_mix

    capsys.readouterr()
    op_mix.main([str(tmp_path / "qwen3-0.6b")])
    op_mix.main([str(tmp_path / "qwen3-0.6b"), "--top", "100000"])
    again, every = map(json.loads, capsys.readouterr().out.splitlines())
    assert again == {"case": "qwen3-0.6b", "folder": str(tmp_path / "qwen3-0.6b"), **mix}
    assert len(every["top_ops"]) > len(mix["top_ops"]) and every["top_ops"][:3] == mix["top_ops"][:3]
    assert sum(op[3] for op in every["top_ops"]) == pytest.approx(mix["device_ms_per_step"], abs=1e-3 * len(every["top_ops"]))
    with pytest.raises(SystemExit):
        op_mix.main([str(tmp_path)])  # not a case's folder: no step.hlo.txt
    assert "no step.hlo.txt" in capsys.readouterr().err
    cases = [r for r in bench_rows(repo_root, monkeypatch, capsys, "memory", "--batch", "8", "--seq", "64") if "model" in r]
    assert all("error" not in r and r["estimate_GB"] > 0 for r in cases)
    assert {r["model"] for r in cases} == {
        "mbert",
        "bert-large(mxbai)",
        "deberta-v3-base",
        "modernbert-base(ettin-150m-like)",
        "ettin-32m-like",
        "xlm-r-base",
        "qwen3-0.6b",
        "embeddinggemma-300m",
    }


def test_bench_train_builds_its_cases_with_the_dropout_training_applies(repo_root, monkeypatch):
    """``bench_train.py`` steps with the case's dropout, as ``omnidistill train`` does and as the peer
    does (its models train in training mode): 0.1 for mBERT's config, none for Ettin's, and none with
    ``--no-dropout``. It ran without dropout before, against a peer with it."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_cases

    for name, rate in [("mbert", 0.1), ("deberta-v3-base", 0.1), ("ettin-32m-like", 0.0)]:
        assert bench_cases._model(name, True, "float32", "xla", abstract=True, dropout=True)[0].dropout_rate == rate
        assert bench_cases._model(name, True, "float32", "xla", abstract=True, dropout=False)[0].dropout_rate == 0.0
    assert bench_cases.bench_train.__kwdefaults__["dropout"] is True


def test_bench_score_filter(repo_root, monkeypatch, capsys):
    rows = bench_rows(repo_root, monkeypatch, capsys, "score", "--only", "mbert,ettin", "--batch", "8", "--seq", "64")
    cases = [r for r in rows if "model" in r]
    assert [r["model"] for r in cases] == ["mbert", "modernbert-base(ettin-150m-like)", "ettin-32m-like"] and all(
        r["infer_ex_s"] > 0 for r in cases
    )


def test_bench_memory_estimates_grow_with_batch_and_shrink_with_remat_and_fsdp(repo_root, monkeypatch, capsys):
    memory = lambda *args, tiny=True: bench_rows(repo_root, monkeypatch, capsys, "memory", *args, tiny=tiny)
    rows = memory("--only", "ettin-32m", "--batch", "32", "--seq", "128", "--remat", "none,full")
    rows += memory("--only", "ettin-32m", "--batch", "64", "--seq", "128", "--remat", "none")
    peak = {(r["train_B"], r["remat"]): r["estimate_GB"] for r in rows if "model" in r}
    assert peak[(32, "full")] < peak[(32, "none")] < peak[(64, "none")]
    # 8-way FSDP splits the whole train state, the AdamW moments included (not only the parameters);
    # the real case's shapes (nothing is allocated), as the tiny one's state rounds to 0.001 GB
    one, split = memory("--only", "ettin-32m", "--batch", "1", "--seq", "8", "--fsdp", "1,8", tiny=False)[1:]
    assert one["state_GB"] > 0.5 and split["state_GB"] < one["state_GB"] / 6


def test_bench_padding_reports_each_layout(repo_root, monkeypatch, capsys):
    monkeypatch.chdir(repo_root)  # the config's data paths are relative to the repository
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_padding

    capsys.readouterr()
    bench_padding.main([str(repo_root / "configs" / "tiny.yaml"), "--batches", "5"])
    rows = {r["layout"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(rows) == {"bucketed", "bucketed-every-16", "packed"}
    assert rows["packed"]["padding_fraction"] < rows["bucketed"]["padding_fraction"]


def test_bench_compare_pairs_peer_and_ours_and_marks_targets(repo_root, tmp_path):
    """Synthetic inputs: the table pairs rows by model and marks each ratio against its target."""
    peer = tmp_path / "peer.jsonl"
    peer.write_text(
        '{"gpu": "H100"}\n'
        '{"model": "mbert", "compile": false, "train_tok_s": 100000, "infer_ex_s": 1000, "peak_GB": 20.0}\n'
        '{"model": "mbert", "compile": true, "train_tok_s": 200000, "infer_ex_s": 3000, "peak_GB": 18.0}\n'
        '{"model": "ettin-32m-like", "error": "RuntimeError()"}\n'
    )
    ours = tmp_path / "ours.jsonl"
    ours.write_text(
        '{"model": "mbert", "framework": "omnidistill-jax", "train_tok_s": 160000, "mfu_vs_989": 0.3, '
        '"peak_GB": 30.0, "compiled_peak_GB": 12.0}\n'
        '{"model": "mbert", "framework": "omnidistill-jax", "infer_ex_s": 2500}\n'
        '{"model": "mbert", "framework": "omnidistill-jax", "mode": "varlen", "infer_ex_s": 4000}\n'
        '{"model": "mbert", "framework": "omnidistill-jax", "mode": "varlen", "batch_tokens": 16384, "infer_ex_s": 3000}\n'
    )
    (tmp_path / "peer_varlen.jsonl").write_text(
        '{"model": "mbert", "compile": true, "mode": "varlen", "infer_ex_s": 2000}\n'
        '{"model": "mbert", "compile": false, "mode": "varlen", "infer_ex_s": 1000}\n'
    )
    done = subprocess.run(
        [sys.executable, str(repo_root / "tools" / "bench_compare.py"), str(peer), str(ours), str(tmp_path / "peer_varlen.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    train_row, infer_row, varlen_row, tokens_row = [line for line in done.stdout.splitlines() if line.startswith("| mbert")]
    assert varlen_row.startswith("| mbert [varlen] | 1,000 | 2,000 | 4,000 | 4.00× ✓ | 2.00× ✓")  # its own row, inference only
    assert tokens_row.startswith("| mbert [varlen] tokens 16384 | 1,000 | 2,000 | 3,000 | 3.00× ✓ | 1.50× ✓")  # against the same peer
    assert "160,000" in train_row and "1.60× ✓" in train_row and "0.80× ✗" in train_row and "20.0 / 12.0" in train_row
    assert "2.50× ✓" in infer_row and "0.83× ✗" in infer_row
    assert "ettin" not in done.stdout


def test_bench_device_script_parses(repo_root):
    assert subprocess.run(["bash", "-n", str(repo_root / "tools" / "bench_device.sh")]).returncode == 0


def test_bench_scorer_cpu_builds_deberta_and_scores_as_transformers(repo_root, monkeypatch, capsys, tmp_path):
    """``bench_scorer_cpu.py --model deberta-v3-base`` builds its DeBERTa classifier (here at tiny shapes
    patched into the case) and times the Scorer against transformers on realistic lengths: both score
    the same items alike, and the items hold the lengths file's token counts."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_cases
    import bench_scorer_cpu

    family, hf = bench_cases.CASES["deberta-v3-base"]
    tiny = {**hf, "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    monkeypatch.setattr(bench_cases, "CASES", {**bench_cases.CASES, "deberta-v3-base": (family, tiny)})  # MiniLM's vocabulary
    monkeypatch.setattr(sys, "argv", ["bench_scorer_cpu.py", "--model", "deberta-v3-base", "--varlen", "6", "--repeat", "1"])
    capsys.readouterr()
    bench_scorer_cpu.main()
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    lengths = [int(x) for x in (repo_root / "tools" / "score_lengths.txt").read_text().split()[:6]]
    assert row["model"] == "deberta-v3-base" and row["items"] == 6
    assert row["real_tokens"] == sum(min(n, row["max_length"]) for n in lengths)
    assert row["max_abs_score_diff"] < 1e-5 and row["omnidistill_ex_s"] > 0 and row["pytorch_ex_s"] > 0
    assert row["compute_dtype"] == "float32"

    # --compute-dtype bfloat16: both sides in bf16 (PyTorch under autocast), so each is off float32 by its rounding
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--compute-dtype", "bfloat16"])
    bench_scorer_cpu.main()
    bf16_row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert bf16_row["compute_dtype"] == "bfloat16" and 1e-5 < bf16_row["max_abs_score_diff"] < 0.05
    folder = bench_scorer_cpu.model_folder("deberta-v3-base", tmp_path)
    texts = ["a short answer", "a somewhat longer answer to score, with more words in it"]
    exact, rounded = (bench_scorer_cpu.torch_scores(folder, texts, 2, 64, bf16)[0] for bf16 in (False, True))
    assert 1e-5 < np.max(np.abs(exact - rounded)) < 0.05


def test_bench_deberta_cpu_times_both_sides_by_phase(repo_root, monkeypatch, capsys):
    """``bench_deberta_cpu.py --phases`` times each side's training step, forward pass and forward plus
    backward pass; ``--config`` reshapes the encoder (here to tiny widths, seconds; batch 8 for the suite's 8 devices).
    ``--ceiling`` times one feed-forward block on each side, and both compute the same gradients (a
    tanh GELU on one side would differ by about 1e-5 here)."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_deberta_cpu

    tiny = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
    argv = ["bench_deberta_cpu.py", "--layers", "1", "--vocab", "300", "--seq", "16", "--batch", "8", "--steps", "1"]
    argv += ["--phases", "--ceiling"]
    monkeypatch.setattr(sys, "argv", [*argv, "--config", json.dumps(tiny)])
    capsys.readouterr()
    bench_deberta_cpu.main()
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert row["config"] == tiny
    for side in ("omnidistill", "pytorch"):
        assert all(row[f"{side}_{phase}_s"] > 0 for phase in ("step", "forward", "forward_backward")), row
    assert row["ratio"] == pytest.approx(row["pytorch_step_s"] / row["omnidistill_step_s"], abs=0.01)
    assert row["ratio_median"] > 0  # one pair of steps here: its ratio (the pairing is pinned below)
    assert row["ceiling_max_grad_diff"] < 1e-6
    # the ratio is rounded to 0.01 (a half of that apart at most): a relative bound alone failed a loaded run's 0.09
    assert row["ceiling_ratio"] == pytest.approx(row["ceiling_pytorch_s"] / row["ceiling_omnidistill_s"], rel=0.02, abs=0.005)


def test_bench_deberta_cpu_alternates_the_sides_in_each_round(repo_root, monkeypatch):
    """Two warm-up calls per side, then rounds of one timed call each, the order flipped every other
    round, so that each round's two calls meet the same host load; one time per timed call."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    from bench_deberta_cpu import alternate

    calls = []
    times = alternate({"ours": lambda: calls.append("ours"), "torch": lambda: calls.append("torch")}, steps=3)
    assert calls == ["ours", "ours", "torch", "torch", "ours", "torch", "torch", "ours", "ours", "torch"]
    assert [len(t) for t in times.values()] == [3, 3] and all(s >= 0 for t in times.values() for s in t)


def test_bench_case_from_a_config_file(repo_root, monkeypatch, capsys):
    """--case takes any config: its family and shape run as one more case (and alone, without --only);
    --attention takes several kernels, one case each, in the order given."""
    monkeypatch.chdir(repo_root)
    args = ("--case", "configs/tiny.yaml", "--batch", "4", "--seq", "32", "--attention", "xla,blocked")
    cases = [r for r in bench_rows(repo_root, monkeypatch, capsys, "score", *args) if "model" in r]
    assert [(r["model"], r["attention"]) for r in cases] == [("tiny", "xla"), ("tiny", "blocked")]
    assert all("error" not in r and r["infer_ex_s"] > 0 for r in cases)
    with pytest.raises(SystemExit):
        bench_rows(repo_root, monkeypatch, capsys, "score", "--attention", "xla,flash")
    assert "flash: not one of auto, xla" in capsys.readouterr().err


def test_bench_case_from_a_config_file_takes_its_model_dropout(repo_root, tmp_path, monkeypatch):
    """A config's ``model.dropout`` gives the case its rates, as ``omnidistill train`` applies it."""
    monkeypatch.chdir(repo_root)
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_cases

    text = (repo_root / "configs" / "tiny.yaml").read_text()
    assert "  dropout: 0.1 " in text
    for rate in (0.25, 0.0):
        config = tmp_path / f"dropout-{rate}.yaml"
        config.write_text(text.replace("  dropout: 0.1 ", f"  dropout: {rate} "))
        _, (family, hf) = bench_cases.case_from_config(str(config))
        assert family == "bert" and hf["hidden_dropout_prob"] == hf["attention_probs_dropout_prob"] == rate


def test_bench_pipeline_compares_the_cache_with_tokenizing_on_the_fly(repo_root, tmp_path, monkeypatch, capsys):
    """In this process (the tool's own imports are the suite's); its cache readers are processes it starts."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_pipeline

    args = [
        "--records",
        "300",
        "--batches",
        "4",
        "--packed-batches",
        "2",
        "--pack-length",
        "256",
        "--reader-batches",
        "8",
        "--cache-dir",
        str(tmp_path),
    ]
    capsys.readouterr()
    bench_pipeline.main(args)
    out = capsys.readouterr().out
    rows = {r["what"]: r for r in map(json.loads, (line for line in out.splitlines() if line.startswith("{")))}
    for what in ("bucketed, tokenized on the fly", "bucketed, from the cache", "packed, tokenized on the fly", "packed, from the cache"):
        assert rows[what]["tokens_per_s"] > 0
    assert "prepare (tokenize into the cache)" in rows and len(list(tmp_path.iterdir())) == 2  # 300 records and a tenth
    readers = [r for what, r in rows.items() if what.startswith("cache reader process")]
    assert len(readers) == 2 and all(r["peak_rss_gb"] > 0 and r["anon_gb"] > 0 for r in readers)


def test_bench_compile_reports_both_layouts(repo_root, monkeypatch, capsys):
    """The tool's own process (here, this one) compiles nothing: each layout compiles in a child process
    it starts, which gets one CPU device and this suite's compile setting through the environment."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_compile

    monkeypatch.setenv("XLA_FLAGS", xla_flags(None))  # the children's device count and compile setting
    capsys.readouterr()
    bench_compile.main(["--tiny", "--only", "mbert", "--batch", "4", "--seq", "32", "--dtype", "float32"])
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(r["model"], r["layout"]) for r in rows] == [("mbert", "unrolled"), ("mbert", "scan")]
    assert all(r["compile_s"] > 0 and r["compiled_peak_GB"] is not None for r in rows)
    assert "| mbert | 2 |" in out  # the comparison table pairs the two layouts


def test_bench_score_varlen_batches_as_the_scorer_does(repo_root, tmp_path, monkeypatch, capsys):
    """--varlen scores every item of the lengths file once per pass, in batches padded as the Scorer pads
    (checked against the Scorer's own eval_dataset on records of those token counts)."""
    sys.path.insert(0, str(repo_root / "tools"))
    from bench_cases import varlen_batches

    lengths = [int(x) for x in (repo_root / "tools" / "score_lengths.txt").read_text().split()]
    assert len(lengths) == 8192 and sorted(lengths)[4096] == 88 and max(lengths) <= 512  # the peer's file: median 88
    import numpy as np

    from omnidistill.data.pipeline import eval_dataset
    from omnidistill.eval.predict import inference_buckets

    few = [5, 300, 17, 64, 33, 90, 2, 511, 40, 41, 12]
    want = [
        (b["input_ids"].shape[1], sorted(int(x) for x in b["attention_mask"].sum(1) if x))
        for b in eval_dataset([np.ones(n, np.int32) for n in few], pad_id=0, global_batch=4, buckets=inference_buckets(512, 32))
    ]
    assert varlen_batches(few, 4, 512, 32) == want
    path = tmp_path / "lengths.txt"
    path.write_text("\n".join(map(str, lengths[:40])))
    args = ("--varlen", str(path), "--only", "mbert", "--batch", "16", "--dtype", "float32", "--profile", str(tmp_path / "prof"))
    rows = bench_rows(repo_root, monkeypatch, capsys, "score", *args)
    row = next(r for r in rows if r.get("model") == "mbert")
    assert row["mode"] == "varlen" and row["items"] == 40 and row["real_tokens"] == sum(lengths[:40]) and 0 <= row["padding"] < 1
    # --profile: one traced pass over every shape's program, its dense layers' matmuls among its ops
    mix = row["op_mix"]
    assert mix["programs"] == row["shapes"] == len(list((tmp_path / "prof" / "mbert").glob("program_*.hlo.txt")))
    assert mix["device_ms_per_pass"] > 0 and "matmul" in mix["by_kind_ms"] and mix["device_busy"] > 0
    pass_ms = 1e3 * row["items"] * row["s_per_1000"] / 1000
    assert set(mix["idle"]) == {"long_gaps", "ms_in_long_gaps", "ms_in_short_gaps"}  # idle_gaps, pinned on its own below
    assert 0 < row["enqueue_ms_per_pass"] <= 2 * pass_ms  # the host's share of a pass (rounding aside, at most all of it)
    # one call's dispatch with the device idle: a share of the pass's calls' time, not the whole pass
    assert 0 < row["dispatch_ms_per_call"] * len(varlen_batches(lengths[:40], 16, 512, 32)) <= 2 * pass_ms


def test_bench_score_varlen_packed_batches_are_the_scorers(repo_root):
    """--varlen --pack-length takes its batches from the Scorer's own packed_eval_dataset: every token
    of every item once, with less padding than the padded batches on the realistic lengths."""
    sys.path.insert(0, str(repo_root / "tools"))
    from bench_cases import packed_varlen_batches, varlen_batches

    lengths = [int(x) for x in (repo_root / "tools" / "score_lengths.txt").read_text().split()][:2048]
    batches, slots = packed_varlen_batches(lengths, 128, 512, 512)
    assert slots == 32 and sum(int(b["attention_mask"].sum()) for b in batches) == sum(lengths)
    packed_slots = sum(b["attention_mask"].size for b in batches)
    padded_slots = sum(seq * 128 for seq, _ in varlen_batches(lengths, 128, 512, 32))
    assert packed_slots < padded_slots
    assert all(int(b["segment_ids"].max()) <= slots for b in batches if "segment_ids" in b)


def test_bench_score_varlen_token_batches_are_the_scorers(repo_root):
    """--varlen --batch-tokens takes its batches from the Scorer's own token batching: every token of
    every item once, each batch within its budget, one shape per padded length."""
    sys.path.insert(0, str(repo_root / "tools"))
    from bench_cases import token_varlen_batches

    lengths = [int(x) for x in (repo_root / "tools" / "score_lengths.txt").read_text().split()][:2048]
    batches = token_varlen_batches(lengths, 512, 4096)
    assert sum(int(b["attention_mask"].sum()) for b in batches) == sum(lengths)
    assert all(b["token_index"].shape == (1, 4096) and b["attention_mask"].sum() <= 4096 for b in batches)
    assert len({b["attention_mask"].shape for b in batches}) == len({b["attention_mask"].shape[1] for b in batches})


def test_bench_score_varlen_scorer_loop_scores_every_item_once(repo_root, tmp_path, monkeypatch, capsys):
    """--scorer-loop times the Scorer's own loop (predict_ids, batches made on the host); its
    scores_sum is the sum of every item's scores, each item scored alone here, in padded batches and
    in packed rows alike."""
    import jax
    import numpy as np

    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_cases
    from flax import nnx

    from omnidistill.models.regressor import make_predict_fn

    lengths = [5, 17, 40, 17, 5, 40, 5, 17, 40, 5, 5, 40, 17]
    path = tmp_path / "lengths.txt"
    path.write_text("\n".join(map(str, lengths)))
    args = ("--varlen", str(path), "--only", "mbert", "--batch", "4", "--dtype", "float32", "--scorer-loop")
    rows = [r for extra in ((),) for r in bench_rows(repo_root, monkeypatch, capsys, "score", *args, *extra)]
    rows = [r for r in rows if r.get("model") == "mbert"]
    assert [(r["loop"], r["pack_length"], r["items"]) for r in rows] == [("scorer", 0, 13)]
    model, hf = bench_cases._model("mbert", True, "float32", "auto")
    graphdef, state = nnx.split(model, nnx.Param)
    predict = jax.jit(make_predict_fn(graphdef))
    rng = np.random.default_rng(1)  # the loop's token ids
    alone = 0.0
    for n in lengths:
        ids = rng.integers(5, hf["vocab_size"], n).astype(np.int32)[None]
        alone += float(np.asarray(predict(nnx.to_pure_dict(state), {"input_ids": ids, "attention_mask": np.ones_like(ids)})).sum())
    assert [r["scores_sum"] for r in rows] == pytest.approx([alone], abs=0.02)


LIBRARY_FUSION_HLO = """HloModule jit_g
FileNames
1 "/src/model.py"
FunctionNames
1 "layer"
FileLocations
1 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=1 end_column=9}
2 {file_name_id=1 function_name_id=1 line=20 end_line=20 column=1 end_column=9}
StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
%fused (p0: f32[8,8], p1: f32[8,8]) -> f32[8,8] {
  %p0 = f32[8,8]{1,0} parameter(0)
  %p1 = f32[8,8]{1,0} parameter(1)
  %cast = f32[8,8]{1,0} convert(%p0), metadata={op_name="jit(g)/jvp()/convert_element_type" stack_frame_id=1}
  ROOT %dot.0 = f32[8,8]{1,0} dot(%cast, %p1), metadata={op_name="jit(g)/jvp()/dot_general" stack_frame_id=2}
}
ENTRY %main (a: f32[8,8], b: f32[8,8]) -> f32[8,8] {
  %a = f32[8,8]{1,0} parameter(0)
  %b = f32[8,8]{1,0} parameter(1)
  %neg = f32[8,8]{1,0} negate(%a), metadata={op_name="jit(g)/neg" stack_frame_id=1}
  ROOT %ynn_fusion = f32[8,8]{1,0} fusion(%neg, %b), kind=kCustom, calls=%fused, backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
}
"""
"""A library fusion without metadata of its own (jaxlib 0.12's CPU ``ynn_fusion``): a cast on line 10, then
the dot on line 20 that makes it a matmul."""


def test_op_mix_gives_a_library_fusion_the_line_of_the_op_that_names_it(repo_root):
    sys.path.insert(0, str(repo_root / "tools"))
    from op_mix import hlo_ops, source_lines

    assert hlo_ops(LIBRARY_FUSION_HLO)["ynn_fusion"] == ("matmul", "jit(g)/jvp()/dot_general")
    sources = source_lines(LIBRARY_FUSION_HLO)
    assert sources["ynn_fusion"] == "src/model.py:20 layer"  # the dot's line, not the cast's (line 10)
    assert sources["neg"] == "src/model.py:10 layer" and "a" not in sources


def test_op_mix_groups_a_real_trace_by_the_work_of_each_op(repo_root, tmp_path):
    """tools/op_mix.py on a jax.profiler trace of a jitted function: the dot's op is matmul work, the
    scatter-add's is scatter work, and the per-step total is the traced ops' time over the steps."""
    sys.path.insert(0, str(repo_root / "tools"))
    import jax
    import jax.numpy as jnp
    from op_mix import hlo_ops, module_name, op_events, op_mix, source_lines, source_mix, trace_file

    def f(w, x, idx):
        h = jax.grad(lambda w: jnp.tanh(x @ w).sum())(w)
        return h.sum(0), jnp.zeros(4096).at[idx].add(x[:, 0])

    args = (jnp.ones((256, 256)), jnp.ones((512, 256)), jnp.arange(512) % 4096)
    # XLA's CPU fusion emitters, as users compile (the suite turns them off where XLA has the flag: tests/xla_env.py); without
    # them a scatter-add is expanded into a loop of dynamic updates, with no scatter op to find
    compiled = jax.jit(f).lower(*args).compile(compiler_options=emitters_as_users_compile())
    other = jax.jit(lambda x: jnp.exp(x).sum(0)).lower(args[1]).compile()  # another program, run while tracing
    jax.block_until_ready((compiled(*args), other(args[1])))
    with jax.profiler.trace(str(tmp_path)):
        for _ in range(2):
            jax.block_until_ready(compiled(*args))
            jax.block_until_ready(other(args[1]))
    import gzip
    import json

    trace = json.load(gzip.open(trace_file(tmp_path), "rt"))
    module = module_name(compiled.as_text())
    assert module == "jit_f"
    events = op_events(trace, module)
    every_program = op_events(trace)
    assert len(every_program) > len(events) and set(events) < set(every_program)  # the other program's ops are left out
    with pytest.raises(ValueError, match="jit_f"):
        op_events(trace, "jit_g")  # a module that did not run: the error names those that did
    ops = hlo_ops(compiled.as_text())
    named = {ops[name] for name, _ in events}
    assert {kind for kind, source in named if "dot_general" in source} == {"matmul"}  # the dot's fusion, named by the dot
    assert {kind for kind, source in named if "scatter" in source} == {"scatter"}
    mix = op_mix(events, ops, steps=2)
    assert mix["device_ms_per_step"] == round(sum(us for _, us in events) / 2 / 1e3, 3)
    assert {"matmul", "scatter"} <= set(mix["by_kind_ms"])
    assert all(runs == 1 for *_, runs in mix["top_ops"])  # each op of f runs once a call, the other program's not counted
    # by source line and pass: the forward dot on the lambda's line, its transpose on the same line
    # in the backward pass, the scatter-add on f's return line, outside any differentiation
    line = f.__code__.co_firstlineno
    where = lambda n: f"tests/test_bench.py:{line + n}"
    by_source = source_mix(events, ops, source_lines(compiled.as_text()), steps=2, top=50)
    # each line's ms and the total are rounded to 0.001 apart: the sum may differ by half of that for each
    rounding = (len(by_source) + 1) * 0.0005 + 1e-9
    assert sum(ms for _, _, ms, _, _ in by_source) == pytest.approx(mix["device_ms_per_step"], abs=rounding)
    lines = {(source.split(" ")[0], p) for source, p, _, _, kinds in by_source if {"matmul", "scatter"} & set(kinds)}
    assert {(where(1), "forward"), (where(2), "other")} <= lines
    # the transposed product is an op of its own, on the same line, unless XLA made both products one
    # library fusion without metadata (jaxlib 0.12's ynn_fusion), which takes its first frame: the forward dot's
    transposed = {name for name, _ in events if ops[name][0] == "matmul" and "transpose(" in ops[name][1]}
    assert ((where(1), "backward") in lines) == bool(transposed)
    # one kernel name for 24 identical fusions over 2 steps (XLA's GPU kernel reuse): 12 runs a step
    reused = op_mix([("input_reduce_fusion_1", 50.0)] * 24 + [("fusion.2", 10.0)] * 2, {}, steps=2)
    assert reused["top_ops"][0][0] == "input_reduce_fusion_1" and reused["top_ops"][0][-2:] == [0.6, 12.0]
    assert reused["top_ops"][1][-1] == 1.0


def test_op_mix_reads_custom_calls_and_counts_device_streams_once(repo_root):
    """A cuDNN attention custom call (a tuple-typed result) is the attention kernel, a cuBLAS gemm is
    matmul work; on a device trace only the stream lines count, not the derived per-op line, and only
    the module's own (a program id in brackets is the same module)."""
    sys.path.insert(0, str(repo_root / "tools"))
    from op_mix import hlo_ops, module_name, op_events

    hlo = (
        "HloModule m\n\n"
        "ENTRY %main (p: bf16[2,8,4,16]) -> bf16[2,8,4,16] {\n"
        "  %p = bf16[2,8,4,16]{3,2,1,0} parameter(0)\n"
        '  %custom-call.3 = (bf16[2,8,4,16]{3,2,1,0}, u8[0]{0}) custom-call(%p, %p, %p), custom_call_target="__cudnn$fmhaSoftmax"\n'
        '  %custom-call.4 = (bf16[16,16]{1,0}, s8[4]{0}) custom-call(%p, %p), custom_call_target="__cublas$lt$matmul"\n'
        "  ROOT %get-tuple-element = bf16[2,8,4,16]{3,2,1,0} get-tuple-element(%custom-call.3), index=0\n"
        "}\n"
    )
    ops = hlo_ops(hlo)
    assert ops["custom-call.3"][0] == "attention kernel" and ops["custom-call.4"][0] == "matmul"
    assert ops["get-tuple-element"][0] == "copy/transpose"
    meta = lambda tid, name: {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}}
    op = lambda tid, dur, module="m(3)": {
        "ph": "X", "pid": 1, "tid": tid, "dur": dur, "name": "k", "args": {"hlo_op": "custom-call.3", "hlo_module": module}
    }  # fmt: skip
    trace = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
            meta(7, "Stream #7(Compute)"),
            meta(8, "XLA Ops"),
            op(7, 5.0),
            op(8, 5.0),
            op(7, 2.0, module="jit_other"),
        ]
    }
    assert op_events(trace, module_name(hlo)) == [("custom-call.3", 5.0)]
    assert op_events(trace) == [("custom-call.3", 5.0), ("custom-call.3", 2.0)]


def test_op_mix_splits_the_devices_idle_time_into_long_and_short_gaps(repo_root):
    """idle_gaps: the time between one op's end and the next op's start, split at IDLE_GAP_US (a stall
    before a program starts against launch latency between kernels); ops on two streams that overlap
    are one busy stretch, so their overlap is no gap and no negative one."""
    sys.path.insert(0, str(repo_root / "tools"))
    from op_mix import IDLE_GAP_US, idle_gaps

    span = lambda ts, dur: {"ph": "X", "ts": ts, "dur": dur}
    # busy 0-10, gap 3, busy 13-20 and 15-30 (overlap), gap 500, busy 530-540, gap 4, busy 544-545
    records = [span(13, 7), span(0, 10), span(15, 15), span(530, 10), span(544, 1)]
    assert IDLE_GAP_US == 100.0
    assert idle_gaps(records) == {"long_gaps": 1, "ms_in_long_gaps": 0.5, "ms_in_short_gaps": 0.007}
    assert idle_gaps([]) == {"long_gaps": 0, "ms_in_long_gaps": 0.0, "ms_in_short_gaps": 0.0}


def _bias_and_grads(position_bias, seq: int, cfg) -> tuple:
    """c2p + p2c scores of random inputs at ``seq`` positions, and their gradients against random weights."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from omnidistill.models.deberta_v2 import modeling

    columns = modeling.relative_columns(seq, cfg)
    rng = np.random.default_rng(seq)
    q, k = (jnp.asarray(rng.standard_normal((2, seq, 3, 4)), jnp.float32) for _ in range(2))
    pk, pq = (jnp.asarray(rng.standard_normal((2 * cfg.relative_span, 3, 4)), jnp.float32) for _ in range(2))
    weights = jnp.asarray(rng.standard_normal((2, 3, seq, seq)), jnp.float32)
    grads = jax.grad(lambda *a: jnp.sum(position_bias(*a, columns) * weights), argnums=(0, 1, 2, 3))(q, k, pk, pq)
    return np.asarray(position_bias(q, k, pk, pq, columns)), [np.asarray(g) for g in grads]


@pytest.mark.parametrize("lever", ["deberta-cpu-layout", "deberta-rows-gathered", "deberta-product-einsum", "deberta-one-block"])
def test_deberta_levers_give_the_models_scores_and_gradients(repo_root, monkeypatch, lever):
    """tools/bench_levers.py's DeBERTa variants change how the c2p + p2c scores are made, not what they
    are: scores and gradients equal the GPU's model (its layout forced here) at 1, 3, 40 and 96
    positions (one block, blocks of 8 and of 32), so an A/B on a GPU times the same computation."""
    import numpy as np

    from omnidistill.models.deberta_v2 import modeling
    from omnidistill.models.deberta_v2.config import DebertaV2Config
    from tests.models.test_deberta_v2_parity import V3

    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    from bench_levers import LEVERS

    monkeypatch.setattr(modeling, "accelerator_layout", lambda: True)
    cfg = DebertaV2Config.from_hf({**V3, "model_type": "deberta-v2", "max_relative_positions": 24, "position_buckets": 8})
    model = modeling.DisentangledAttention.position_bias
    for seq in (1, 3, 40, 96):
        want, want_grads = _bias_and_grads(model, seq, cfg)
        with monkeypatch.context() as patched:
            for obj, attr, value in LEVERS[lever]():
                assert getattr(obj, attr) is not value  # the lever changes what the model calls
                (patched.setitem if isinstance(obj, dict) else patched.setattr)(obj, attr, value)
            got, got_grads = _bias_and_grads(model, seq, cfg)
        np.testing.assert_allclose(got, want, atol=1e-5)
        for a, b in zip(got_grads, want_grads, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def test_the_cudnn_mask_array_lever_gives_windowed_and_causal_rows_the_mask_again(repo_root, monkeypatch):
    """``bench_levers.py cudnn-mask-array`` undoes ``attention_by_lengths`` for causal rows and windows
    (the mask array reaches cuDNN again) and keeps plain key padding as lengths, with the same
    attention, so an A/B on a GPU times only how the mask reaches the kernel."""
    import numpy as np

    from omnidistill.models import layers
    from tests.models.test_attention import PADDED_KEYS, qkv, record_cudnn_calls

    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    from bench_levers import LEVERS

    q, k, v = qkv(seed=6, b=4, s=PADDED_KEYS.shape[1])
    real = np.asarray(PADDED_KEYS != 0)
    for causal, window, masked in [(False, None, False), (False, 3, True), (True, None, True), (True, 3, True)]:
        mask = layers.AttentionMask(PADDED_KEYS, causal=causal)
        ref = np.asarray(layers.attention(q, k, v, mask, "xla", window=window))
        with monkeypatch.context() as patched:
            calls = record_cudnn_calls(patched)
            for obj, attr, value in LEVERS["cudnn-mask-array"]():
                patched.setattr(obj, attr, value)
            got = np.asarray(layers.attention(q, k, v, mask, "cudnn", window=window))
        (call,) = calls
        assert (call["mask"] is not None) == masked and call.get("local_window_size") is None
        np.testing.assert_allclose(got[real], ref[real], atol=1e-6)


def test_the_dropout_lever_draws_masks_per_element_at_the_same_rate(repo_root, monkeypatch):
    """``dropout-per-element`` draws masks as ``jax.random.bernoulli`` does (one hash call per element),
    at the same rate (a binomial test) and scale: an A/B on a GPU times only how the draws are made."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from scipy import stats

    from omnidistill.models import layers

    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    from bench_levers import LEVERS

    key, x = jax.random.PRNGKey(5), jnp.ones((256, 1024))
    want = np.asarray(layers.dropout(x, 0.1, key))
    with monkeypatch.context() as patched:
        for obj, attr, value in LEVERS["dropout-per-element"]():
            assert getattr(obj, attr) is not value
            patched.setattr(obj, attr, value)
        got = np.asarray(jax.jit(lambda x: layers.dropout(x, 0.1, key))(x))
    assert stats.binomtest(int((got == 0).sum()), got.size, 0.1).pvalue > 1e-4
    np.testing.assert_allclose(got[got != 0], 1 / 0.9, rtol=1e-6)
    assert (got != want).any()


def test_dropout_redraws_its_masks_on_accelerators_and_the_kept_masks_lever_gives_the_same_values(repo_root, monkeypatch):
    """On a GPU or TPU dropout's backward pass draws each mask again: no boolean mask is among the
    residuals the forward pass keeps for the backward pass. The CPU, and ``dropout-kept-masks`` on any
    backend, keep one a site. What is kept changes, not what is computed: two dropout sites around a
    nonlinearity give the same value and gradients (inputs and weights) either way."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax._src.ad_checkpoint import saved_residuals

    from omnidistill.models import layers

    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    from bench_levers import LEVERS

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((4, 16, 32)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((32, 32)) / np.sqrt(32), jnp.float32)  # activations of unit scale
    key = jax.random.PRNGKey(3)

    def loss(x, w):
        h = jnp.tanh(layers.dropout(x @ w, 0.1, layers.sub_rng(key, 1)))
        return jnp.sum(jnp.sin(layers.dropout(h @ w, 0.3, layers.sub_rng(key, 2))))

    def masks_kept():
        return sum(a.dtype == bool for a, _ in saved_residuals(loss, x, w))

    assert jax.default_backend() == "cpu" and masks_kept() == 2
    want, want_grads = jax.value_and_grad(loss, argnums=(0, 1))(x, w)
    with monkeypatch.context() as patched:
        patched.setattr(jax, "default_backend", lambda: "gpu")
        assert masks_kept() == 0
        got, got_grads = jax.value_and_grad(loss, argnums=(0, 1))(x, w)
        for obj, attr, value in LEVERS["dropout-kept-masks"]():
            patched.setattr(obj, attr, value)
        assert masks_kept() == 2
    np.testing.assert_allclose(got, want, rtol=1e-5)  # float32 sums in another order
    for a, b in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_xla_flag_levers_reach_the_backend(repo_root):
    """The XLA-flag levers are set before the backend starts, so XLA reads them: shown in a process of
    its own with a flag the CPU backend acts on (three host devices), set the way the levers are, after
    importing what ``bench_levers.py`` imports. The GPU levers' flags are ones this JAX knows: a fresh
    process starts its backend with them (an unknown flag would stop it there)."""
    probe = (
        "import os, bench_levers, bench_cases, jax\n"
        "bench_levers.apply(bench_levers.xla_flags('--xla_force_host_platform_device_count=3'))\n"
        "print(len(jax.devices()))\n"
        "for make in bench_levers.LEVERS.values():\n"
        "    bench_levers.apply([p for p in make() if p[0] is os.environ])\n"
        "print(os.environ['XLA_FLAGS'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = os.pathsep.join([str(repo_root / "tools"), str(repo_root)])
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    devices, flags = done.stdout.strip().splitlines()
    assert devices == "3"
    for flag in (
        "--xla_gpu_enable_triton_gemm=false",
        "--xla_gpu_enable_cublaslt=true",
        "--xla_gpu_enable_cudnn_layer_norm=true",
        "--xla_gpu_experimental_enable_fusion_block_level_rewriter=true",
        "--xla_gpu_experimental_enable_triton_heroless_priority_fusion=true",
    ):
        assert flag in flags.split()
    start = subprocess.run(
        [sys.executable, "-c", "import jax; print(len(jax.devices()))"],
        env={**env, "XLA_FLAGS": flags},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert start.returncode == 0 and start.stdout.strip() == "3", start.stderr[-2000:]


@pytest.mark.parametrize("lever", ["layernorm-two-pass", "cudnn-layernorm", "cudnn-layernorm-moments"])
def test_layer_norm_levers_normalize_as_flax_does(repo_root, monkeypatch, lever):
    """The layer-norm levers change how the variance is taken, not what the norm gives: a model's
    ``nnx.LayerNorm`` (float32, scale and bias) gives flax's outputs, and flax's clamp at 0 is gone from
    the program. The two-pass form is the exact one: rows far from zero (1,000 ± 1), where E[x²] − E[x]²
    loses most of float32's digits, still get numpy's float64 variance."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    from bench_levers import LEVERS

    rng = np.random.default_rng(0)
    norm = nnx.LayerNorm(64, epsilon=1e-12, dtype=jnp.float32, param_dtype=jnp.float32, rngs=nnx.Rngs(0))
    norm.scale[...] = jnp.asarray(rng.uniform(0.5, 1.5, 64), jnp.float32)
    norm.bias[...] = jnp.asarray(rng.standard_normal(64), jnp.float32)
    x = jnp.asarray(rng.standard_normal((4, 8, 64)) * 3 + 0.5, jnp.float32)
    far = jnp.asarray(1000 + rng.standard_normal((16, 64)), jnp.float32)

    def primitives(f, *args):  # a new function each time: make_jaxpr caches traces by function
        return {e.primitive.name for e in jax.make_jaxpr(lambda *a: f(*a))(*args).eqns}

    want = np.asarray(norm(x))
    assert "max" in primitives(norm, x)
    with monkeypatch.context() as patched:
        for obj, attr, value in LEVERS[lever]():
            if obj is not os.environ:
                patched.setattr(obj, attr, value)
        got = np.asarray(jax.jit(lambda y: norm(y))(x))
        assert "max" not in primitives(norm, x)
        from flax.nnx.nn import normalization

        _, var = normalization._compute_stats(far, (1,), jnp.float32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if lever != "cudnn-layernorm-moments":
        np.testing.assert_allclose(np.asarray(var), np.asarray(far, np.float64).var(axis=1), rtol=1e-4)


def test_the_finite_per_array_lever_decides_as_the_step_does(repo_root, monkeypatch):
    """``finite-per-array`` tests each gradient array where the step tests the global norm: the same
    decision for finite gradients, a NaN or an infinity in one array, and a non-finite loss."""
    import jax.numpy as jnp
    import optax

    from omnidistill.train.step import update_is_finite

    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    from bench_levers import LEVERS, finite_per_array

    (patch,) = LEVERS["finite-per-array"]()
    assert patch[1] == "update_is_finite" and patch[2] is finite_per_array
    grads = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    cases = [(1.0, grads), (jnp.nan, grads)]
    cases += [(1.0, {**grads, "b": jnp.array([0.0, bad])}) for bad in (jnp.nan, jnp.inf, -jnp.inf)]
    for total, tree in cases:
        total = jnp.float32(total)
        ours = bool(update_is_finite(total, tree, optax.tree.norm(tree)))
        assert ours == bool(finite_per_array(total, tree, optax.tree.norm(tree))) == (tree is grads and bool(jnp.isfinite(total)))


def test_the_state_copies_lever_compiles_the_train_step_with_xlas_defaults(repo_root, monkeypatch):
    """``state-copies`` undoes the train step's XLA options (tests/train/test_step_copies.py shows what
    they change), for the step ``bench_train.py`` times as for the one training runs."""
    import omnidistill.train.step as train_step

    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    from bench_levers import LEVERS

    assert train_step.train_step_compiler_options() == train_step.TRAIN_STEP_COMPILER_OPTIONS != {}
    for obj, attr, value in LEVERS["state-copies"]():
        monkeypatch.setattr(obj, attr, value)
    assert train_step.train_step_compiler_options() == {}


def test_levers_joined_by_a_plus_apply_every_ones_patches(repo_root, monkeypatch):
    """``A+B`` sets the patches of both levers, and the flags of two flag levers both reach XLA_FLAGS."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    from bench_levers import LEVERS, patches_of

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/nowhere")
    joined = patches_of("packed-vectors+dropout-selected-draws")
    assert [p[1] for p in joined] == [p[1] for p in LEVERS["packed-vectors"]() + LEVERS["dropout-selected-draws"]()]
    (*_, last) = patches_of("cublas-gemms+cudnn-layernorm")
    flags = last[2].split()
    assert flags[0] == "--xla_dump_to=/nowhere"
    assert {"--xla_gpu_enable_triton_gemm=false", "--xla_gpu_enable_cudnn_layer_norm=true"} <= set(flags)


def test_op_mix_counts_a_loops_body_once_not_the_loop_around_it(repo_root, tmp_path):
    """On the CPU a ``while`` op is an event spanning its body's ops: only the body's ops count, so a
    traced loop's op time stays within the wall time of the traced calls."""
    sys.path.insert(0, str(repo_root / "tools"))
    import gzip
    import time

    import jax
    import jax.numpy as jnp
    from op_mix import hlo_ops, module_name, op_events, trace_file

    def looped(w, x):
        return jax.lax.fori_loop(0, 40, lambda i, h: jnp.tanh(h @ w), x)

    args = (jnp.eye(192) * 0.5, jnp.ones((256, 192)))
    compiled = jax.jit(looped).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    with jax.profiler.trace(str(tmp_path)):
        start = time.perf_counter()
        for _ in range(3):
            jax.block_until_ready(compiled(*args))
        wall_us = (time.perf_counter() - start) * 1e6
    trace = json.load(gzip.open(trace_file(tmp_path), "rt"))
    every = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "hlo_op" in e.get("args", {})]
    assert any(e["args"]["hlo_op"].startswith("while") for e in every)  # the loop's own event is in the trace
    events = op_events(trace, module_name(compiled.as_text()))
    ops = hlo_ops(compiled.as_text())
    assert not any(name.startswith("while") for name, _ in events)
    assert any(ops.get(name, ("",))[0] == "matmul" for name, _ in events)
    assert sum(us for _, us in events) <= wall_us


def test_op_mix_keeps_ops_run_back_to_back_whose_times_overlap_by_rounding(repo_root):
    """Two ops run one after the other, the second starting where the first ends: 1548.332 + 2.893 is
    1551.2250000000001 in floating point, past the second's start. Both count; a loop's event that
    holds its body's ops still does not, nor does an op that ends where its loop ends."""
    sys.path.insert(0, str(repo_root / "tools"))
    from op_mix import op_events

    op = lambda name, ts, dur: {"ph": "X", "pid": 1, "tid": 2, "ts": ts, "dur": dur, "name": name, "args": {"hlo_op": name}}
    trace = {
        "traceEvents": [
            op("fusion.1", 1548.332, 2.893),
            op("fusion.2", 1551.225, 4.0),
            op("while.3", 1560.0, 10.0),
            op("fusion.4", 1560.5, 4.0),
            op("fusion.5", 1565.0, 5.0),  # the body's last op ends with the loop
        ]
    }
    assert [name for name, _ in op_events(trace)] == ["fusion.1", "fusion.2", "fusion.4", "fusion.5"]


def test_bench_score_file_host_only_runs_score_with_fixed_scores(trained_tiny, repo_root, monkeypatch, capsys):
    """``--host-only`` runs ``score_file`` through every chunk with the run's tokenizer and a stand-in
    for the model, and times each part of the host work."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_score_file

    capsys.readouterr()
    bench_score_file.main(["--model", str(trained_tiny), "--host-only", "--lines", "300", "--chunk", "64"])
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert row["mode"] == "host-only" and row["lines"] == row["written"] == 300 and row["items_per_s"] > 0
    assert all(row[f"{part}_us_per_item"] > 0 for part in ("read", "tokenize", "write", "means"))
    tokenizer = ["--tokenizer", str(repo_root / "assets" / "tiny-wordpiece")]  # no model: the default data settings
    bench_score_file.main([*tokenizer, "--host-only", "--lines", "100", "--input-workers", "0", "1"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()[-2:]]
    assert [(r["input_workers"], r["lines"], r["written"]) for r in rows] == [(0, 100, 100), (1, 100, 100)]


def test_bench_compile_cache_alternates_off_and_warm_and_compares_their_outputs(repo_root, monkeypatch, capsys):
    """The tool's runs and summary, with a stand-in for the ``omnidistill`` process: a run with the
    cache writes an entry into it, and each run writes its output (the warm ones, optionally, other bytes)."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_compile_cache

    order = []

    def fake_run(changed: bool):
        def run(command, out, cache, model=None):
            mode = "off" if cache is None else ("cold" if not cache.exists() else "warm")
            order.append(mode)
            if cache is not None:
                cache.mkdir(parents=True, exist_ok=True)
                (cache / "jit_predict-abc-cache").write_bytes(b"x" * 2048)
            out.write_text("changed" if changed and mode == "warm" else "scores")
            return {"cold": 5.0, "off": 3.0 + len(order) / 100, "warm": 2.0}[mode]

        return run

    for changed in (False, True):
        order.clear()
        monkeypatch.setattr(bench_compile_cache, "run", fake_run(changed))
        monkeypatch.setattr(sys, "argv", ["bench_compile_cache.py", "--repeat", "2", "--", "score", "--output", "{out}"])
        bench_compile_cache.main()
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert order == ["cold", "off", "warm", "off", "warm"] and [r["mode"] for r in lines[:-1]] == order
        summary = lines[-1]
        assert summary["command"] == "score --output {out}" and summary["cold_s"] == 5.0
        assert summary["off_s"] == 3.03 and summary["warm_s"] == 2.0 and summary["off_over_warm"] == 1.52  # medians of 3.02, 3.04
        assert summary["entries"] == 1 and summary["same_output"] is (not changed)


def test_bench_compile_cache_builds_a_bert_case_that_omnidistill_and_transformers_load(repo_root, tmp_path, monkeypatch):
    """``--bert-case``'s folder: the case's layer shapes (here cut to two small layers), the tiny
    tokenizer's vocabulary, four labels, and one the CLI's loader reads as a BERT model."""
    monkeypatch.syspath_prepend(str(repo_root / "tools"))
    import bench_compile_cache
    from transformers import AutoConfig

    from omnidistill.models.loader import load_tokenizer

    folder = bench_compile_cache.bert_classifier("mbert", tmp_path / "m", num_hidden_layers=2, hidden_size=48, intermediate_size=96)
    config = AutoConfig.from_pretrained(folder)
    assert (config.model_type, config.num_labels, config.num_hidden_layers, config.num_attention_heads) == ("bert", 4, 2, 12)
    assert config.vocab_size == len(load_tokenizer(str(folder))) == len(load_tokenizer(str(repo_root / "assets" / "tiny-wordpiece")))
    with pytest.raises(SystemExit, match="not a BERT one"):
        bench_compile_cache.bert_classifier("deberta-v3-base", tmp_path / "d")
