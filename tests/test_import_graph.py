"""The package's import graph: no cycles, and the layers DESIGN.md draws.

Every import counts, at module level or inside a function (a function-level
import that only breaks a cycle hides a wrong cut), except those under
``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
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


# What a site daemon must never load: the coordinator and the researcher's
# composition root (layers), dp-accounting with scipy's optimisers, statistics
# and signal processing (a Gaussian round needs none; only a site accounting
# another kind by PLD does, through dp-accounting), the experiment stack, and
# what only reports and Parquet files need. Each costs start-up time and
# resident memory in every site process.
_NEVER_IN_A_SITE = ("privadapt.server", "privadapt.cli", "privadapt.simulation",
                    "privadapt.provisioning", "dp_accounting", "scipy.optimize", "scipy.stats",
                    "scipy.signal", "sklearn", "matplotlib", "mlxtend", "experiments", "ray",
                    "pyarrow", "jinja2")

_SITE_PROCESS = """
import json, sys, tempfile
from pathlib import Path

import privadapt.client.daemon.main  # what the privadapt-site command imports
imported = sorted(sys.modules)

import numpy as np
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query
from privadapt.common.mechanisms import GaussianMechanism

rng = np.random.default_rng(0)
data = Dataset(rng.normal(size=(40, 4)) / 4, np.where(rng.random(40) < 0.5, -1.0, 1.0),
               ("a", "b", "c", "d"))
policy = SitePolicy("st-mary", 10.0, 1e-5)
with tempfile.TemporaryDirectory() as directory:
    ledger = PrivacyLedger(Path(directory) / "ledger.db", policy, create=True)
    site = Site(data, policy, ledger)  # noise from the operating system's CSPRNG
    params = {"weights": np.zeros(4), "loss": "logistic", "clip_norm": 1.0}
    for round in range(2):  # a second round reads a ledger that holds a charge
        site.answer(Query("job", f"q{round}", "linear_gradient", params,
                          GaussianMechanism.single(2.0, 40.0)), 3)
    ledger.close()
print(json.dumps({"imported": imported, "after two rounds": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def site_process_modules() -> dict[str, list[str]]:
    result = subprocess.run([sys.executable, "-c", _SITE_PROCESS], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("stage", ["imported", "after two rounds"])
def test_a_site_daemon_loads_no_coordinator_optimiser_or_experiment_code(
        site_process_modules, stage):
    loaded = site_process_modules[stage]
    assert "privadapt.client.site" in loaded  # the process is a site's
    assert [m for m in loaded if any(m == never or m.startswith(never + ".")
                                     for never in _NEVER_IN_A_SITE)] == []
