"""SHACL engines behind :class:`aggregator.validate.shacl.ShaclValidator`.

An engine compiles a shapes graph once (:meth:`ShaclEngine.compile`) into an object that
validates one record's graph at a time and returns engine-neutral :class:`RawResult` values.
Terms are normalised so that every engine reports the same thing for the same result:

* focus nodes as plain IRIs (no angle brackets), literals in N-Triples syntax, blank nodes
  as ``BLANK_NODE``, because engines relabel blank nodes while parsing and their labels mean
  nothing outside one run;
* a result path as the plain predicate IRI for a simple path, otherwise SPARQL property-path
  syntax;
* the source shape as the nearest shape with an IRI (a constraint inside an anonymous
  ``sh:property [ ... ]`` reports the named shape that holds it).

Engines (``ENGINES``, keyed by name):

``shacl``
    The Rust engine of the ``shacl`` package on PyPI. Fast (the default); compiled shapes are
    immutable and thread-safe, but cannot be pickled.
``pyshacl``
    pySHACL on rdflib: the reference implementation, far slower (docs/benchmarks.md#validation),
    kept to cross-check.

Adding an engine is one class with a ``name`` and a ``compile`` method, and one entry in
``ENGINES``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

BLANK_NODE = "[blank node]"

SH = "http://www.w3.org/ns/shacl#"


@dataclass(frozen=True, slots=True)
class RawResult:
    """One SHACL validation result, engine-neutral (see the module docstring)."""

    focus: str
    path: str | None
    source_shape: str | None
    component: str  # full IRI of the constraint component
    severity: str  # full IRI: sh:Violation, sh:Warning, sh:Info or a custom one
    message: str | None
    value: str | None  # the offending value: a literal's lexical form or an IRI


class CompiledShapes(Protocol):
    def validate(self, ntriples: str) -> list[RawResult]:
        """Validate one graph given as N-Triples; raise ValueError/SyntaxError if unparseable."""
        ...


class ShaclEngine(Protocol):
    name: ClassVar[str]

    def compile(self, shapes_ntriples: str) -> CompiledShapes:
        """Compile a shapes graph given as N-Triples; raise ValueError if it is unusable."""
        ...


def _strip_iri(term: str) -> str:
    if term.startswith("<") and term.endswith(">"):
        return term[1:-1]
    return term


# ---------------------------------------------------------------------------------------------
# shacl (Rust)
# ---------------------------------------------------------------------------------------------


class _RustCompiled:
    __slots__ = ("_shapes",)

    def __init__(self, shapes: Any) -> None:
        self._shapes = shapes

    def validate(self, ntriples: str) -> list[RawResult]:
        report = self._shapes.validate_text(ntriples, format="ntriples")
        out: list[RawResult] = []
        for r in report.results:
            focus: str = r.focus_node
            path: str | None = r.path
            shape: str | None = r.source_shape
            if shape is None or shape.startswith("_:"):
                shape = r.root_shape
            value: str | None = r.value
            out.append(
                RawResult(
                    focus=BLANK_NODE if focus.startswith("_:") else _strip_iri(focus),
                    path=None if path is None else _strip_iri(path),
                    source_shape=None
                    if shape is None or shape.startswith("_:")
                    else _strip_iri(shape),
                    component=r.component_iri,
                    severity=r.severity_iri,
                    message=r.message,
                    value=None
                    if value is None
                    else (BLANK_NODE if value.startswith("_:") else r.value_plain),
                )
            )
        return out


class RustShaclEngine:
    """The ``shacl`` package (Rust): compile once, validate each record's N-Triples text."""

    name: ClassVar[str] = "shacl"

    def compile(self, shapes_ntriples: str) -> CompiledShapes:
        import shacl

        shapes = shacl.Shapes.from_text(shapes_ntriples, format="ntriples")
        if len(shapes) == 0:
            raise ValueError("the shapes graph declares no shapes")
        return _RustCompiled(shapes)


# ---------------------------------------------------------------------------------------------
# pyshacl (reference)
# ---------------------------------------------------------------------------------------------


