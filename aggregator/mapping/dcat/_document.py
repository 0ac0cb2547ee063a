"""A parsed DCAT document indexed for splitting it into dataset descriptions
(:mod:`aggregator.mapping.dcat`, step 2): triples by subject, the datasets, catalogues and
catalogue records it types, which catalogue lists which dataset, and the closure walk that
makes one description."""

from __future__ import annotations

from collections.abc import Sequence

from pyoxigraph import BlankNode, NamedNode, Quad

from aggregator.core.errors import MappingError
from aggregator.core.vocab import DCAT, DCT

RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
FOAF_PRIMARY_TOPIC = NamedNode("http://xmlns.com/foaf/0.1/primaryTopic")
DCT_TITLE = NamedNode(DCT + "title")
DATASET_CLASSES = frozenset(
    NamedNode(DCAT + name) for name in ("Dataset", "DataService", "DatasetSeries")
)
CATALOG_CLASS = NamedNode(DCAT + "Catalog")
RECORD_CLASS = NamedNode(DCAT + "CatalogRecord")
CATALOG_LINKS = frozenset(NamedNode(DCAT + p) for p in ("dataset", "service"))
DCAT_RECORD = NamedNode(DCAT + "record")

MAX_CLOSURE = 50_000  # triples in one dataset description; more is a MappingError
# A subject with more triples than this has its triples deduplicated when the document is
# indexed: a triple repeated N times would be walked N times by every description that
# includes its subject (quadratic on a catalogue that repeats a shared agent N times).
DEDUPLICATE_ABOVE = 64

Node = NamedNode | BlankNode


def show(node: object) -> str:
    """A dataset node as findings and errors name it."""
    return f"<{node.value}>" if isinstance(node, NamedNode) else "a blank-node dataset"


class Document:
    """The parsed document indexed by subject, with its datasets, catalogues and records."""

    def __init__(self, quads: Sequence[Quad]) -> None:
        self.by_subject: dict[object, list[Quad]] = {}
        self.visited: set[object] = set()  # subjects some closure has entered
        self.titled: set[object] = set()  # subjects with a dct:title
        self.datasets: list[Node] = []
        self.catalogs: list[Node] = []
        self.records: list[Node] = []
        by_subject = self.by_subject
        for quad in quads:  # one pass: index by subject, note typed nodes
            subject = quad.subject
            entry = by_subject.get(subject)
            if entry is None:
                by_subject[subject] = [quad]
            else:
                entry.append(quad)
            predicate = quad.predicate
            if predicate == DCT_TITLE:
                self.titled.add(subject)
            elif predicate == RDF_TYPE and isinstance(subject, NamedNode | BlankNode):
                obj = quad.object
                if obj in DATASET_CLASSES:
                    self.datasets.append(subject)
                elif obj == CATALOG_CLASS:
                    self.catalogs.append(subject)
                elif obj == RECORD_CLASS:
                    self.records.append(subject)
        for node, entry in by_subject.items():
            if len(entry) > DEDUPLICATE_ABOVE:
                by_subject[node] = list(dict.fromkeys(entry))
        # one entry per node, in document order (a node may have several dataset classes)
        self.datasets = list(dict.fromkeys(self.datasets))
        self.catalogs = list(dict.fromkeys(self.catalogs))
        self.records = list(dict.fromkeys(self.records))
        self.boundary = (
            frozenset(self.datasets) | frozenset(self.catalogs) | frozenset(self.records)
        )
        # dataset -> the records about it / the catalogues listing it (directly or by record)
        self.records_of: dict[object, list[Node]] = {}
        # dataset -> the catalogue triples listing it (dcat:dataset/service, dcat:record)
        self.links_to: dict[object, list[Quad]] = {}
        for record in self.records:
            for quad in by_subject.get(record, ()):
                if quad.predicate == FOAF_PRIMARY_TOPIC:
                    self.records_of.setdefault(quad.object, []).append(record)
        topic_of: dict[object, object] = {r: t for t, rs in self.records_of.items() for r in rs}
        self.catalogs_of: dict[object, list[Node]] = {}
        for catalog in self.catalogs:
            for quad in by_subject.get(catalog, ()):
                predicate = quad.predicate
                if predicate in CATALOG_LINKS:
                    member: object = quad.object
                elif predicate == DCAT_RECORD and quad.object in topic_of:
                    member = topic_of[quad.object]
                else:
                    continue
                self.links_to.setdefault(member, []).append(quad)
                listed = self.catalogs_of.setdefault(member, [])
                if catalog not in listed:
                    listed.append(catalog)

    def get(self, node: object) -> Sequence[Quad]:
        """The triples describing ``node`` in a description (none for datasets, catalogues and
        records, which a description links to but never includes): the range checks' index."""
        if node in self.boundary:
            return ()
        return self.by_subject.get(node, ())

    def closure(self, root: Node, skip: frozenset[NamedNode] = frozenset()) -> list[Quad]:
        """Triples of ``root`` and of every described resource reachable from it.

        Objects that are datasets, catalogues or catalogue records are not entered (their link
        triple is kept); ``rdf:type`` objects are not entered; triples of ``root`` itself whose
        predicate is in ``skip`` are left out.
        """
        by_subject = self.by_subject
        boundary = self.boundary
        self.visited.add(root)
        seen: set[object] = {root}
        stack: list[object] = [root]
        out: list[Quad] = []
        while stack:
            subject = stack.pop()
            for quad in by_subject.get(subject, ()):
                if skip and subject is root and quad.predicate in skip:
                    continue
                out.append(quad)
                obj = quad.object
                if obj in by_subject and obj not in seen and obj not in boundary:
                    if quad.predicate == RDF_TYPE:
                        continue
                    seen.add(obj)
                    self.visited.add(obj)
                    stack.append(obj)
            if len(out) > MAX_CLOSURE:
                raise MappingError(
                    f"the description of {show(root)} has more than {MAX_CLOSURE} triples"
                )
        return out
