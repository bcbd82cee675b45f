"""The suite needs nothing outside the environment under test: every third-party module that the
package, the tests or the tools import comes from a distribution that omnidistill declares (its
dependencies and extras, and theirs), or from ``omniscore``, which `.ci/run` and the README install
with ``--no-deps``. A test importing a package that merely happens to be installed fails here, in
any interpreter (virtual environment, conda or system Python)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from omnidistill.export.omniscore_format import OMNISCORE_INSTALL

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("test", "torch", "tfds", "wandb", "gcs")
INSTALLED_SEPARATELY = {"omniscore"}  # OMNISCORE_INSTALL (README, .ci/run)
# this repository's own modules (the tools import each other, and tests import the tools), and the peer's script
LOCAL = {"omnidistill", "tests", "peer_bench_torch"} | {path.stem for path in (ROOT / "tools").glob("*.py")}


def imported_modules(folders: list[Path]) -> dict[str, str]:
    """top-level module -> the first file importing it (absolute imports only)."""
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                for name in names:
                    found.setdefault(name.split(".")[0], path.name if not path.is_relative_to(ROOT) else str(path.relative_to(ROOT)))
    return found


def declared_closure(root: str, extras: tuple[str, ...]) -> set[str]:
    """Canonical names of ``root`` and every distribution it requires (with ``extras``), recursively."""
    seen: set[str] = set()
    todo = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        key = canonicalize_name(name)
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            markers = [{"extra": e} for e in (*wanted, "")]
            if req.marker is None or any(req.marker.evaluate(m) for m in markers):
                todo.append((req.name, tuple(req.extras)))
    return seen


def undeclared(modules: dict[str, str], allowed: set[str], providers: dict[str, list[str]]) -> list[str]:
    """``module (file; from distributions)`` for each third-party module no allowed distribution provides."""
    out = []
    for module, where in sorted(modules.items()):
        if module in sys.stdlib_module_names or module in LOCAL or module == "__future__":
            continue
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        if not dists & allowed:
            out.append(f"{module} ({where}; from {', '.join(sorted(dists)) or 'no installed distribution'})")
    return out


def test_every_third_party_import_comes_from_a_declared_distribution():
    modules = imported_modules([ROOT / "omnidistill", ROOT / "tests", ROOT / "tools"])
    allowed = declared_closure("omnidistill", EXTRAS) | INSTALLED_SEPARATELY
    missing = undeclared(modules, allowed, md.packages_distributions())
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_the_check_catches_an_import_of_an_installed_but_undeclared_package(tmp_path):
    (tmp_path / "uses_extra.py").write_text(
        "import json\nimport numpy\nfrom pytest_benchmark import plugin\nimport not_installed_anywhere\n"
    )
    modules = imported_modules([tmp_path])
    allowed = declared_closure("omnidistill", EXTRAS)
    assert "numpy" in allowed and "pytest-benchmark" not in allowed  # installed on the dev machine, declared nowhere
    providers = {"numpy": ["numpy"], "pytest_benchmark": ["pytest-benchmark"]}
    assert [m.split(" ")[0] for m in undeclared(modules, allowed, providers)] == ["not_installed_anywhere", "pytest_benchmark"]


def test_omniscore_is_installed_the_same_way_wherever_the_project_says_how():
    """README command 1, ``.ci/run`` and docs/export.md give OMNISCORE_INSTALL (as the export's warning
    and model cards do): without ``--ignore-requires-python``, omniscore 0.1.0's ``Requires-Python <3.13``
    stopped command 1 and ``.ci/run`` on Python 3.13."""
    for name in ("README.md", ".ci/run", "docs/export.md"):
        lines = [line for line in (ROOT / name).read_text(encoding="utf-8").splitlines() if "omniscore==" in line]
        commands = [line.replace("python3 -m pip install --quiet", "pip install") for line in lines]
        assert commands and all(OMNISCORE_INSTALL in command for command in commands), f"{name}: {lines}"
