"""The XLA settings the suite runs under, and the environment of the processes tests start.

The suite compiles with XLA's backend optimization level 0 (LLVM without its optimization passes, on
the CPU): the same HLO programs, compiled 2-2.5x faster (a tiny mBERT training step: 5.3 s -> 2.3 s on
the CI's 2-core hosts), at the cost of slower machine code, which tiny models hardly feel. It also
turns XLA's newer CPU fusion emitters off (``--xla_cpu_use_fusion_emitters=false``: fusions are
emitted element by element, as before them), which compile faster still: the model tests
(``tests/models``, the sharded-step and packing-loss files) went from 500-587 s to 404-412 s of CPU
time on a 2-core Xeon host, in alternating runs. Compiling dominates the suite's CPU time.

And it compiles each program's machine code as one LLVM module (``--xla_cpu_parallel_codegen_split_count=1``)
rather than split into parts compiled in parallel, whose splitting and linking cost more CPU than the
parallelism saves on 2 cores running 3 workers: ``tests/models/test_scan.py`` took 50.2 and 49.6 s of user
CPU without it against 46.0 and 46.6 with it on jaxlib 0.12.1, and 35.1 against 32.8 on 0.10.2 (alternating
runs, the 2-core Zen 4 host, 2026-12-08). XLA has known the flag since jaxlib 0.8 at least (pyproject's lowest jax).

None of these changes a value a test checks: every comparison in the suite is between programs compiled
the same way or against PyTorch with a tolerance. The one test that reads XLA's own choice of ops
(``tools/op_mix.py`` on a trace) compiles its program with the emitters on, as users do. Users' runs
and the benchmark tools keep XLA's defaults, and so does the quick-start test, whose few hundred
training steps are where the slower code costs the most. Tests that run a few dozen steps in process
pay some of it too (the tiny default's 8-device step: 430 ms of CPU at level 0, 540 ms with the
emitters off as well), which the compiles saved outweigh in the suite's total
(docs/benchmarks.md, "Test suite time").

XLA aborts the process on a flag it does not know, and newer XLA has no legacy emitters to go back to
(jaxlib 0.12, which pip installs on Python 3.12 and later, removed the flag): the suite asks XLA once,
in a child process, and leaves the flag out where it is unknown (:func:`fusion_emitters_flag`)."""

from __future__ import annotations

import os
import subprocess
import sys

OPTIMIZATION_LEVEL_0 = "--xla_backend_optimization_level=0"
FUSION_EMITTERS_OFF = "--xla_cpu_use_fusion_emitters=false"
CODEGEN_IN_ONE_PART = "--xla_cpu_parallel_codegen_split_count=1"
_FLAG_KNOWN = "OMNIDISTILL_TESTS_XLA_KNOWS_FUSION_EMITTERS"  # the probe's answer, inherited by workers and children
_CACHE_SETTINGS = ("JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")


def xla_knows(flag: str) -> bool:
    """Whether this XLA takes ``flag`` in ``XLA_FLAGS``: a child Python starts the CPU backend with it
    (an unknown flag aborts that process, not this one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    probe = [sys.executable, "-c", "import jax; jax.devices()"]
    return subprocess.run(probe, env={**env, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}, capture_output=True).returncode == 0


def fusion_emitters_flag() -> bool:
    """Whether this XLA knows ``--xla_cpu_use_fusion_emitters`` (:func:`xla_knows`), asked once per
    suite: the answer is kept in the environment, which the parallel workers and the tests'
    subprocesses inherit."""
    if _FLAG_KNOWN not in os.environ:
        os.environ[_FLAG_KNOWN] = "1" if xla_knows(FUSION_EMITTERS_OFF) else "0"
    return os.environ[_FLAG_KNOWN] == "1"


def fast_compile_flags() -> str:
    """The suite's compile setting: level 0, machine code in one part, and the legacy emitters where this
    XLA still has them."""
    return " ".join([OPTIMIZATION_LEVEL_0, CODEGEN_IN_ONE_PART, *([FUSION_EMITTERS_OFF] if fusion_emitters_flag() else [])])


def emitters_as_users_compile() -> dict[str, bool]:
    """Compile options that undo the suite's emitters-off setting for one program, so that it is
    compiled as users' programs are (empty where XLA has only the fusion emitters)."""
    return {"xla_cpu_use_fusion_emitters": True} if fusion_emitters_flag() else {}


def xla_flags(devices: int | None, fast_compile: bool = True) -> str:
    """``XLA_FLAGS`` for a process of the suite with ``devices`` simulated CPU devices (None: one, XLA's
    own), compiled fast unless ``fast_compile`` is off (XLA's default level, as users run)."""
    host = [] if devices is None else [f"--xla_force_host_platform_device_count={devices}"]
    return " ".join([*host, *([fast_compile_flags()] if fast_compile else [])])


def child_env(devices: int | None = None, fast_compile: bool = True, **extra: str) -> dict[str, str]:
    """This environment for a child process on the CPU with ``devices`` simulated devices (None: one),
    the suite's compile setting unless ``fast_compile`` is off, and ``extra``; the JAX settings of this
    process (device count, distributed start) are left out, the persistent compilation cache is kept."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_")) or k in _CACHE_SETTINGS}
    env.update({"XLA_FLAGS": xla_flags(devices, fast_compile), "JAX_PLATFORMS": "cpu", **extra})
    return env
