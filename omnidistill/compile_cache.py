"""XLA's persistent compilation cache for the command line: each program is compiled once per machine.

``omnidistill score`` and ``eval`` compile one program per padded batch shape (11 on the realistic
lengths of ``tools/bench_score.py --varlen``, about 4 s each on an H200: docs/benchmarks.md), and
``train`` compiles its step and its dev evaluation, all again in every process. JAX can keep the
compiled executables on disk and load them the next time the same program is compiled; the CLI turns
that on (:func:`configure`, before JAX is imported), so a second ``score`` of the same model, ``eval``
again, ``train --resume`` or the seeds of a sweep load what an earlier process compiled (``eval`` right
after ``train`` compiles its own programs: training's dev evaluation runs on the training mesh).

Where it goes, read from the environment:

- ``OMNIDISTILL_COMPILE_CACHE``: a folder (local, or a bucket: ``gs://`` with ``gcsfs``, the ``gcs`` extra), or ``off``
  (also ``0``, ``false``, ``no``, ``none``). Unset or empty: ``$XDG_CACHE_HOME/omnidistill/xla``, else
  ``~/.cache/omnidistill/xla``.
- JAX's own ``JAX_COMPILATION_CACHE_DIR``, when set, wins: nothing here changes JAX's settings then.

Entries go in a subfolder per kind of host (:func:`host_kind`: the CPU's architecture, model and
feature flags), since JAX's keys name the program, the devices, the compiler options and
``XLA_FLAGS`` but not the host CPU's instruction set: a CPU executable compiled for AVX-512 must not be
loaded on a node without it that shares the same home folder. A local folder is capped at
:data:`DEFAULT_MAX_BYTES`, least recently used entries removed first; the cap also turns on JAX's file
lock, so that processes that compile at once never read half an entry. Programs that compiled in under
:data:`DEFAULT_MIN_COMPILE_SECONDS` are not kept (they cost about what reading them would).
``JAX_COMPILATION_CACHE_MAX_SIZE`` and ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` set either.
A folder that cannot be written turns the cache off with one warning. On several hosts (``jax.distributed``)
only process 0 writes entries: a folder every host reads (a shared file system, a bucket) serves them all
where their keys agree. On CPUs they do not (JAX's key holds the CPU topology's fingerprint, which differs
from process to process), so there the other processes compile each program, and CPU training of several
processes on jaxlib 0.12.1 or later turns the cache off
(:func:`omnidistill.train.distributed.avoid_cached_cpu_collectives`: such jobs hang on the mix).

A hit is the executable a compile would give: the scores are the same bits either way
(``tests/test_compile_cache.py``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import sys
from collections.abc import MutableMapping
from pathlib import Path

ENV = "OMNIDISTILL_COMPILE_CACHE"
OFF = ("off", "0", "false", "no", "none")
DEFAULT_MAX_BYTES = 4 * 2**30
"""The cap of a local cache folder (4 GiB: hundreds of compiled training and scoring programs, and well
under a cluster's usual home-folder quota)."""
DEFAULT_MIN_COMPILE_SECONDS = 0.25
"""Programs compiled faster than this are not kept (JAX's own default, 1 s, would leave out most of a
CPU's scoring shapes: docs/benchmarks.md, "Compilation cache")."""
_JAX_DIR = "JAX_COMPILATION_CACHE_DIR"
_JAX_MAX_SIZE = "JAX_COMPILATION_CACHE_MAX_SIZE"
_JAX_MIN_SECONDS = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def host_kind(cpuinfo: str | None = None, machine: str | None = None) -> str:
    """``<architecture>-<12 hex digits>``: the CPU's architecture, and a digest of its model name and
    feature flags (Linux's ``/proc/cpuinfo``, first processor; elsewhere ``platform.processor()``).
    Hosts that can run each other's CPU code get the same name."""
    machine = machine or platform.machine() or "unknown"
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = platform.processor()
    first = cpuinfo.split("\n\n", 1)[0]
    wanted = ("model name", "flags", "features", "cpu model", "isa")  # x86, ARM, RISC-V and others name them so
    lines = sorted(line.split(":", 1)[1].strip() for line in first.splitlines() if line.split(":", 1)[0].strip().lower() in wanted)
    described = "\n".join(lines) or first.strip()
    return f"{machine}-{hashlib.sha256(described.encode()).hexdigest()[:12]}"


def default_folder(environ: MutableMapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/omnidistill/xla``, else ``~/.cache/omnidistill/xla``."""
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "omnidistill" / "xla"


def _writable(folder: str) -> str | None:
    """Why ``folder`` cannot hold the cache, or None once it exists and can be written (a bucket URL:
    once its filesystem package is installed; JAX makes the folder)."""
    if "://" in folder:
        from omnidistill.storage import filesystem_package  # etils, only for a bucket

        scheme, package = filesystem_package(folder)
        found = package.isidentifier() and importlib.util.find_spec(package) is not None
        return None if found else f"{scheme} paths need {package}: pip install {package}"
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        return err.strerror or str(err)
    return None if os.access(folder, os.W_OK | os.X_OK) else "not writable"


def configure(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache for this process and the processes it starts (module
    docstring): sets ``JAX_COMPILATION_CACHE_DIR`` and, for a local folder, the size cap and the
    shortest compile kept, each unless already set, in ``environ`` (default ``os.environ``), and in
    JAX's config too if JAX is already imported. Returns the folder in use, or None when the cache is off."""
    environ = os.environ if environ is None else environ
    if environ.get(_JAX_DIR):
        return environ[_JAX_DIR]
    chosen = environ.get(ENV, "").strip()
    if chosen.lower() in OFF:
        return None
    try:
        root = chosen or str(default_folder(environ))
    except RuntimeError as err:  # no home folder to be found (HOME unset, no user entry)
        print(f"omnidistill: compilation cache off: {err}; set {ENV} to a folder, or to off", file=sys.stderr)
        return None
    remote = "://" in root
    folder = f"{root.rstrip('/')}/{host_kind()}" if remote else str(Path(root).expanduser() / host_kind())
    if (why := _writable(folder)) is not None:
        print(f"omnidistill: compilation cache off: cannot write {folder} ({why}); set {ENV} to another folder, or to off", file=sys.stderr)
        return None
    settings = {_JAX_DIR: folder, _JAX_MIN_SECONDS: str(DEFAULT_MIN_COMPILE_SECONDS)}
    if not remote:  # the cap's file lock needs a local file system
        settings[_JAX_MAX_SIZE] = str(DEFAULT_MAX_BYTES)
    for name, value in settings.items():
        environ.setdefault(name, value)
    if environ is os.environ and "jax" in sys.modules:  # called from Python after importing JAX: set its config too
        import jax

        jax.config.update("jax_compilation_cache_dir", environ[_JAX_DIR])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", float(environ[_JAX_MIN_SECONDS]))
        if _JAX_MAX_SIZE in environ:
            jax.config.update("jax_compilation_cache_max_size", int(environ[_JAX_MAX_SIZE]))
    return folder
