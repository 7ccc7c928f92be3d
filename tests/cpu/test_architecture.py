"""The layout is the architecture: no import cycle in src/, and no mechanism package imports the orchestrator."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
MECHANISMS = ("questioning", "navigating", "attributing")


def _modules() -> dict[str, Path]:
    out = {}
    for p in (SRC / "evolvekit").rglob("*.py"):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every evolvekit module imported anywhere in the file (function bodies included), except under
    ``if TYPE_CHECKING:`` (annotations only, never executed)."""
    tree = ast.parse(path.read_text())
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in node.body
        for n in ast.walk(child)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in known}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(p, set(mods)) - {m} for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(u: str, stack: list[str]) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                cycles.append(stack[stack.index(v) :] + [v])
            elif v not in state:
                visit(v, stack)
        stack.pop()
        state[u] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    return cycles


def test_no_import_cycles_in_src():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_mechanisms_never_import_the_orchestrator():
    graph = _graph()
    bad = {
        m: sorted(d for d in deps if d.startswith("evolvekit.orchestrator"))
        for m, deps in graph.items()
        if m.count(".") and m.split(".")[1] in MECHANISMS
    }
    assert not {m: d for m, d in bad.items() if d}, bad
    # and the leaf the stages share depends on nothing above the data model and the store
    assert graph["evolvekit.protocols"] <= {"evolvekit.store.sqlite", "evolvekit.types"}


def test_no_import_cycle_between_packages():
    """Issue 55: agent <-> env (env imported the agent's parser and prompt) and cli <-> report (an ablation's child
    imported the CLI's logging) were package cycles. The action text format and the system prompt live in env/, the
    logging set-up in evolvekit/logs.py; no cycle remains between the top-level packages and modules."""

    def package(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    graph: dict[str, set[str]] = {}
    for mod, deps in _graph().items():
        graph.setdefault(package(mod), set()).update(package(d) for d in deps if package(d) != package(mod))
    for deps in list(graph.values()):
        for d in deps:
            graph.setdefault(d, set())
    assert _cycles(graph) == []
