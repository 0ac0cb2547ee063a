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
- a few arrows between parts that must run one way only (:data:`FORBIDDEN_ARROWS`), again with
  today's exceptions listed (:data:`KNOWN_ARROWS`).

Both allow-lists must stay true: an entry that no longer holds fails the test, so a circle that
was broken cannot come back unnoticed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "aggregator"

# Circles allowed (each a strongly connected component of the module graph). The five known
# when issue 29 was filed are broken; keep the list empty: never add an entry.
KNOWN_CIRCLES: list[frozenset[str]] = []

# (importing part, imported part): arrows that must not exist. A part is a module or package
# prefix; "aggregator.config" is the configuration (the aggregator/config/ package).
FORBIDDEN_ARROWS: list[tuple[str, str]] = [
    # configuration is read by the parts and reaches up into none of them
    ("aggregator.config", "aggregator.notify"),
    ("aggregator.config", "aggregator.plugin"),
    ("aggregator.config", "aggregator.validate"),
    ("aggregator.config", "aggregator.harvest"),
    ("aggregator.config", "aggregator.mapping"),
    # the store keeps records; it does not know how they are made
    ("aggregator.store", "aggregator.mapping"),
    # jobs and store do not import each other both ways: the journal reads the store
    ("aggregator.store", "aggregator.jobs"),
]

# Forbidden arrows that exist today, as (module, imported module). Remove when broken.
KNOWN_ARROWS: set[tuple[str, str]] = {
    # the [notify] section's reader and the profiles' steps: no circle (neither imports the
    # configuration), but the configuration still reaches them instead of their registering
    ("aggregator.config.loading", "aggregator.notify.settings"),
    ("aggregator.config.settings", "aggregator.notify.settings"),
    ("aggregator.config.loading", "aggregator.validate.profiles"),
    ("aggregator.config.validation_chain", "aggregator.validate.profiles"),
    # the store opens the job table (jobs/journal), which reads the store's state database
    ("aggregator.store.records", "aggregator.jobs.journal"),
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


def _within(module: str, part: str) -> bool:
    return module == part or module.startswith(part + ".") or module.startswith(part + "_")


def forbidden_arrows(graph: Mapping[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (source, target)
        for source, targets in graph.items()
        for target in targets
        for importer, imported in FORBIDDEN_ARROWS
        if _within(source, importer) and _within(target, imported)
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


def test_arrows_run_one_way() -> None:
    found = forbidden_arrows(import_graph())
    new = sorted(found - KNOWN_ARROWS)
    assert not new, f"forbidden import arrow(s): {new}"
    gone = sorted(KNOWN_ARROWS - found)
    assert not gone, f"arrow(s) no longer exist, remove from KNOWN_ARROWS: {gone}"
