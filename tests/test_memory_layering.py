"""cfgcheck/memory/ is built in layers (shapes -> stack -> terms -> estimate -> verdict,
``cfgcheck.memory.LAYERS``): every import of a module of the package, at any level (inside
functions too, where a lazy import could hide a cycle), goes to its own layer or a lower one,
and the import graph has no cycle. Read from the sources with ``ast``: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cfgcheck.memory import LAYERS

PACKAGE = Path(__file__).resolve().parents[1] / "cfgcheck" / "memory"
PREFIX = "cfgcheck.memory"


def _modules() -> list[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def _imports(source: str) -> set[str]:
    """The modules of cfgcheck.memory that ``source`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == PREFIX:  # from cfgcheck.memory import weights, ...
                names = [f"{PREFIX}.{a.name}" for a in node.names]
            else:
                names = [node.module]
        elif isinstance(node, ast.ImportFrom):  # relative: from . import x / from .x import y
            base = node.module or ""
            names = [f"{PREFIX}.{base}" if base else f"{PREFIX}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith(PREFIX + "."):
                found.add(name.removeprefix(PREFIX + ".").split(".")[0])
    return found


def _graph() -> dict[str, set[str]]:
    return {m: _imports((PACKAGE / f"{m}.py").read_text()) & set(_modules()) for m in _modules()}


def _upward(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    return [
        f"{m} (layer {layers[m]}) imports {d} (layer {layers[d]})"
        for m, deps in sorted(graph.items())
        for d in sorted(deps)
        if m in layers and d in layers and layers[d] > layers[m]
    ]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle, each once, found by depth-first search."""
    cycles: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def visit(node: str, path: list[str]) -> None:
        for d in sorted(graph.get(node, ())):
            if d in path:
                cyc = path[path.index(d) :]
                if frozenset(cyc) not in seen:
                    seen.add(frozenset(cyc))
                    cycles.append([*cyc, d])
            elif len(path) < len(graph):
                visit(d, [*path, d])

    for start in sorted(graph):
        visit(start, [start])
    return cycles


def test_every_module_has_a_layer() -> None:
    missing = [m for m in _modules() if m not in LAYERS]
    assert not missing, f"declare the layer of {missing} in cfgcheck/memory/__init__.py LAYERS"


def test_no_module_imports_from_a_higher_layer() -> None:
    assert _upward(_graph(), LAYERS) == []


def test_the_imports_have_no_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_reader_sees_lazy_relative_and_package_imports() -> None:
    """The checks catch what they are for: a function-level import, a relative one and a
    ``from cfgcheck.memory import x``, and a cycle and an upward edge built from them."""
    source = (
        "from cfgcheck.memory import weights as w, stack\n"
        "def f():\n"
        "    from cfgcheck.memory.estimate import padded_batches\n"
        "    from .verdict import verdict\n"
        "    import cfgcheck.memory.plot\n"
        "    from cfgcheck.schema.model import ModelConfig\n"
    )
    assert _imports(source) == {"weights", "stack", "estimate", "verdict", "plot"}
    graph = {"stack": {"estimate"}, "estimate": {"stack", "weights"}, "weights": set()}
    assert _upward(graph, {"stack": 1, "estimate": 3, "weights": 2}) == [
        "stack (layer 1) imports estimate (layer 3)"
    ]
    assert _cycles(graph) == [["estimate", "stack", "estimate"]]


@pytest.mark.parametrize("module", ["estimate", "stack", "weights", "activations"])
def test_the_former_circle_imports_at_the_top(module: str) -> None:
    """The cycles once hidden by function-level imports are gone: these modules import the
    rest of cfgcheck.memory at module level only."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    lazy = [
        node.lineno
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX)
    ]
    assert lazy == []
