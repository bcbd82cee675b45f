"""The XLA settings the suite runs under, and the environment of the processes tests start.

The suite compiles with XLA's backend optimization level 0 (LLVM without its optimization passes, on
the CPU): the same HLO programs, compiled 2-2.5x faster (a tiny mBERT training step: 5.3 s -> 2.3 s on
the CI's 2-core hosts), at the cost of slower machine code, which tiny models hardly feel. It also
turns XLA's newer CPU fusion emitters off (``--xla_cpu_use_fusion_emitters=false``: fusions are
emitted element by element, as before them), which compile faster still: the model tests
(``tests/models``, the sharded-step and packing-loss files) went from 500-587 s to 404-412 s of CPU
time on a 2-core Xeon host, in alternating runs. Compiling dominates the suite's CPU time.

Neither changes a value a test checks: every comparison in the suite is between programs compiled
the same way or against PyTorch with a tolerance. The one test that reads XLA's own choice of ops
(``tools/op_mix.py`` on a trace) compiles its program with the emitters on, as users do. Users' runs
and the benchmark tools keep XLA's defaults, and so does the quick-start test, whose few hundred
training steps are where the slower code costs the most. Tests that run a few dozen steps in process
pay some of it too (the tiny default's 8-device step: 430 ms of CPU at level 0, 540 ms with the
emitters off as well), which the compiles saved outweigh in the suite's total
(docs/benchmarks.md, "Test suite time")."""

from __future__ import annotations

import os

FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
_CACHE_SETTINGS = ("JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")


def xla_flags(devices: int | None, fast_compile: bool = True) -> str:
    """``XLA_FLAGS`` for a process of the suite with ``devices`` simulated CPU devices (None: one, XLA's
    own), compiled fast unless ``fast_compile`` is off (XLA's default level, as users run)."""
    host = [] if devices is None else [f"--xla_force_host_platform_device_count={devices}"]
    return " ".join([*host, *([FAST_COMPILE] if fast_compile else [])])


def child_env(devices: int | None = None, fast_compile: bool = True, **extra: str) -> dict[str, str]:
    """This environment for a child process on the CPU with ``devices`` simulated devices (None: one),
    the suite's compile setting unless ``fast_compile`` is off, and ``extra``; the JAX settings of this
    process (device count, distributed start) are left out, the persistent compilation cache is kept."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_")) or k in _CACHE_SETTINGS}
    env.update({"XLA_FLAGS": xla_flags(devices, fast_compile), "JAX_PLATFORMS": "cpu", **extra})
    return env
