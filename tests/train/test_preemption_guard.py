"""Multi-process preemption agreement: the fallback all-gather runs every N steps, not every step."""

import numpy as np
import pytest

from omnidistill.train import preemption
from omnidistill.train.preemption import PreemptionGuard


def test_flags_are_gathered_every_n_steps_only(monkeypatch):
    gathers = []
    monkeypatch.setattr(preemption.jax, "process_count", lambda: 2)

    def no_sync_manager(step):
        raise RuntimeError("no preemption sync manager")

    def gather(flags):
        gathers.append(int(flags[0]))
        return np.array([flags, [1 if len(gathers) >= 2 else 0]])  # the other process is signalled later

    monkeypatch.setattr(preemption.multihost_utils, "reached_preemption_sync_point", no_sync_manager)
    monkeypatch.setattr(preemption.multihost_utils, "process_allgather", gather)
    guard = PreemptionGuard(every=4)
    stops = [guard.should_stop(step) for step in range(1, 9)]
    assert len(gathers) == 2  # steps 4 and 8
    assert stops == [False] * 7 + [True]
    with pytest.raises(ValueError, match="preemption_check_every"):
        PreemptionGuard(every=0)


def test_the_sync_point_is_honoured_on_every_step(monkeypatch):
    monkeypatch.setattr(preemption.jax, "process_count", lambda: 2)
    monkeypatch.setattr(preemption.multihost_utils, "reached_preemption_sync_point", lambda step: step == 3)
    monkeypatch.setattr(preemption.multihost_utils, "process_allgather", lambda flags: np.array([[0], [0]]))
    guard = PreemptionGuard(every=100)
    assert [guard.should_stop(s) for s in (1, 2, 3)] == [False, False, True]
