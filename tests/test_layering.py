"""The package reads top-down: each module imports only its own layer and those above it, as
CONTRIBUTING.md lists them ("How the package is layered"), with no import cycles, and the library never
imports the benchmarks or tools."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "omnidistill"


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """module -> the omnidistill modules it imports (anywhere in the file, lazy imports included)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("omnidistill"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("omnidistill")}
        graph[name] = {t for t in targets if t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def documented_layers() -> list[list[str]]:
    """The rows of CONTRIBUTING.md's layer list, top (imported by all) to bottom, as module prefixes:
    ``models/`` -> ``omnidistill.models``, ``losses.py`` -> ``omnidistill.losses``."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    block = text.split("## How the package is layered", 1)[1].split("```", 2)[1]
    rows = []
    for line in block.splitlines():
        names = re.match(r"^((?:[\w.]+(?:/|\.py)\s+)+)", line + " ")
        if names:
            rows.append([f"omnidistill.{name.rstrip('/').removesuffix('.py')}" for name in names.group(1).split()])
    return [row for row in rows if row != ["omnidistill.tools"]]


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    for i, row in enumerate(layers):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in row):
            return i
    return None


def test_every_module_imports_only_its_own_layer_and_those_above():
    layers = documented_layers()
    assert len(layers) == 8 and layers[0][0] == "omnidistill.config" and layers[-1][0] == "omnidistill.cli"
    graph = import_graph()
    unplaced = sorted(m for m in graph if m != "omnidistill" and layer_of(m, layers) is None)
    assert not unplaced, f"modules in no row of CONTRIBUTING.md's layer list: {unplaced}"
    upward = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        for t in targets
        if m != "omnidistill" and t != "omnidistill" and layer_of(t, layers) > layer_of(m, layers)
    )
    assert not upward, f"imports of a later layer: {upward}"


def test_the_layer_check_reads_the_rows():
    layers = [["omnidistill.config"], ["omnidistill.models", "omnidistill.data"], ["omnidistill.train"]]
    assert layer_of("omnidistill.data.splits", layers) == 1 and layer_of("omnidistill.train", layers) == 2
    assert layer_of("omnidistill.datax", layers) is None and layer_of("omnidistill.cli", layers) is None
    row = ["omnidistill.export", "omnidistill.scorer", "omnidistill.score_file", "omnidistill.label", "omnidistill.sweep"]
    assert row in documented_layers()


def test_the_library_does_not_import_benchmarks_or_tools():
    graph = import_graph()
    assert not any(t.startswith(("omnidistill.bench", "tools")) for ts in graph.values() for t in ts)
    assert not (PACKAGE / "bench.py").exists()


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
