"""The import map of the ``aggregator`` package has no circles (issue 29).

The graph is read from the source with :mod:`ast`, not by importing, so it sees every arrow a
reader sees: module-level imports, imports inside functions (a deferred import is still a
dependency, usually one deferred *because* it closes a circle) and imports under
``if TYPE_CHECKING:`` (a type a module needs from another is an arrow too). An import of
``a.b.c`` is an arrow to the module ``a.b.c`` only, not to the packages ``a`` and ``a.b``
whose ``__init__`` Python runs first: a submodule importing its sibling does not depend on
the package's public face, and counting it would make every package a circle with itself.

Two checks:

- no strongly connected component of more than one module, except the circles known when this
  test was written (:data:`KNOWN_CIRCLES`, to be broken and removed from the list);
- the parts (the packages under ``aggregator/``) are layered: each imports only the parts
  :data:`MAY_IMPORT` lists for it, so every arrow between parts runs one way (configuration
  reads no part, the store does not know how records are made, jobs use the store and not
  the reverse, nothing but the CLI reaches the demo and its servers). docs/architecture.md
  draws the same picture.

The allow-list of circles must stay true: an entry that no longer holds fails the test, so a
circle that was broken cannot come back unnoticed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "aggregator"

# Circles allowed (each a strongly connected component of the module graph). The five known
# when issue 29 was filed are broken; keep the list empty: never add an entry.
KNOWN_CIRCLES: list[frozenset[str]] = []

_BELOW_PLUGIN = {"core", "config", "net", "mapping", "harvest", "validate", "store"}
_BELOW_JOBS = _BELOW_PLUGIN | {"plugin"}
_BELOW_SERVE = _BELOW_JOBS | {"jobs", "schedule"}

#: part -> the parts it may import (its own modules aside). The order of the data flow:
#: core < config < net, mapping, store < harvest, validate < plugin < jobs < schedule < serve
#: < demo < cli
MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),  # records, errors, XML, events: the shared vocabulary
    "config": {"core"},  # read by the parts, reaches up into none of them
    "net": {"core", "config"},
    "mapping": {"core", "config"},
    "store": {"core", "config"},  # keeps records; does not know how they are made
    "harvest": {"core", "config", "net", "mapping"},  # mapping: its RDF readers only
    "validate": {"core", "config", "net", "mapping", "store"},  # store: quality scores
    "plugin": _BELOW_PLUGIN - {"store"},
    "jobs": _BELOW_JOBS,
    "schedule": _BELOW_JOBS | {"jobs"},
    "serve": _BELOW_SERVE,
    "demo": _BELOW_SERVE | {"serve"},
    "cli": _BELOW_SERVE | {"serve", "demo"},
}


def module_names(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    names: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _owning_module(dotted: str, modules: Mapping[str, Path]) -> str | None:
    """The module a dotted name lives in (``a.b.Name`` -> ``a.b``), if it is ours."""
    while dotted and dotted not in modules:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _imported_names(node: ast.AST, package: str) -> Iterator[str]:
    """Absolute dotted names an import statement brings in (``a.b`` or ``a.b.Name``)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            parts = package.split(".")
            base = parts[: len(parts) - (node.level - 1)]
            module = ".".join([*base, node.module] if node.module else base)
        else:
            module = node.module or ""
        for alias in node.names:
            yield f"{module}.{alias.name}"


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (anywhere in its source)."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for dotted in _imported_names(node, package):
                target = _owning_module(dotted, modules)
                if target and target != name:
                    targets.add(target)
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def part_of(module: str) -> str:
    """``aggregator.harvest.csw.client`` -> ``harvest``; the package itself -> ``""``."""
    return module.split(".")[1] if "." in module else ""


def arrows_against_layers(graph: Mapping[str, set[str]]) -> set[tuple[str, str]]:
    """Every (module, imported module) whose parts the layering does not allow."""
    return {
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if part_of(source) != part_of(target)
        and part_of(target) != ""  # the package's own __init__ (its version)
        and part_of(target) not in MAY_IMPORT.get(part_of(source), set())
    }


def _describe(component: frozenset[str], graph: Mapping[str, set[str]]) -> str:
    return "\n".join(
        f"  {m} -> {', '.join(sorted(graph[m] & component))}" for m in sorted(component)
    )


def test_the_graph_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "aggregator"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from aggregator.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from aggregator.c import X\n"
        "def f():\n    from . import d\n"
    )
    (pkg / "c.py").write_text("import aggregator.a\n")
    (pkg / "sub" / "d.py").write_text("from ..c import Y\n")
    graph = import_graph(pkg)
    assert graph["aggregator.a"] == {"aggregator.sub.b"}
    assert graph["aggregator.sub.b"] == {"aggregator.c", "aggregator.sub.d"}
    assert graph["aggregator.sub.d"] == {"aggregator.c"}
    assert circles(graph) == [
        frozenset({"aggregator.a", "aggregator.sub.b", "aggregator.c", "aggregator.sub.d"})
    ]
    (pkg / "c.py").write_text("")  # one arrow fewer: no circle left
    assert circles(import_graph(pkg)) == []


def test_no_new_import_circles() -> None:
    graph = import_graph()
    found = circles(graph)
    new = [c for c in found if c not in KNOWN_CIRCLES]
    assert not new, "new import circle(s):\n" + "\n\n".join(_describe(c, graph) for c in new)
    gone = [c for c in KNOWN_CIRCLES if c not in found]
    assert not gone, f"circle(s) broken or changed, remove from KNOWN_CIRCLES: {gone}"


def test_every_part_is_placed_in_the_layers() -> None:
    parts = {part_of(m) for m in import_graph()} - {""}
    assert parts == set(MAY_IMPORT), "a new top-level part: place it in MAY_IMPORT"


def test_arrows_run_one_way() -> None:
    found = sorted(arrows_against_layers(import_graph()))
    assert not found, f"import arrow(s) against the layers: {found}"


def test_the_layer_check_finds_an_arrow_up(tmp_path: Path) -> None:
    pkg = tmp_path / "aggregator"
    for part in ("config", "jobs"):
        (pkg / part).mkdir(parents=True)
        (pkg / part / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "jobs" / "run.py").write_text("from aggregator.config import settings\n")
    (pkg / "config" / "settings.py").write_text("")
    assert arrows_against_layers(import_graph(pkg)) == set()
    (pkg / "config" / "settings.py").write_text("import aggregator.jobs.run\n")
    assert arrows_against_layers(import_graph(pkg)) == {
        ("aggregator.config.settings", "aggregator.jobs.run")
    }
