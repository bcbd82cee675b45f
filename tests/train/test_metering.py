"""The loop's window meter and cadence: every step's loss is in the window mean (also steps fetched
early for an evaluation), evaluation time is not in the rates, and the predicates fire where configured."""

import time

import numpy as np
import pytest

from omnidistill.train.loop import Cadence
from omnidistill.train.metering import WindowMeter


def batch(tokens, width=8, examples=2):
    mask = np.zeros((examples, width), np.int32)
    mask.flat[:tokens] = 1
    return {"attention_mask": mask, "example_mask": np.ones(examples, np.int32)}


def test_window_keeps_losses_fetched_before_an_evaluation_and_drops_non_finite_steps():
    meter = WindowMeter(processes=2)
    for _ in range(3):
        meter.add_batch(batch(6), wait_s=0.01)
    meter.add_step_metrics([{"loss": 1.0, "finite": True, "grad_norm": 3.0}, {"loss": np.nan, "finite": False, "grad_norm": np.nan}])
    meter.add_step_metrics([{"loss": 3.0, "finite": True, "grad_norm": 5.0}])  # fetched later, at the log step
    s = meter.scalars()
    assert s["loss"] == 2.0 and s["grad_norm"] == 5.0
    assert s["padding_fraction"] == pytest.approx(1 - 6 / 16) and s["input_wait_ms"] == pytest.approx(10.0)
    meter.reset()
    assert meter.steps == 0 and np.isnan(meter.scalars()["loss"]) and meter.processes == 2


def test_paused_time_is_left_out_of_the_rates():
    meter = WindowMeter()
    meter.add_batch(batch(16, width=16, examples=1), wait_s=0.0)
    with meter.paused():
        time.sleep(0.3)
    # the active time is microseconds, so bracket the rate's own clock reading instead of comparing
    # with a reading taken at another moment (a busy host once put 60 us between the two)
    active_before = time.perf_counter() - meter.started - meter.paused_s
    rate = meter.scalars()["tokens_per_s"]
    active_after = time.perf_counter() - meter.started - meter.paused_s
    assert meter.paused_s >= 0.3
    assert 16 / active_after <= rate <= 16 / active_before
    assert active_after < 0.3  # the paused 0.3 s is not in it


def test_cadence_predicates():
    c = Cadence(total_steps=10, log_every=3, eval_every=4, checkpoint_every=5, has_dev=True)
    assert [s for s in range(1, 11) if c.log(s)] == [3, 6, 9, 10]
    assert [s for s in range(1, 11) if c.evaluate(s)] == [4, 8, 10]
    assert [s for s in range(1, 11) if c.checkpoint(s, preempted=s == 7)] == [5, 7, 10]
    assert not any(Cadence(10, 3, 4, 5, has_dev=False).evaluate(s) for s in range(1, 11))
