"""DCAT-AP 3.0.1 class ranges: a step after the format mapping, for every format.

DCAT-AP 3.0.1 states the class of the value of most object properties (``dct:license`` a
``dct:LicenseDocument``, ``dcat:contactPoint`` a ``vcard:Kind``, ``dcat:theme`` a
``skos:Concept``...), and the official shapes (range.ttl) check that class with no background
knowledge: the record must carry it. The vocabularies declare these ranges, so stating the
class of such a value is sound. After every mapper (``aggregator map`` and a harvest alike,
:func:`aggregator.mapping.finish.finish_mapped`), this step reads the table of
``mappings/dcat-ap-3-ranges.toml`` (:mod:`aggregator.mapping.range_table`) and:

* adds ``rdf:type <class>`` to each IRI or blank-node value that lacks that class (rule
  ``range-class-added``, INFO), with the English label of a term of a bundled vocabulary table
  that has none (``range-label-added``, INFO);
* rewrites a literal where the range demands a resource, keeping its text: a term of a bundled
  vocabulary table (``range-literal-to-term``, INFO), an http(s)/ftp URL as that IRI
  (``range-literal-url``, INFO), else a blank node of the class carrying the text
  (``range-literal-to-node``, WARNING); a free-text theme becomes a ``dcat:keyword``
  (``range-theme-literal-to-keyword``, WARNING);
* moves a blank-node theme (a concept of an unnamed thesaurus; DCAT-AP 3.0.1 wants an IRI) to
  ``dct:subject`` and copies its labels to ``dcat:keyword`` (``range-theme-node-to-keyword``,
  WARNING).

Nothing is dropped. Cost: the record's lines are read once as text (subject, predicate and
object tokens); a range statement whose value already carries its class (and label) is settled
there, and only the others, with the labels of their values, are parsed (pyoxigraph): a record
whose mapper typed everything parses nothing. A record that needs no change is returned as it
is; a change without a blank node is merged into the record's sorted
lines; a change that touches a blank node re-canonicalises the graph (RDFC-1.0, as the mappers
do), so that equal graphs still give equal bytes and content hashes, here and in an aggregator
that harvests us.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from pyoxigraph import BlankNode, DefaultGraph, Literal, NamedNode, Quad, RdfFormat, Triple, parse

from aggregator.core.models import Finding, MappedDataset, Severity, Stage, content_hash
from aggregator.core.vocab import DCAT, DCT, RDF_TYPE, RDFS, SKOS
from aggregator.mapping.base import canonical_ntriples, merge_lines
from aggregator.mapping.range_table import Range, RangeTable, load_ranges

_TYPE = NamedNode(RDF_TYPE)
_KEYWORD = NamedNode(DCAT + "keyword")
_SUBJECT = NamedNode(DCT + "subject")
_LABELS = (SKOS + "prefLabel", RDFS + "label")  # a moved theme's labels become keywords
_URL = re.compile(r"^(?:https?|ftp)://[^\s<>\"{}|\\^`]+$")
_SHOWN = 4  # values named in a finding's message

Term = NamedNode | BlankNode


_TYPE_TOKEN = f"<{RDF_TYPE}>".encode()
_NO_CLASSES: frozenset[str] = frozenset()


def _key(term: object) -> bytes:
    """A term as the N-Triples token it is written as (how :class:`_Read` keys subjects)."""
    return str(term).encode()


class _Lines:
    """One pass over the lines of a record, by predicate (the token between the first two
    spaces): what the step reads from the text alone, and the lines it may have to parse."""

    __slots__ = ("has", "labelled", "labels", "lines", "links", "types")

    def __init__(self, data: bytes, table: RangeTable) -> None:
        kinds = table.line_kinds
        self.links: list[tuple[bytes, bytes, bytes, bytes]] = []  # line, subject, p, object
        self.labels: list[tuple[bytes, bytes]] = []  # line, subject: literal-valued labels
        self.types: dict[bytes, set[str]] = {}  # subject token -> class IRIs
        self.has: dict[bytes, set[str]] = {}  # subject token -> required properties it has
        self.labelled: dict[bytes, set[str]] = {}  # subject token -> label properties
        types, has, labelled, links = self.types, self.has, self.labelled, self.links
        # ``data.splitlines()`` (kept: a change is merged into these lines, not split again),
        # which splits canonical N-Triples where ``split(b"\n")`` does: a raw CR is escaped
        # there; a text that has one is read by LF alone, as before, and split again to merge
        self.lines: list[bytes] | None = None if b"\r" in data else data.splitlines()
        for line in data.split(b"\n") if self.lines is None else self.lines:
            parts = line.split(b" ", 2)  # subject, predicate, the rest (cheaper than a regex)
            if len(parts) != 3:
                continue
            subject, predicate, rest = parts
            kind = kinds.get(predicate)  # one lookup: most lines are of a predicate read here
            if kind is None:
                if predicate == _TYPE_TOKEN and rest[:1] == b"<":
                    types.setdefault(subject, set()).add(rest[1 : rest.rfind(b">")].decode())
                continue
            if kind.required is not None:
                has.setdefault(subject, set()).add(kind.required)
            if kind.link:
                links.append((line, subject, predicate, rest[: rest.rfind(b" ")]))
            elif kind.label is not None and rest[:1] == b'"':
                self.labels.append((line, subject))
                labelled.setdefault(subject, set()).add(kind.label)

    def settled(
        self, link: tuple[bytes, bytes, bytes, bytes], table: RangeTable, data: bytes
    ) -> bool:
        """Whether the statement needs nothing, whichever of its property's rows applies: its
        value is a literal no row rewrites, or a resource that already has each row's class
        (and the vocabulary label the row gives it). Read from the tokens; the statements
        that are not settled are parsed and go through the step (a cheap pre-check: in most
        records every value is typed by the mapper already)."""
        obj = link[3]
        rows = table.by_property_token[link[2]]
        if obj[:1] == b'"':
            return all(row.literal is None for row in rows)
        blank = obj[:2] == b"_:"
        types = self.types.get(obj, _NO_CLASSES)
        for row in rows:
            if blank and row.iri:
                return False
            if row.cls in types:  # typed: described by the record (a subject of it)
                if row.described and not row.requires <= self.has.get(obj, _NO_CLASSES):
                    return False
            elif row.described and not blank and not _describes_token(data, obj):
                continue  # another record's resource: left alone
            else:
                return False
            label_property = row.label_property
            if (
                label_property is not None
                and not blank
                and label_property not in self.labelled.get(obj, _NO_CLASSES)
                and obj[1:-1].decode() in row.labels
            ):
                return False
        return True


def _line(triple: Triple) -> bytes:
    """The N-Triples line of ``triple`` (pyoxigraph writes a term as N-Triples does)."""
    return f"{triple} .".encode()


def _describes_token(data: bytes, token: bytes) -> bool:
    """Whether the IRI written ``token`` (``<...>``) is the subject of a statement of the record."""
    head = token + b" "
    return data.startswith(head) or b"\n" + head in data


def _describes(data: bytes, node: Term) -> bool:
    """Whether ``node`` is the subject of a statement of the record."""
    if isinstance(node, BlankNode):
        return True  # a blank node belongs to this record
    return _describes_token(data, b"<" + node.value.encode() + b">")


class _Read:
    """What the record's range, type and label statements say. Only the range statements
    that are not :meth:`_Lines.settled` are parsed (pyoxigraph), with the labels of their
    values: parsing only these is cheaper than parsing every line (docs/mappings/ranges.md,
    Cost), and a record whose values are all typed parses nothing."""

    def __init__(self, data: bytes, table: RangeTable) -> None:
        text = _Lines(data, table)
        self.types, self.has, self.lines = text.types, text.has, text.lines
        self.labels: dict[object, dict[str, list[Literal]]] = {}
        self.links: list[tuple[Triple, tuple[Range, ...]]] = []
        open_links = [link for link in text.links if not text.settled(link, table, data)]
        if not open_links:
            return
        values = {link[3] for link in open_links}
        lines = [link[0] for link in open_links]
        lines.extend(line for line, subject in text.labels if subject in values)
        labels = table.label_properties
        rows = table.by_property
        for q in parse(b"\n".join(lines), RdfFormat.N_TRIPLES):
            predicate = q.predicate.value
            found = rows.get(predicate)
            if found is not None:
                self.links.append((q.triple, found))
            elif predicate in labels and isinstance(q.object, Literal):
                by_property = self.labels.setdefault(q.subject, {})
                by_property.setdefault(predicate, []).append(q.object)


class _Rewrite:
    """The triples a record gains and loses, and the notes the findings are made of."""

    def __init__(self, table: RangeTable) -> None:
        self.table = table
        self.added: dict[Triple, None] = {}  # ordered set
        self.removed: set[Triple] = set()
        self.notes: dict[str, list[str]] = {}
        self.typed: list[tuple[str, str]] = []  # (class, property) of each type added

    def note(self, rule: str, text: str) -> None:
        self.notes.setdefault(rule, []).append(text)

    def add(self, *triples: Triple) -> None:
        for t in triples:
            self.added.setdefault(t)


def _applicable(rows: tuple[Range, ...], subject_types: set[str]) -> Range | None:
    if not rows[0].subjects:  # the common case: one row, for every subject
        return rows[0]
    for row in rows:
        if not row.subjects or row.subjects & subject_types:
            return row
    return None


def complete_ranges(
    dataset: MappedDataset, table: RangeTable | None = None, *, rehash: bool = False
) -> MappedDataset:
    """``dataset`` with its range values typed and its misplaced literals rewritten, in its
    graph and in the catalogue facts kept beside it (the catalogue record, which is stored and
    republished too); ``dataset`` itself when nothing needed doing. ``rehash``: the dataset's
    ``content_hash`` is not that of its N-Triples yet (an earlier step left it to this one:
    :func:`aggregator.mapping.finish.finish_mapped`), so it is set even when nothing else is."""
    table = load_ranges() if table is None else table
    ntriples, notes = _complete(dataset.ntriples, table)
    catalog: bytes | None = None
    if dataset.catalog_ntriples:
        catalog, catalog_notes = _complete(dataset.catalog_ntriples, table)
        for rule, texts in catalog_notes.items():
            notes.setdefault(rule, []).extend(texts)
    if ntriples is None and catalog is None:
        if rehash:
            return replace(dataset, content_hash=content_hash(dataset.ntriples))
        return dataset
    findings = tuple(_finding(rule, texts, dataset.dataset_iri) for rule, texts in notes.items())
    if ntriples is None:
        ntriples = dataset.ntriples
    return replace(
        dataset,
        ntriples=ntriples,
        content_hash=content_hash(ntriples),
        catalog_ntriples=dataset.catalog_ntriples if catalog is None else catalog,
        findings=(*dataset.findings, *findings),
    )


def _complete(data: bytes, table: RangeTable) -> tuple[bytes | None, dict[str, list[str]]]:
    """The graph ``data`` completed (None: nothing to do) and the notes of what was done."""
    read = _Read(data, table)
    if not read.links:
        return None, {}
    change = _Rewrite(table)
    no_types: set[str] = set()
    # rows that hold for some subjects only come last, once the other rows have typed those
    # subjects (an agent typed foaf:Agent through dct:publisher has its dct:type typed too)
    read.links.sort(key=lambda link_rows: bool(link_rows[1][0].subjects))
    for link, rows in read.links:
        row = _applicable(rows, read.types.get(_key(link.subject), no_types))
        if row is not None:
            _value(link, row, read, change, data)
    if not change.added and not change.removed:
        return None, {}
    if change.typed:  # noted once per (class, property): a record types dozens of values
        curie = table.curie
        for (cls, prop), count in Counter(change.typed).items():
            text = f"{curie(cls)} ({curie(prop)})"
            change.notes.setdefault("range-class-added", []).extend([text] * count)
    return _rewritten(data, change, read.lines), change.notes


def _value(link: Triple, row: Range, read: _Read, change: _Rewrite, data: bytes) -> None:
    obj = link.object
    if isinstance(obj, Literal):
        _literal(link, obj, row, change, change.table.curie(link.predicate.value))
    elif isinstance(obj, BlankNode) and row.iri:
        _theme_node(link, obj, read, change, change.table.curie(link.predicate.value))
    elif isinstance(obj, NamedNode | BlankNode):
        if row.described:
            if not _describes(data, obj):
                return  # another record's resource
            if not row.requires <= read.has.get(_key(obj), set()):
                _unfit(link, obj, row, change)
                return
        _typed(obj, row, read, change, link.predicate.value)


def _unfit(link: Triple, node: Term, row: Range, change: _Rewrite) -> None:
    """A described value without the mandatory properties of its range class: typing it would
    only trade the range violation for others. Moved to ``row.fallback`` when there is one."""
    if row.fallback is None:
        return
    change.removed.add(link)
    change.add(Triple(link.subject, NamedNode(row.fallback), node))
    table = change.table
    missing = ", ".join(sorted(table.curie(p) for p in row.requires))
    change.note(
        "range-link-to-relation",
        f"{table.curie(link.predicate.value)} {node} (no {missing}) -> {table.curie(row.fallback)}",
    )


def _typed(node: Term, row: Range, read: _Read, change: _Rewrite, prop: str) -> None:
    key = _key(node)
    types = read.types.get(key)
    if types is None:
        types = read.types[key] = set()
    if row.cls not in types:
        types.add(row.cls)
        change.added.setdefault(Triple(node, _TYPE, row.cls_node))
        change.typed.append((row.cls, prop))
    label_property = row.label_property
    if label_property is None or not isinstance(node, NamedNode):
        return
    text = row.labels.get(node.value)
    if text is not None and label_property not in read.labels.get(node, {}):
        change.add(Triple(node, NamedNode(label_property), Literal(text, language="en")))
        read.labels.setdefault(node, {})[label_property] = [Literal(text, language="en")]
        change.note("range-label-added", f"{text!r} (<{node.value}>)")


def _literal(link: Triple, value: Literal, row: Range, change: _Rewrite, prop: str) -> None:
    if row.literal is None:
        return
    change.removed.add(link)
    subject, predicate = link.subject, link.predicate
    if row.literal == "keyword":
        keyword = Literal(value.value, language=value.language) if value.language else value
        if keyword.datatype.value != "http://www.w3.org/2001/XMLSchema#string" and not (
            value.language
        ):
            keyword = Literal(value.value)
        change.add(Triple(subject, _KEYWORD, keyword))
        change.note("range-theme-literal-to-keyword", repr(value.value))
        return
    term = row.lookup.lookup(value.value) if row.lookup is not None else None
    if term is not None:
        change.add(Triple(subject, predicate, term), Triple(term, _TYPE, NamedNode(row.cls)))
        text = row.labels.get(term.value)
        if text is not None and row.label_property is not None:
            change.add(Triple(term, NamedNode(row.label_property), Literal(text, language="en")))
        change.note("range-literal-to-term", f"{prop} {value.value!r} -> <{term.value}>")
        return
    if _URL.match(value.value.strip()):
        iri = NamedNode(value.value.strip())
        change.add(Triple(subject, predicate, iri), Triple(iri, _TYPE, NamedNode(row.cls)))
        change.note("range-literal-url", f"{prop} <{iri.value}>")
        return
    node = _new_node(link)
    change.add(
        Triple(subject, predicate, node),
        Triple(node, _TYPE, NamedNode(row.cls)),
        Triple(node, NamedNode(row.label), value),
    )
    change.note(
        "range-literal-to-node",
        f"{prop} {value.value!r} -> a {change.table.curie(row.cls)} "
        f"with {change.table.curie(row.label)}",
    )


def _new_node(link: Triple) -> BlankNode:
    """A blank node named by the statement it replaces (the same text, the same name)."""
    said = hashlib.sha256(_line(link)).hexdigest()[:32]
    return BlankNode("r" + said)


def _theme_node(link: Triple, node: BlankNode, read: _Read, change: _Rewrite, prop: str) -> None:
    """A concept without an IRI cannot be a DCAT-AP 3.0.1 theme: it is kept as the dataset's
    subject, and its labels become keywords (which search and the MQA read)."""
    change.removed.add(link)
    change.add(Triple(link.subject, _SUBJECT, node))
    texts = []
    for predicate in _LABELS:
        for label in read.labels.get(node, {}).get(predicate, []):
            change.add(Triple(link.subject, _KEYWORD, label))
            texts.append(repr(label.value))
        if texts:
            break  # the preferred labels when there are some, else the plain labels
    change.note(
        "range-theme-node-to-keyword",
        f"{prop} [{', '.join(texts) or 'no label'}] -> dct:subject"
        + (", dcat:keyword" if texts else ""),
    )


_RULES: dict[str, tuple[Severity, str]] = {
    "range-class-added": (
        Severity.INFO,
        "rdf:type stated for values whose class the DCAT-AP 3.0.1 range demands",
    ),
    "range-label-added": (Severity.INFO, "preferred label of a vocabulary term added"),
    "range-literal-to-term": (
        Severity.INFO,
        "text where DCAT-AP 3.0.1 wants a resource, replaced by the vocabulary term it names",
    ),
    "range-literal-url": (
        Severity.INFO,
        "URL written as text where DCAT-AP 3.0.1 wants a resource, made that resource",
    ),
    "range-literal-to-node": (
        Severity.WARNING,
        "text where DCAT-AP 3.0.1 wants a resource, kept on a node of the range class",
    ),
    "range-theme-literal-to-keyword": (
        Severity.WARNING,
        "free-text theme (DCAT-AP 3.0.1 wants a concept IRI) kept as dcat:keyword",
    ),
    "range-link-to-relation": (
        Severity.WARNING,
        "link to a resource not described as its DCAT-AP 3.0.1 range class requires, kept as "
        "dct:relation",
    ),
    "range-theme-node-to-keyword": (
        Severity.WARNING,
        "theme without an IRI (DCAT-AP 3.0.1 wants one) kept as dct:subject, labels as keywords",
    ),
}


def _finding(rule: str, notes: list[str], where: str) -> Finding:
    severity, what = _RULES[rule]
    counted: dict[str, int] = {}
    for note in notes:
        counted[note] = counted.get(note, 0) + 1
    shown = [f"{n} x{c}" if c > 1 else n for n, c in list(counted.items())[:_SHOWN]]
    more = len(counted) - _SHOWN
    tail = f"; and {more} more" if more > 0 else ""
    return Finding(Stage.MAP, severity, rule, f"{what}: {'; '.join(shown)}{tail}", location=where)


def _own_labels(data: bytes) -> bool:
    """Whether the mapper labelled its blank nodes its own way rather than with RDFC-1.0
    (``_:c14n0``...): the ISO mapper names a node by a hash of what it says (``_:b`` and 32
    hex digits), much cheaper. Its form is kept: the labels stay, a new node is named by the
    statement it replaces, and equal mapper output still gives equal bytes."""
    at = data.find(b"_:")
    return at != -1 and not data.startswith(b"c14n", at + 2)


def _rewritten(data: bytes, change: _Rewrite, lines: list[bytes] | None = None) -> bytes:
    """The graph less the removed, plus the added statements, in the canonical form every
    mapper hands over (:func:`aggregator.mapping.base.canonical_ntriples`): equal graphs give
    equal bytes, here and in another aggregator that harvests us. Without a blank node in what
    changed, the sorted lines are merged as they are (the labels cannot change; ``lines``:
    ``data.splitlines()``, when the caller has it); otherwise the graph is canonicalised again
    (RDFC-1.0), since a blank node's label depends on what it says
    (unless the mapper labels its blank nodes its own way, :func:`_own_labels`).
    """
    touched = (*change.added, *change.removed)
    blank = any(
        isinstance(t.subject, BlankNode) or isinstance(t.object, BlankNode) for t in touched
    )
    if not blank or _own_labels(data):
        return merge_lines(
            data, {_line(t) for t in change.removed}, [_line(t) for t in change.added], lines
        )
    removed = change.removed
    quads: Iterable[Quad] = parse(
        data, RdfFormat.N_TRIPLES
    )  # kept as quads: no Triple objects made
    if removed:
        quads = (q for q in quads if q.triple not in removed)
    default = DefaultGraph()
    added = (Quad(t.subject, t.predicate, t.object, default) for t in change.added)
    return canonical_ntriples([*quads, *added])
