"""The explicit train state: a pytree of step, parameters, optimizer state and base RNG key."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax


class TrainState(NamedTuple):
    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array
