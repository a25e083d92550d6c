"""The package's import graph: no cycles, and the layers DESIGN.md draws.

Every import counts, at module level or inside a function (a function-level
import that only breaks a cycle hides a wrong cut), except those under
``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

ROOTS = {"api": "privadapt", "common": "privadapt.common", "client": "privadapt.client",
         "server": "privadapt.server"}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in ROOTS.items():
        for path in (REPO_ROOT / folder).rglob("*.py"):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            parts = list(path.relative_to(REPO_ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return skipped


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


@cache
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for imported in _imports(path, name):
            # An ancestor package runs first anyway: importing it is no edge.
            if imported in modules and imported != name and not name.startswith(imported + "."):
                graph[name].add(imported)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in list(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_the_package_has_no_import_cycle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    module = tmp_path / "m.py"
    module.write_text("def f():\n    import privadapt.server.jobs\n"
                      "from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    import privadapt.client.site\n")
    assert _imports(module, "privadapt.common.m") == {"privadapt.server.jobs", "typing",
                                                      "typing.TYPE_CHECKING"}


@pytest.mark.parametrize(("layer", "forbidden"), [
    ("privadapt.common", ("privadapt.client", "privadapt.server", "privadapt.cli",
                          "privadapt.simulation", "privadapt.provisioning")),
    ("privadapt.client", ("privadapt.server", "privadapt.cli", "privadapt.simulation",
                          "privadapt.provisioning")),
    ("privadapt.server", ("privadapt.client", "privadapt.cli", "privadapt.simulation",
                          "privadapt.provisioning")),
])
def test_a_layer_imports_only_the_layers_below_it(layer, forbidden):
    crossing = sorted(f"{name} -> {imported}" for name, imports in _graph().items()
                      if name.startswith(layer + ".") for imported in imports
                      if any(imported == f or imported.startswith(f + ".") for f in forbidden))
    assert crossing == []
