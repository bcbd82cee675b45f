"""The train step with the teacher's pairwise choices (``data.pairs``): its loss is the point loss plus
``loss.pair_weight`` times the Bradley-Terry mean over the step's pairs, computed from the candidates
scored apart from the step; it stays exact over micro-batches and meshes."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from transformers import AutoTokenizer

from omnidistill.config import DataConfig, LossConfig, MeshConfig
from omnidistill.data.preference_batches import PreferenceBatches, load_training_pairs
from omnidistill.data.tokenize import RecordEncoder
from omnidistill.models.registry import get_family
from omnidistill.parallel.mesh import batch_sharding, build_mesh, global_batch_array, replicated
from omnidistill.train.setup import init_state
from omnidistill.train.step import make_train_step
from tests.train.helpers import batch_arrays, tiny_setup


def pair_block(repo_root, step=0, pairs=8):
    """Step ``step``'s pairs of the sample's judged train pairs, tokenized as tiny_setup's batch is."""
    tok = AutoTokenizer.from_pretrained(repo_root / "assets" / "tiny-wordpiece")
    sample = repo_root / "data" / "sample"
    data = DataConfig(pairs=str(sample / "pairs" / "train.jsonl"), train=[str(sample / "train.jsonl")])
    judged = load_training_pairs(data, RecordEncoder(tok, 128))
    return PreferenceBatches(judged, pad_id=tok.pad_token_id, buckets=[64, 128], global_pairs=pairs, seed=0)[step]


def steps_with_pairs(repo_root, mesh, loss_cfg, n_steps=2, grad_accum=1, drop_cells=False):
    graphdef, params, tx, ds = tiny_setup(repo_root)
    state = init_state(params, tx, 0, mesh, get_family("bert").sharding_rules)
    shardings = jax.tree.map(lambda x: x.sharding, state)
    step = jax.jit(
        make_train_step(graphdef, tx, loss_cfg=loss_cfg, grad_accum=grad_accum, dropout=False),
        in_shardings=(shardings, batch_sharding(mesh)),
        out_shardings=(shardings, replicated(mesh)),
    )
    metrics = []
    for i in range(n_steps):
        local = {**batch_arrays(ds[i]), **pair_block(repo_root, i)}
        if drop_cells:  # every other row unlabelled in three rows: micro-batch 0 of 2 has fewer cells than 1
            local["label_mask"] = local["label_mask"].copy()
            local["label_mask"][[0, 2, 4]] = 0.0
        state, m = step(state, {k: global_batch_array(v, batch_sharding(mesh)) for k, v in local.items()})
        metrics.append(jax.device_get(m))
    return state, metrics


def test_the_loss_adds_the_weighted_bradley_terry_mean_of_the_candidates_scores(repo_root):
    graphdef, params, _, ds = tiny_setup(repo_root)
    batch, pairs = batch_arrays(ds[0]), pair_block(repo_root)
    mesh = build_mesh(MeshConfig(data=1), devices=jax.devices()[:1])
    _, (metrics,) = steps_with_pairs(repo_root, mesh, LossConfig(pair_weight=0.7), n_steps=1)
    model = nnx.merge(graphdef, nnx.State(jax.tree.map(jax.numpy.asarray, params)))
    score = jax.jit(lambda ids, attention: model.scores(model(ids, attention)))
    scores = np.asarray(score(batch["input_ids"], batch["attention_mask"]), np.float64)
    mask = batch["label_mask"] * batch["example_mask"][:, None]
    mse = np.sum((scores - batch["labels"]) ** 2 * mask) / np.sum(mask > 0)
    # each candidate's tokens read back through the pair block's mask, padded anew to 128 on their own
    length = pairs["pair_input_ids"].shape[-1]
    rows = zip(pairs["pair_input_ids"].reshape(-1, length), pairs["pair_attention_mask"].reshape(-1, length), strict=True)
    candidates = [row[keep > 0] for row, keep in rows]
    ids, attention = np.zeros((len(candidates), 128), np.int32), np.zeros((len(candidates), 128), np.int32)
    for row, tokens in enumerate(candidates):
        ids[row, : len(tokens)], attention[row, : len(tokens)] = tokens, 1
    overall = np.mean(np.asarray(score(ids, attention), np.float64), axis=-1).reshape(-1, 2)
    margins = overall[:, 0] - overall[:, 1]
    bradley_terry = np.mean(np.logaddexp(0.0, -margins))  # -log sigmoid(margin)
    np.testing.assert_allclose(metrics["pair_loss"], bradley_terry, rtol=1e-5)
    np.testing.assert_allclose(metrics["pair_accuracy"], np.mean(margins > 0))
    np.testing.assert_allclose(metrics["loss"], mse + 0.7 * bradley_terry, rtol=1e-5)


def assert_same_params(a, b, atol=2e-5):
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol)


def test_gradient_accumulation_keeps_the_pairs_weight_when_micro_batches_have_unequal_cells(repo_root):
    """The pair term is scaled by the whole batch's cells (not each micro-batch's own), so two
    micro-batches with 6 and 12 fewer cells update as the full batch does."""
    mesh = build_mesh(MeshConfig(data=4, fsdp=2))
    loss = LossConfig(pair_weight=1.0)
    full, full_metrics = steps_with_pairs(repo_root, mesh, loss, drop_cells=True)
    accumulated, accumulated_metrics = steps_with_pairs(repo_root, mesh, loss, grad_accum=2, drop_cells=True)
    assert_same_params(full, accumulated)
    for key in ("loss", "pair_loss", "pair_accuracy"):
        np.testing.assert_allclose([m[key] for m in accumulated_metrics], [m[key] for m in full_metrics], rtol=1e-5)


