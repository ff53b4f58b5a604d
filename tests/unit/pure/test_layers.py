"""The layers as drawn in docs/how-it-works.md, read from the code's own imports
(every import, also those inside functions and under TYPE_CHECKING):

| folder (package) | may import from weir |
|---|---|
| `runtime/` (`weir.runtime`) | itself only, and never Ray, pyspark or raydp |
| `actors/` (`weir.actors`) | `weir.runtime` |
| `connectors/` (`weir.connectors`) | `weir.runtime`, and `weir.actors.cluster` to find or start Ray as weir does |
| `weir/` (the root and PyFlink's module paths) | `weir.runtime`, `weir.connectors` |

and no two modules import each other, directly or round a circle."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGES = {"runtime": "weir.runtime", "actors": "weir.actors", "connectors": "weir.connectors", "weir": "weir"}


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _imports(path: pathlib.Path) -> set[str]:
    """Every module ``path`` names in an import: ``from a import b`` names ``a.b``
    when that is a module, else ``a``."""
    named = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            submodules = [
                f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in MODULES
            ]
            named.update(submodules or [node.module])
    return named


GRAPH = {module: _imports(path) for module, path in MODULES.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other round a circle (Tarjan's
    strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph.get(module, set()) & graph.keys():
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                other = stack.pop()
                group.append(other)
                if other == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_circle_finder_finds_a_circle_and_only_that():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]


def test_no_two_modules_import_each_other_round_a_circle():
    assert len(GRAPH) > 60  # the tree was read
    assert circles({m: {i for i in imports if i in MODULES} - {m} for m, imports in GRAPH.items()}) == []


def _named_under(module: str, prefixes: tuple[str, ...]) -> set[str]:
    return {i for i in GRAPH[module] if any(i == p or i.startswith(p + ".") for p in prefixes)}


@pytest.mark.parametrize(
    "package, forbidden, allowed",
    [
        ("weir.runtime", ("weir.actors", "weir.connectors", "ray", "pyspark", "raydp"), ()),
        ("weir.actors", ("weir.connectors",), ()),
        ("weir.connectors", ("weir.actors",), ("weir.actors.cluster",)),
    ],
)
def test_each_layer_imports_only_what_it_may(package, forbidden, allowed):
    broken = {
        module: sorted(_named_under(module, forbidden) - set(allowed))
        for module in GRAPH
        if module.startswith(package + ".") or module == package
    }
    assert {m: names for m, names in broken.items() if names} == {}


def test_the_root_and_pyflinks_module_paths_only_hand_on_the_runtime_and_connectors():
    roots = [m for m in GRAPH if m == "weir" or m.startswith(("weir.datastream", "weir.common"))]
    assert roots
    for module in roots:
        weir_names = {i for i in GRAPH[module] if i.startswith("weir.")}
        assert all(
            i.startswith(("weir.runtime", "weir.connectors", "weir.datastream", "weir.common")) for i in weir_names
        ), (module, weir_names)
