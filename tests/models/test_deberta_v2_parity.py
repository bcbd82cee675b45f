"""The Flax DeBERTa-v2/v3 port reproduces Hugging Face PyTorch (fp32, 1e-4) with padding, sequences longer
than the bucket range, shared and separate position projections."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.models.bert.config import UnsupportedConfigError
from omnidistill.models.deberta_v2.config import DebertaV2Config
from omnidistill.models.deberta_v2.modeling import log_bucket_position
from tests.models.hf_fixtures import assert_hidden_states_match, assert_logits_match, random_batch, save_tiny

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V3 = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    relative_attention=True,
    position_buckets=8,
    max_relative_positions=16,
    pos_att_type=["p2c", "c2p"],
    share_att_key=True,
    norm_rel_ebd="layer_norm",
    position_biased_input=False,
    type_vocab_size=0,
    hidden_act="gelu",
    layer_norm_eps=1e-7,
    pad_token_id=0,
)
VARIANTS = {
    "v3": {},
    "separate_proj_abs_pos_types": dict(share_att_key=False, position_biased_input=True, type_vocab_size=2, position_buckets=-1),
    "c2p_only_embedding_size": dict(pos_att_type=["c2p"], embedding_size=24, norm_rel_ebd="none"),
    # no relative attention, yet transformers scales by the position terms the config lists and builds
    # (and never reads) the relative-embedding norm: found by random configs, 2026-12-08
    "no_relative_attention_terms_listed": dict(relative_attention=False, position_biased_input=True, share_att_key=False),
}


def save_tiny_deberta(folder, classification=False, **overrides):
    return save_tiny(folder, "DebertaV2", V3, classification=classification, perturb="LayerNorm", **overrides)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("pad", [False, True])
def test_hidden_states_match_pytorch(tmp_path, variant, pad):
    folder = save_tiny_deberta(tmp_path / "d", **VARIANTS[variant])
    ids, mask = random_batch(99, batch=3, seq=40, pad=pad)  # 40 tokens: far beyond the 8 exact buckets
    assert_hidden_states_match(folder, "deberta_v2", ids, mask)


def test_short_rows_project_only_the_relative_rows_they_reach(tmp_path):
    """At 4 positions the distances -3..3 reach 7 of the 16 relative-embedding rows: every layer projects
    those 7 rows into position keys and queries, not the whole table, and the hidden states of a padded
    batch still equal transformers'. Longer rows whose distances reach past the log buckets still form
    one slice of rows (every row from the first to the last reached)."""
    import jax

    from omnidistill.models.deberta_v2 import modeling
    from tests.models.hf_fixtures import flax_from_folder

    folder = save_tiny_deberta(tmp_path / "d")
    ids, mask = random_batch(99, batch=3, seq=4, pad=True)
    assert_hidden_states_match(folder, "deberta_v2", ids, mask)
    encoder = flax_from_folder(folder, "deberta_v2").encoder
    jaxpr = jax.make_jaxpr(lambda i, m: encoder(i, m))(ids, mask)
    projected = [e.invars[0].aval.shape[0] for e in jaxpr.eqns if e.primitive.name == "dot_general" and e.invars[0].aval.ndim == 2]
    cfg = DebertaV2Config.from_hf({**V3, "model_type": "deberta-v2"})
    assert 2 * cfg.relative_span == 16 and projected.count(7) == 2 * V3["num_hidden_layers"] and 16 not in projected
    for seq in (4, 40, 200):
        columns = modeling.relative_columns(seq, cfg)
        assert set(np.diff(np.sort(np.unique(columns)))) <= {1}  # one slice of rows
        table = np.arange(2 * cfg.relative_span)[:, None]
        rows, reached = modeling.reached_rows(table, columns)
        assert np.array_equal(rows[reached], table[columns])


def test_classification_head_matches_pytorch(tmp_path):
    folder = save_tiny_deberta(tmp_path / "cls", classification=True)
    assert_logits_match(folder, "deberta_v2", *random_batch(99, batch=3, seq=30))


def test_log_buckets_match_pytorch():
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    rel = np.arange(-300, 301)[None, :]
    ref = make_log_bucket_position(torch.tensor(rel), 256, 512).numpy()
    np.testing.assert_array_equal(log_bucket_position(rel, 256, 512), ref)


@pytest.mark.parametrize(
    "field,value", [("conv_kernel_size", 3), ("pos_att_type", ["p2p"]), ("pooler_hidden_size", 16), ("hidden_act", "mish")]
)
def test_unsupported_options_are_rejected_by_name(field, value):
    with pytest.raises(UnsupportedConfigError, match=field):
        DebertaV2Config.from_hf({**V3, "model_type": "deberta-v2", field: value})


@pytest.mark.parametrize(("absolute", "refused"), [(False, False), (True, True)])
def test_rows_beyond_the_absolute_position_table_are_refused_as_pytorch_refuses_them(tmp_path, absolute, refused):
    """With ``position_biased_input`` the port, like PyTorch, cannot embed a position past the table (a
    JAX gather would clamp it silently); relative positions alone take any length, in both."""
    folder = save_tiny_deberta(tmp_path / "d", max_position_embeddings=16, position_biased_input=absolute)
    ids, mask = random_batch(99, batch=2, seq=20, pad=False)
    assert DebertaV2Config.from_hf(V3 | {"max_position_embeddings": 16, "position_biased_input": absolute}).max_sequence_length == (
        16 if absolute else None
    )
    if not refused:
        assert_hidden_states_match(folder, "deberta_v2", ids, mask)
        return
    from tests.models.hf_fixtures import flax_from_folder

    with pytest.raises(ValueError, match="sequence length 20 exceeds max_position_embeddings=16"):
        flax_from_folder(folder, "deberta_v2").encoder(ids, mask)
    hf = transformers.AutoModel.from_pretrained(folder).eval()
    with pytest.raises((IndexError, RuntimeError)), torch.no_grad():  # the position ids outrun the table
        hf(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long())


def test_accelerator_layout_matches_pytorch(tmp_path, monkeypatch):
    """The GPU's and TPU's layout of the position scores (rows sliced from one gather, the product with
    the queries first), forced on the CPU, reproduces Hugging Face on a padded batch too."""
    from omnidistill.models.deberta_v2 import modeling

    monkeypatch.setattr(modeling, "accelerator_layout", lambda: True)
    folder = save_tiny_deberta(tmp_path / "d")
    assert_hidden_states_match(folder, "deberta_v2", *random_batch(99, batch=3, seq=40, pad=True))


@pytest.mark.parametrize(
    ("backend", "forward_only", "accelerated"),
    [("cpu", False, False), ("cpu", True, True), ("gpu", False, True), ("gpu", True, True), ("tpu", False, True)],
)
def test_position_scores_take_the_layout_of_the_backend(monkeypatch, backend, forward_only, accelerated):
    """The backend and the pass pick the layout at trace time: a CPU training step gathers rows per
    block and multiplies with einsum; a GPU or TPU, and the CPU scoring (``layers.predicting``), slice
    one gather and put the queries first (docs/benchmarks.md)."""
    import contextlib

    import jax
    import jax.numpy as jnp

    from omnidistill.models.deberta_v2 import modeling
    from omnidistill.models.layers import predicting

    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    called = []
    for name in ("block_rows_gathered", "block_rows_sliced", "block_product_einsum", "block_product_queries_first"):
        real = getattr(modeling, name)
        monkeypatch.setattr(modeling, name, lambda *a, real=real, name=name: called.append(name) or real(*a))
    cfg = DebertaV2Config.from_hf({**V3, "model_type": "deberta-v2"})
    q = jnp.ones((1, 8, 2, 4))
    table = jnp.ones((2 * cfg.relative_span, 2, 4))
    with predicting() if forward_only else contextlib.nullcontext():
        modeling.DisentangledAttention.position_bias(q, q, table, table, modeling.relative_columns(8, cfg))
    want = ["block_rows_sliced", "block_product_queries_first"] if accelerated else ["block_rows_gathered", "block_product_einsum"]
    assert called == want * 2  # c2p, then p2c


@pytest.mark.parametrize("accelerated", [False, True])
@pytest.mark.parametrize("seq", [1, 3, 40, 96])
def test_banded_position_scores_equal_a_gather_of_every_pair(monkeypatch, seq, accelerated):
    """c2p + p2c from blocks of query_block(seq) rows (band_rows + skew) equal, with their gradients,
    the scores gathered pair by pair from row(i - j) as Hugging Face defines them, and one block of
    all rows (QUERY_BLOCK = 0), in the CPU's layout and in the GPU's; 3 rows fall back to one block,
    40 use blocks of 8, 96 of 32."""
    import jax
    import jax.numpy as jnp

    from omnidistill.models.deberta_v2 import modeling

    monkeypatch.setattr(modeling, "accelerator_layout", lambda: accelerated)
    cfg = DebertaV2Config.from_hf({**V3, "model_type": "deberta-v2", "max_relative_positions": 24, "position_buckets": 8})
    columns = modeling.relative_columns(seq, cfg)
    rows = columns[np.arange(seq)[:, None] - np.arange(seq)[None, :] + seq - 1]  # [i, j]: row(i - j)
    rng = np.random.default_rng(seq)
    q, k = (jnp.asarray(rng.standard_normal((2, seq, 3, 4)), jnp.float32) for _ in range(2))
    pk, pq = (jnp.asarray(rng.standard_normal((2 * cfg.relative_span, 3, 4)), jnp.float32) for _ in range(2))
    weights = jnp.asarray(rng.standard_normal((2, 3, seq, seq)), jnp.float32)

    def gathered(q, k, pk, pq):
        return jnp.einsum("bind,ijnd->bnij", q, pk[rows]) + jnp.einsum("bjnd,ijnd->bnij", k, pq[rows])

    def banded(q, k, pk, pq):
        return modeling.DisentangledAttention.position_bias(q, k, pk, pq, columns)

    loss = lambda fn: jax.grad(lambda *a: jnp.sum(fn(*a) * weights), argnums=(0, 1, 2, 3))
    want, want_grads = gathered(q, k, pk, pq), loss(gathered)(q, k, pk, pq)
    assert modeling.query_block(seq) == {1: 1, 3: 3, 40: 8, 96: 32}[seq]
    for block in (modeling.QUERY_BLOCK, 0):
        modeling_block, modeling.QUERY_BLOCK = modeling.QUERY_BLOCK, block
        try:
            np.testing.assert_allclose(np.asarray(banded(q, k, pk, pq)), np.asarray(want), atol=1e-5)
            for got, ref in zip(loss(banded)(q, k, pk, pq), want_grads, strict=True):
                np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-5, atol=1e-4)
        finally:
            modeling.QUERY_BLOCK = modeling_block