def _render_path(graph: Any, node: Any) -> str:
    """A SHACL path node in SPARQL property-path syntax (plain IRI for a predicate)."""
    from rdflib import BNode, URIRef
    from rdflib.collection import Collection
    from rdflib.namespace import RDF
    from rdflib.namespace import SH as RSH

    if isinstance(node, URIRef):
        return str(node)

    def inner(n: Any) -> str:
        return f"<{n}>" if isinstance(n, URIRef) else f"({_render_path(graph, n)})"

    if isinstance(node, BNode):
        for pred, op in (
            (RSH.inversePath, "^{}"),
            (RSH.zeroOrMorePath, "{}*"),
            (RSH.oneOrMorePath, "{}+"),
            (RSH.zeroOrOnePath, "{}?"),
        ):
            target = graph.value(node, pred)
            if target is not None:
                return op.format(inner(target))
        alt = graph.value(node, RSH.alternativePath)
        if alt is not None:
            return "|".join(inner(n) for n in Collection(graph, alt))
        if graph.value(node, RDF.first) is not None:
            return "/".join(inner(n) for n in Collection(graph, node))
    return str(node)


class _PyShaclCompiled:
    def __init__(self, shapes_graph: Any, named_parent: dict[Any, Any]) -> None:
        self._shapes_graph = shapes_graph
        self._named_parent = named_parent

    def validate(self, ntriples: str) -> list[RawResult]:
        import pyshacl
        from rdflib import BNode, Graph, Literal
        from rdflib.namespace import RDF
        from rdflib.namespace import SH as RSH

        data = Graph()
        data.parse(data=ntriples, format="nt")
        _conforms, results_graph, _text = pyshacl.validate(
            data,
            shacl_graph=self._shapes_graph,
            inference="none",
            advanced=False,
            abort_on_first=False,
        )
        g = results_graph
        out: list[RawResult] = []
        # only the report's own results: pySHACL also types nested sh:detail results
        top = [
            r
            for report in g.subjects(RDF.type, RSH.ValidationReport)
            for r in g.objects(report, RSH.result)
        ]
        for result in top:
            focus = g.value(result, RSH.focusNode)
            path = g.value(result, RSH.resultPath)
            shape = g.value(result, RSH.sourceShape)
            if isinstance(shape, BNode):
                shape = self._named_parent.get(shape)
            value = g.value(result, RSH.value)
            message = g.value(result, RSH.resultMessage)
            out.append(
                RawResult(
                    focus=BLANK_NODE
                    if isinstance(focus, BNode)
                    else (focus.n3() if isinstance(focus, Literal) else str(focus)),
                    path=None if path is None else _render_path(g, path),
                    source_shape=None if shape is None else str(shape),
                    component=str(g.value(result, RSH.sourceConstraintComponent)),
                    severity=str(g.value(result, RSH.resultSeverity)),
                    message=None if message is None else str(message),
                    value=None
                    if value is None
                    else (BLANK_NODE if isinstance(value, BNode) else str(value)),
                )
            )
        return out


class PyShaclEngine:
    """pySHACL: the reference engine. The shapes graph is parsed once and reused."""

    name: ClassVar[str] = "pyshacl"

    def compile(self, shapes_ntriples: str) -> CompiledShapes:
        from rdflib import BNode, Graph, URIRef
        from rdflib.namespace import RDF
        from rdflib.namespace import SH as RSH

        graph = Graph()
        graph.parse(data=shapes_ntriples, format="nt")
        shape_nodes = set(graph.subjects(RDF.type, RSH.NodeShape)) | set(
            graph.subjects(RDF.type, RSH.PropertyShape)
        )
        if not shape_nodes and next(iter(graph.subjects(RSH.path, None)), None) is None:
            raise ValueError("the shapes graph declares no shapes")
        parents: dict[Any, Any] = {}
        for parent_pred in (RSH.property, RSH.node):
            for parent, child in graph.subject_objects(parent_pred):
                if isinstance(child, BNode):
                    parents.setdefault(child, parent)

        def named(node: Any) -> Any:
            seen: set[Any] = set()
            while isinstance(node, BNode) and node in parents and node not in seen:
                seen.add(node)
                node = parents[node]
            return node if isinstance(node, URIRef) else None

        named_parent = {n: named(n) for n in parents}
        return _PyShaclCompiled(graph, named_parent)


ENGINES: dict[str, Callable[[], ShaclEngine]] = {
    RustShaclEngine.name: RustShaclEngine,
    PyShaclEngine.name: PyShaclEngine,
}

DEFAULT_ENGINE = RustShaclEngine.name
