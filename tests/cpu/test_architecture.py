"""The layout is the architecture: no import cycle in src/ (type annotations included), no mechanism package imports
the orchestrator, and every import points down the layers docs/architecture.md draws."""

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


def _imports(path: Path, known: set[str], annotations: bool = False) -> set[str]:
    """Every evolvekit module imported anywhere in the file (function bodies included), except under
    ``if TYPE_CHECKING:`` (annotations only, never executed) unless ``annotations``."""
    tree = ast.parse(path.read_text())
    skip = {
        id(n)
        for node in ast.walk(tree)
        if not annotations and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
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


def _graph(annotations: bool = False) -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(p, set(mods), annotations) - {m} for m, p in mods.items()}


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


def test_no_module_imports_one_that_imports_it_back_not_even_for_annotations():
    """Issue 79: llm/batcher.py imported llm/local.py under TYPE_CHECKING while local.py imported batcher.py inside
    its methods (now batcher.py names what it needs as a protocol, ``BatchModel``)."""
    cycles = _cycles(_graph(annotations=True))
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


# ---- the drawing of docs/architecture.md is the import graph (issue 79.5) ------------------------------------------

ARCHITECTURE = SRC.parent / "docs" / "architecture.md"
_NAME_COLUMN = 45  # the drawing's names stand left of this column, their descriptions right of it


def drawn_layers(text: str) -> list[set[str]]:
    """The layers of the first code block of ``text``, top first: each a set of package names (``cli``) and top-level
    module names (``config``); a line holding only ``│`` separates two layers."""
    block = text.split("```", 2)[1]
    layers: list[set[str]] = [set()]
    for line in block.splitlines()[1:]:
        if line.strip() == "│":
            layers.append(set())
            continue
        for name in line[:_NAME_COLUMN].split():
            layers[-1].add(name.removesuffix("/").removesuffix(".py"))
    return [layer for layer in layers if layer]


def _unit(module: str) -> str:
    """The drawn unit of a module: its package (``evolvekit.llm.local`` -> ``llm``) or top-level module; the package's
    own ``__init__`` counts with the bottom layer."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "evolvekit"


def misdrawn(layers: list[set[str]], graph: dict[str, set[str]]) -> list[str]:
    """Every package-level import that does not point down the drawing (within the bottom layer, any direction)."""
    level = {name: i for i, layer in enumerate(layers) for name in layer}
    level["evolvekit"] = len(layers) - 1
    bad = []
    for mod, deps in graph.items():
        u = _unit(mod)
        for v in sorted({_unit(d) for d in deps} - {u}):
            if level[v] < level[u] or (level[v] == level[u] and level[u] != len(layers) - 1):
                bad.append(f"{mod} imports {v} (layer {level[v]}), from layer {level[u]}")
    return bad


def test_the_drawing_lists_every_package_and_module_once():
    layers = drawn_layers(ARCHITECTURE.read_text())
    drawn = [name for layer in layers for name in layer]
    units = {_unit(m) for m in _modules()} - {"evolvekit"}
    assert len(drawn) == len(set(drawn)), "drawn twice"
    assert set(drawn) == units, f"missing: {sorted(units - set(drawn))}; not in src: {sorted(set(drawn) - units)}"
    assert layers[0] == {"cli"} and {"config", "types"} <= layers[-1]


def test_every_import_points_down_the_drawing():
    bad = misdrawn(drawn_layers(ARCHITECTURE.read_text()), _graph(annotations=True))
    assert not bad, "\n".join(bad[:20])


def test_the_drawing_check_sees_an_import_that_points_up_or_sideways():
    layers = [{"cli"}, {"a", "b"}, {"config", "types"}]
    assert misdrawn(layers, {"evolvekit.cli.x": {"evolvekit.a.y"}, "evolvekit.a.y": {"evolvekit.config"}}) == []
    assert misdrawn(layers, {"evolvekit.config": {"evolvekit.types"}}) == []  # the bottom layer: either way
    up = misdrawn(layers, {"evolvekit.a.y": {"evolvekit.cli.x"}, "evolvekit.cli.x": set()})
    side = misdrawn(layers, {"evolvekit.a.y": {"evolvekit.b.z"}, "evolvekit.b.z": set()})
    assert up == ["evolvekit.a.y imports cli (layer 0), from layer 1"]
    assert side == ["evolvekit.a.y imports b (layer 1), from layer 1"]


def _long_functions(limit: int) -> list[str]:
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({length} lines)")
    return long


def test_no_function_in_src_is_longer_than_120_lines():
    """Issue 79.5: a function over 120 lines is split where the split names a real step (build_loop was 140,
    eval_command 128, create_app 244)."""
    assert _long_functions(120) == []
    assert _long_functions(60)  # the measure sees long functions (a few are between 60 and 120)
