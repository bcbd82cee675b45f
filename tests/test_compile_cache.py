"""The CLI's persistent compilation cache (omnidistill/compile_cache.py): where it goes, what turns it
off, and that a second process loads what the first compiled and scores the same bits."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from omnidistill.compile_cache import DEFAULT_MAX_BYTES, DEFAULT_MIN_COMPILE_SECONDS, ENV, OFF, configure, host_kind
from tests.xla_env import child_env

JAX_DIR, JAX_MAX, JAX_MIN = "JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2595.124\nflags\t\t: fpu sse2 avx2 avx512f\n\n"


def test_the_default_folder_is_under_the_users_cache_one_per_host_kind(tmp_path):
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    folder = configure(environ)
    assert folder == str(tmp_path / "omnidistill" / "xla" / host_kind()) and Path(folder).is_dir()
    assert environ[JAX_DIR] == folder
    assert environ[JAX_MAX] == str(DEFAULT_MAX_BYTES) and environ[JAX_MIN] == str(DEFAULT_MIN_COMPILE_SECONDS)


def test_a_folder_of_ones_own_and_jaxs_limits_are_kept(tmp_path):
    environ = {ENV: str(tmp_path / "xla"), JAX_MAX: "123", JAX_MIN: "2.5"}
    assert configure(environ) == str(tmp_path / "xla" / host_kind())
    assert environ[JAX_MAX] == "123" and environ[JAX_MIN] == "2.5"


def test_jaxs_own_folder_wins_and_nothing_else_is_set(tmp_path):
    environ = {JAX_DIR: str(tmp_path / "jax"), ENV: str(tmp_path / "ours")}
    assert configure(environ) == str(tmp_path / "jax")
    assert environ == {JAX_DIR: str(tmp_path / "jax"), ENV: str(tmp_path / "ours")}
    assert not (tmp_path / "ours").exists()


@pytest.mark.parametrize("value", [*OFF, "OFF", " Off "])
def test_off_leaves_jax_without_a_cache(value, tmp_path):
    environ = {ENV: value, "XDG_CACHE_HOME": str(tmp_path)}
    assert configure(environ) is None
    assert set(environ) == {ENV, "XDG_CACHE_HOME"} and not any(tmp_path.iterdir())


def test_a_bucket_has_no_cap_since_the_caps_lock_needs_a_local_file_system(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: ModuleSpec(name, None) if name == "gcsfs" else real(name, *a))
    environ = {ENV: "gs://bucket/xla/"}
    assert configure(environ) == f"gs://bucket/xla/{host_kind()}"
    assert environ[JAX_DIR] == f"gs://bucket/xla/{host_kind()}" and JAX_MAX not in environ


def test_a_bucket_without_its_filesystem_package_turns_the_cache_off_and_names_it(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gcsfs" else real(name, *a))
    environ = {ENV: "gs://bucket/xla"}
    assert configure(environ) is None and JAX_DIR not in environ
    assert "gs:// paths need gcsfs: pip install gcsfs" in capsys.readouterr().err


def test_a_folder_that_cannot_be_written_turns_the_cache_off_and_says_so(tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    environ = {ENV: str(tmp_path / "file" / "xla")}
    assert configure(environ) is None
    assert JAX_DIR not in environ
    err = capsys.readouterr().err
    assert "compilation cache off" in err and str(tmp_path / "file" / "xla") in err and ENV in err


def test_without_a_home_folder_the_cache_is_off_and_says_where_to_put_it(monkeypatch, capsys):
    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    environ: dict[str, str] = {}
    assert configure(environ) is None and environ == {}
    assert "Could not determine home directory" in capsys.readouterr().err


def test_the_host_kind_follows_the_cpus_instruction_set_not_its_clock():
    kind = host_kind(CPUINFO, "x86_64")
    assert kind.startswith("x86_64-") and len(kind) == len("x86_64-") + 12
    assert host_kind(CPUINFO.replace("2595.124", "3100.000"), "x86_64") == kind  # the clock, not the CPU
    assert host_kind(CPUINFO + "processor\t: 1\nflags\t\t: other\n", "x86_64") == kind  # the first processor only
    assert host_kind(CPUINFO.replace(" avx512f", ""), "x86_64") != kind  # no AVX-512: other machine code
    assert host_kind(CPUINFO.replace("AMD EPYC", "Intel Xeon"), "x86_64") != kind
    assert host_kind(CPUINFO, "aarch64") != kind


def test_a_second_score_loads_the_programs_the_first_compiled_and_writes_the_same_bytes(tmp_path, trained_tiny, repo_root):
    """Two ``omnidistill score`` processes with the cache in its default place: the first compiles and
    writes the entries, the second reads them (their access times move), writes none, and its output is
    the first's byte for byte."""
    env = {k: v for k, v in child_env(8).items() if k not in (JAX_DIR, JAX_MAX, ENV)}  # the run was saved on 8 devices
    env.update({"XDG_CACHE_HOME": str(tmp_path / "home-cache"), JAX_MIN: "0"})  # the tiny model compiles fast: keep all
    items = tmp_path / "items.jsonl"
    items.write_text("".join((repo_root / "data" / "sample" / "test.jsonl").read_text().splitlines(keepends=True)[:40]))
    folder = tmp_path / "home-cache" / "omnidistill" / "xla" / host_kind()

    def score(out: Path) -> dict[str, bytes]:
        command = [sys.executable, "-m", "omnidistill", "score", "--model", str(trained_tiny), "--input", str(items), "--output", str(out)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return {p.name: p.read_bytes() for p in folder.iterdir() if p.name.endswith("-atime")}

    first = score(tmp_path / "first.jsonl")
    entries = sorted(p.name for p in folder.iterdir() if p.name.endswith("-cache"))
    assert any(name.startswith("jit_predict-") for name in entries), entries
    second = score(tmp_path / "second.jsonl")
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith("-cache")) == entries  # nothing compiled again
    read_again = [name for name in first if second[name] != first[name]]
    assert any(name.startswith("jit_predict-") for name in read_again), (first, second)
    assert (tmp_path / "second.jsonl").read_bytes() == (tmp_path / "first.jsonl").read_bytes()


def test_called_after_jax_is_imported_it_sets_jaxs_config_and_the_next_compile_is_kept(tmp_path):
    """``omnidistill.cli.main`` called from Python (a notebook that imported JAX first): the environment
    is read too late by then, so the cache goes into JAX's config, and a compile lands in the folder."""
    code = (
        "import jax, jax.numpy as jnp\n"
        "from omnidistill import compile_cache\n"
        "folder = compile_cache.configure()\n"
        "assert jax.config.jax_compilation_cache_dir == folder, (jax.config.jax_compilation_cache_dir, folder)\n"
        "jax.jit(lambda x: jnp.sin(x) * 2)(jnp.ones(3)).block_until_ready()\n"
        "print(folder)\n"
    )
    env = {k: v for k, v in child_env().items() if k not in (JAX_DIR, JAX_MAX, ENV)}
    env.update({"XDG_CACHE_HOME": str(tmp_path), JAX_MIN: "0"})
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder == tmp_path / "omnidistill" / "xla" / host_kind()
    assert any(p.name.startswith("jit__lambda") and p.name.endswith("-cache") for p in folder.iterdir()), sorted(folder.iterdir())
