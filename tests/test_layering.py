"""The package reads top-down: no import cycles, ``eval`` never imports ``train``, and the library never
imports the benchmarks or tools (CONTRIBUTING.md, "How the package is layered")."""

from __future__ import annotations

import ast
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


def test_eval_never_imports_train():
    graph = import_graph()
    bad = {m: sorted(t for t in ts if t.startswith("omnidistill.train")) for m, ts in graph.items() if m.startswith("omnidistill.eval")}
    assert not {m: ts for m, ts in bad.items() if ts}


def test_lower_layers_do_not_import_higher_ones():
    higher = tuple(f"omnidistill.{m}" for m in ("train", "eval", "export", "label", "cli", "scorer"))
    lower = tuple(f"omnidistill.{m}" for m in ("models", "data", "parallel", "runs", "config", "losses"))
    graph = import_graph()
    bad = {m: sorted(t for t in ts if t.startswith(higher)) for m, ts in graph.items() if m.startswith(lower)}
    assert not {m: ts for m, ts in bad.items() if ts}


def test_the_library_does_not_import_benchmarks_or_tools():
    graph = import_graph()
    assert not any(t.startswith(("omnidistill.bench", "tools")) for ts in graph.values() for t in ts)
    assert not (PACKAGE / "bench.py").exists()


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
