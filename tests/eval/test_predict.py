"""predict_ids: the Scorer's and eval's loop over batches."""

import numpy as np
import pytest

from omnidistill.config import MeshConfig
from omnidistill.eval.predict import IN_FLIGHT, inference_buckets, predict_ids
from omnidistill.parallel.mesh import build_mesh


class ReadLogged:
    """A batch's scores whose reading back (``np.asarray``) is logged, as a device array's would wait."""

    is_fully_addressable = True

    def __init__(self, batch: int, values: np.ndarray, log: list[str]):
        self.batch, self.values, self.log = batch, values, log

    def copy_to_host_async(self) -> None:
        """A device array's copy back starts here; reading it is what waits."""

    def __array__(self, dtype=None, copy=None):
        self.log.append(f"read {self.batch}")
        return self.values


def logged_predict_fn(log: list[str]):
    """A predict function whose four scores of a row are its token ids' sum (0 for a padding row), and
    which logs each dispatch."""
    count = [0]

    def predict(params, batch):
        del params
        i, count[0] = count[0], count[0] + 1
        log.append(f"dispatch {i}")
        ids = np.asarray(batch["input_ids"]) * np.asarray(batch["attention_mask"])
        return ReadLogged(i, np.repeat(ids.sum(1, keepdims=True), 4, axis=1).astype(np.float32), log)

    return predict


@pytest.mark.parametrize("in_flight", [None, 0])
def test_predict_ids_dispatches_batches_ahead_of_the_one_it_reads_back(in_flight):
    """The device gets the next batches while the host reads one back: batch i is read only after
    batch i + IN_FLIGHT is dispatched (0: each batch read before the next is made), and the scores
    land in the items' order either way."""
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 100, n).astype(np.int32) for n in rng.integers(1, 60, 53)]
    mesh = build_mesh(MeshConfig())
    log: list[str] = []
    scores = predict_ids(
        logged_predict_fn(log), None, ids, mesh, pad_id=0, batch_size=8, buckets=inference_buckets(64, 16), in_flight=in_flight
    )
    np.testing.assert_array_equal(scores, np.repeat(np.array([[x.sum()] for x in ids], np.float32), 4, axis=1))
    ahead = IN_FLIGHT if in_flight is None else in_flight
    batches = sum(e.startswith("dispatch") for e in log)
    assert batches == 7 and IN_FLIGHT > 0  # 53 items in batches of 8, each dispatched once
    for i in range(batches):
        read = log.index(f"read {i}")
        dispatched = [int(e.split()[1]) for e in log[:read] if e.startswith("dispatch")]
        assert max(dispatched) == min(i + ahead, batches - 1)
