"""Dropout masks from 16-bit draws (models/dropout_masks.py): one Threefry call serves four elements,
the realized rate and scale, independence, and no dependence on sharding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from scipy import stats

from omnidistill.models import dropout_masks
from omnidistill.models.layers import dropout
from tests.models.jaxprs import output_shapes

KEY = jax.random.PRNGKey(11)


def test_one_hash_call_draws_for_four_elements():
    """``layers.dropout`` hashes once per four elements of the last axis (rounded up), where
    ``jax.random.bernoulli`` hashed once per element."""
    for shape in [(4, 10, 64), (3, 7, 10), (5,)]:
        x = jnp.ones(shape)
        sizes = [int(np.prod(s)) for s in output_shapes(jax.make_jaxpr(lambda x: dropout(x, 0.1, KEY))(x).jaxpr, "threefry2x32")]
        groups = int(np.prod(shape[:-1])) * -(-shape[-1] // 4)
        assert sizes == [groups], (shape, sizes)


@pytest.mark.parametrize("rate", [0.1, 0.25, 0.5, 0.9, 1e-3])
def test_realized_rate_and_scale(rate):
    """The drop rate is ``round(rate · 2^16) / 2^16`` (a binomial test over 2^20 elements), and kept
    values are scaled by the inverse of the realized keep probability, so E[dropout(x)] = x."""
    threshold = round(rate * 65536)
    out = np.asarray(dropout(jnp.ones((1024, 1024)), rate, KEY))
    kept = out != 0
    np.testing.assert_array_equal(out[kept], np.float32(1 / (1 - threshold / 65536)))
    dropped = int((~kept).sum())
    assert stats.binomtest(dropped, kept.size, threshold / 65536).pvalue > 1e-4, (rate, dropped / kept.size)
    assert dropout_masks.keep_mask(KEY, rate, (3,))[1] == 1 - threshold / 65536


def test_four_draws_of_one_call_are_independent():
    """Elements that share a hash call (and neighbours that do not) are dropped independently:
    each pair of positions within a group of four, and the pair across two groups, passes a chi-square
    test of independence over 2^18 groups at rate 0.5."""
    keep = np.asarray(dropout_masks.keep_mask(KEY, 0.5, (2**18, 8))[0])
    for a, b in [(0, 1), (0, 2), (0, 3), (1, 2), (2, 3), (3, 4), (0, 4)]:
        table = np.histogram2d(keep[:, a], keep[:, b], bins=2)[0]
        assert stats.chi2_contingency(table).pvalue > 1e-4, (a, b, table)


def test_keys_and_call_sites_give_different_masks():
    shape = (16, 64)
    first = np.asarray(dropout_masks.keep_mask(KEY, 0.5, shape)[0])
    assert (first != np.asarray(dropout_masks.keep_mask(jax.random.fold_in(KEY, 1), 0.5, shape)[0])).mean() > 0.3
    assert (first == np.asarray(dropout_masks.keep_mask(jax.random.key(11), 0.5, shape)[0])).all()  # typed keys: same words


@pytest.mark.parametrize("spec", [PartitionSpec("d"), PartitionSpec(None, None, "d")])
def test_masks_do_not_depend_on_sharding(spec):
    """The same key gives the same mask whether the array lives on one device or is split over eight,
    along its batch or its last axis (the counters are positions in the whole array)."""
    shape = (8, 6, 64)
    want = np.asarray(jax.jit(lambda k: dropout_masks.keep_mask(k, 0.1, shape)[0])(KEY))
    mesh = Mesh(np.array(jax.devices()[:8]), ("d",))
    sharded = jax.jit(lambda k: dropout_masks.keep_mask(k, 0.1, shape)[0], out_shardings=NamedSharding(mesh, spec))(KEY)
    assert len(sharded.addressable_shards) == 8
    np.testing.assert_array_equal(np.asarray(sharded), want)


def test_every_group_gets_its_own_counter_at_any_size():
    """The two counter words (row, position in the row) differ for every group of four, and a pod's
    global batch with 2^32 groups or more still gets a mask (traced from shapes: 2^34 elements)."""
    row, position = dropout_masks._counters((3, 5, 7))
    pairs = set(zip(np.asarray(row).ravel().tolist(), np.asarray(position).ravel().tolist(), strict=True))
    assert len(pairs) == 3 * 5 * 7
    huge = jax.eval_shape(lambda k: dropout_masks.keep_mask(k, 0.1, (2**17, 2**10, 2**7))[0], KEY)
    assert huge.shape == (2**17, 2**10, 2**7)


def test_a_rate_next_to_1_keeps_one_draw_in_65536_and_finite_gradients():
    x = jnp.ones((256, 4096))  # about 16 kept
    grads = jax.grad(lambda x: jnp.sum(dropout(x, 0.999999, KEY)))(x)
    assert dropout_masks.keep_mask(KEY, 0.999999, (1,))[1] == 1 / 65536
    assert np.isfinite(np.asarray(grads)).all() and np.asarray(grads).max() == 65536


def test_rates_outside_0_1_are_refused():
    with pytest.raises(ValueError, match="not in"):
        dropout_masks.keep_mask(KEY, 1.0, (4,))


def test_selected_draws_are_the_stacked_draws_without_a_concatenate():
    """``draws_selected`` (``bench_levers.py dropout-selected-draws``) gives every word's four halves in
    ``draws_stacked``'s order with no concatenate in the program, so the lever changes how XLA may fuse
    the mask, not the mask: the same keep masks, a last axis not a multiple of four included."""
    rng = np.random.default_rng(0)
    hi, lo = (jnp.asarray(rng.integers(0, 2**32, (3, 5), dtype=np.uint64), jnp.uint32) for _ in range(2))
    np.testing.assert_array_equal(dropout_masks.draws_selected(hi, lo), dropout_masks.draws_stacked(hi, lo))
    lowered = lambda f: jax.jit(f).lower(hi, lo).as_text()
    assert "concatenate" in lowered(dropout_masks.draws_stacked)
    assert "concatenate" not in lowered(dropout_masks.draws_selected)
    shapes = [(4, 10, 64), (3, 7, 10), (5,)]
    want = [np.asarray(dropout_masks.keep_mask(KEY, 0.3, shape)[0]) for shape in shapes]
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(dropout_masks, "split_draws", dropout_masks.draws_selected)
        for shape, mask in zip(shapes, want, strict=True):
            np.testing.assert_array_equal(jax.jit(lambda k, s=shape: dropout_masks.keep_mask(k, 0.3, s)[0])(KEY), mask)