@pytest.mark.slow
def test_the_pairs_shard_over_the_mesh_and_the_step_equals_one_device(repo_root):
    single = steps_with_pairs(repo_root, build_mesh(MeshConfig(data=1), devices=jax.devices()[:1]), LossConfig())
    sharded = steps_with_pairs(repo_root, build_mesh(MeshConfig(data=2, fsdp=2, tensor=2)), LossConfig())
    assert_same_params(single[0], sharded[0])
    np.testing.assert_allclose([m["loss"] for m in sharded[1]], [m["loss"] for m in single[1]], rtol=1e-5)


def test_a_pair_weight_of_zero_trains_as_without_pairs(repo_root):
    mesh = build_mesh(MeshConfig(data=1), devices=jax.devices()[:1])
    graphdef, params, tx, ds = tiny_setup(repo_root)
    state = init_state(params, tx, 0, mesh, get_family("bert").sharding_rules)
    plain = jax.jit(make_train_step(graphdef, tx, dropout=False))(state, batch_arrays(ds[0]))[0]
    weighted, _ = steps_with_pairs(repo_root, mesh, LossConfig(pair_weight=0.0), n_steps=1)
    assert_same_params(plain, weighted, atol=1e-7)
    moved, _ = steps_with_pairs(repo_root, mesh, LossConfig(pair_weight=1.0), n_steps=1)
    with pytest.raises(AssertionError):
        assert_same_params(plain, moved, atol=1e-5)


@pytest.mark.slow
def test_a_run_trains_on_the_pairs_logs_them_and_resumes_exactly(tmp_path, repo_root):
    """From the CLI: the sample's judged pairs beside its labels, and its dev pairs checked at every dev
    evaluation. The log has the pairs' loss and the student's agreement with the judge, the pairs used,
    tied and unknown, and the dev agreement, which numpy finds again from ``eval``'s dev predictions of
    the last step; resumed from step 3 (steps 4-6 removed), the run ends with the same weights to the
    bit, with nothing of the pairs' order in its checkpoint."""
    import json
    import shutil

    from omnidistill.cli import main
    from omnidistill.runs.checkpoint import read_state_arrays, saved_steps
    from tests.shared_runs import TRAINED_TINY, tiny_run_args
    from tests.train.test_weights_average import by_path

    run = tmp_path / "pairs"
    sample = repo_root / "data" / "sample"
    extra = (
        f"data.pairs={sample}/pairs/train.jsonl",
        f"data.dev_pairs={sample}/pairs/dev.jsonl",
        "checkpoint.every_steps=1",
        "checkpoint.keep=6",
    )
    assert main(tiny_run_args(repo_root, run, *TRAINED_TINY, *extra)) == 0
    assert saved_steps(run) == [1, 2, 3, 4, 5, 6]
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert (log[0]["pairs_used"], log[0]["pairs_tied"], log[0]["pairs_unknown_ids"]) == (1000, 80, 0)
    steps = [row for row in log if "pair_loss" in row]
    assert [row["step"] for row in steps] == [2, 4, 6]
    assert all(0 < row["pair_loss"] < 5 and 0 <= row["pair_accuracy"] <= 1 for row in steps)
    assert json.loads((run / "train_data.json").read_text()) == {"examples": 2100, "pairs": 1000}
    dev = {row["step"]: row["dev_pair_accuracy"] for row in log if "dev_mae" in row}
    assert sorted(dev) == [3, 6]
    assert (
        main(
            ["eval", str(run), "--split", "dev", "--checkpoint", "latest", "--no-plots", "--bootstrap", "0", "--out", str(tmp_path / "ev")]
        )
        == 0
    )
    pred = {
        line["id"]: np.mean(list(line["pred"].values())) for line in map(json.loads, (tmp_path / "ev" / "dev_predictions.jsonl").open())
    }
    judged = [p for p in map(json.loads, (sample / "pairs" / "dev.jsonl").open()) if p["winner"] is not None]
    agree = [pred[p["winner"]] > pred[p["id_b"] if p["winner"] == p["id_a"] else p["id_a"]] for p in judged]
    assert len(agree) == 143 and dev[6] == pytest.approx(np.mean(agree), abs=1.5 / len(agree))  # a near-tie may round otherwise
    assert "### Agreement with the judges' pairwise choices" in (run / "dev_report.md").read_text()
    final = read_state_arrays(run / "checkpoints", 6)["params"]
    resumed = tmp_path / "resumed"
    shutil.copytree(run, resumed)
    for step in (4, 5, 6):
        shutil.rmtree(resumed / "checkpoints" / str(step))
    assert main([*tiny_run_args(repo_root, resumed, *TRAINED_TINY, *extra), "--resume"]) == 0
    assert by_path(read_state_arrays(resumed / "checkpoints", 6)["params"]) == by_path(final)


def test_the_model_card_names_the_pairwise_loss(repo_root):
    from omnidistill.config import load_config
    from omnidistill.export.card_metadata import CardInfo, DataSummary, training_summary

    data = DataSummary(train_items=10, dev_items=5, languages=("en",), teachers=())
    said = "plus a Bradley-Terry loss (weight 0.3) on the teacher's pairwise choices"
    for overrides, expected in [(["data.pairs=data/sample/pairs/train.jsonl", "loss.pair_weight=0.3"], said), ([], None)]:
        cfg = load_config(repo_root / "configs" / "tiny.yaml", overrides)
        head = next(line for line in training_summary(cfg, 6, data, CardInfo(), None).splitlines() if "**Head:**" in line)
        assert (expected in head) if expected else ("Bradley-Terry" not in head)
