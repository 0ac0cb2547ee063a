"""The ``dcat`` mapper: DCAT-AP 1.x/2.x/3.x RDF in any serialisation -> DCAT-AP 3, per dataset.

Steps (docs/mappings/dcat.md describes them for metadata specialists):

1. **Parse** the payload safely (:mod:`aggregator.mapping.dcat.input`): format from the media
   type, the URL's extension or the first bytes; relative IRIs resolved against ``raw.url``;
   DOCTYPEs other than internal string entities, entity bombs, truncated RDF/XML and unknown
   remote JSON-LD contexts refused; an RDF/XML node that cannot be read is dropped and
   reported, the rest of the document kept (:mod:`aggregator.mapping.rdf_xml`); known DCAT-AP
   contexts resolved from our copies (:mod:`._contexts`); illegal IRIs percent-encoded,
   the original kept as ``dct:identifier``.
2. **Split** (the index and the walk: :mod:`._document`): every ``dcat:Dataset``,
   ``dcat:DataService`` and ``dcat:DatasetSeries`` becomes one description made of its
   closure: the resources reachable from it through outgoing links that the document
   describes (blank nodes, distributions, agents, periods, ...). The walk
   stops at other datasets, catalogues and catalogue records (the link triple is kept) and at
   ``MAX_CLOSURE`` triples. Shared resources are copied into every description (up to
   ``MAX_AMPLIFICATION`` times the document in all).
3. **Catalogue facts**: the triples of the ``dcat:Catalog`` that lists the dataset (minus its
   ``dcat:dataset``/``dcat:service``/``dcat:record`` lists, except the entries naming this
   dataset) and of the source's ``dcat:CatalogRecord`` about it, with their closures, go to
   ``catalog_ntriples``.
4. **Identity**: a dataset keeps its IRI; a blank-node dataset gets ``mint_iri(ctx, "dataset",
   key)`` with key = its single ``dct:identifier``, else ``raw.local_id`` (single-record payload
   with one dataset), else a hash of its canonical closure (which changes with the content).
5. **Normalise** with the rule table ``mappings/dcat-ap-3.toml`` (:mod:`.rules`, vocabulary
   tables in :mod:`.vocab`, range classes in :mod:`._ranges`); every rewrite is a
   finding named after its rule.
6. **Report** what no description keeps (triples about unreferenced resources, catalogue
   entries naming undescribed resources, repaired IRIs, undefined JSON-LD keys) as findings on
   the first record; a dataset without title is a VIOLATION (a ``MappingError`` for a
   single-record payload). :mod:`.accounting` checks that every input triple is kept,
   rewritten or reported.
7. **Output** canonical N-Triples (RDFC-1.0 blank node labels, sorted lines): equal input gives
   byte-equal output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from pyoxigraph import (
    BlankNode,
    CanonicalizationAlgorithm,
    Dataset,
    Literal,
    NamedNode,
    Quad,
    RdfFormat,
    serialize,
)

from aggregator.core.errors import MappingError
from aggregator.core.models import Finding, MappedDataset, RawRecord, Severity, Stage
from aggregator.core.vocab import DCAT, DCT
from aggregator.mapping.base import Mapper, MappingContext, content_hash, mint_iri
from aggregator.mapping.dcat._document import DCT_TITLE, MAX_CLOSURE, Document, Node, show
from aggregator.mapping.dcat.input import ParsedDocument
from aggregator.mapping.dcat.rule_table import DEFAULT_RULES_PATH, load_rules
from aggregator.mapping.dcat.rules import RuleSet, findings_from
from aggregator.mapping.payload import ParsedPayload

__all__ = ["MAX_CLOSURE", "DcatMapper", "canonical_quads"]

DCT_IDENTIFIER = NamedNode(DCT + "identifier")
# A catalogue's lists of its members: not catalogue facts (they would copy every dataset's IRI
# into every dataset's catalogue record).
CATALOG_LISTS = frozenset(NamedNode(DCAT + p) for p in ("dataset", "service", "record"))

# Output triples (all descriptions of a document together) may be at most this many times the
# input's, plus AMPLIFICATION_SLACK: shared resources are copied into every description that
# uses them, and a document built to multiply them (a "bomb") is refused instead of mapped.
MAX_AMPLIFICATION = 50
AMPLIFICATION_SLACK = 200_000
MAX_REPORTED = 5  # example subjects/terms named in a finding


def canonical_quads(quads: Iterable[Quad], ground: Iterable[str] = ()) -> bytes:
    """Canonical N-Triples of default-graph quads, byte-equal to ``base.canonical_ntriples``.

    Same algorithm (RDFC-1.0 relabelling, sorted unique lines, UTF-8), but it takes the quads
    the parser produced instead of rebuilding one Quad per triple, which cost most of the
    mapping time (docs/benchmarks.md#mapping). ``ground``: more triples, already
    as N-Triples lines, that hold no blank node (so they cannot change the blank node labels);
    they are merged into the sorted lines without going through the dataset.
    """
    ds = Dataset(quads)
    ds.canonicalize(CanonicalizationAlgorithm.RDFC_1_0)  # cheap when there is no blank node
    data = serialize(ds, format=RdfFormat.N_QUADS)
    lines = data.splitlines() if data else []  # unique: the dataset holds each quad once
    lines.extend(line.encode() for line in ground)  # ground types: nodes that had no type
    if not lines:
        return b""
    lines.sort()
    return b"\n".join(lines) + b"\n"


def _titled(doc: Document, node: object) -> bool:
    return node in doc.titled


def _themes(ntriples: bytes, iri: NamedNode) -> tuple[str, ...]:
    """The dcat:theme IRIs of ``iri``, read from its canonical N-Triples (sorted, so the lines
    are together; cheaper than looking at every quad again)."""
    prefix = f"\n<{iri.value}> <{DCAT}theme> <".encode()
    data = b"\n" + ntriples
    out = []
    start = data.find(prefix)
    while start >= 0:
        begin = start + len(prefix)
        end = data.find(b">", begin)
        out.append(data[begin:end].decode())
        start = data.find(prefix, end)
    return tuple(out)  # sorted already, and unique


def _original_iris(quads: list[Quad], repaired: dict[str, str]) -> list[Quad]:
    """``<repaired IRI> dct:identifier "original string"`` for each repaired subject/object."""
    fixed = {encoded: original for original, encoded in repaired.items()}
    nodes: dict[str, NamedNode] = {}
    for quad in quads:
        for term in (quad.subject, quad.object):
            if isinstance(term, NamedNode) and term.value in fixed:
                nodes.setdefault(term.value, term)
    return [Quad(node, DCT_IDENTIFIER, Literal(fixed[value])) for value, node in nodes.items()]


def _document_findings(doc: Document, parsed: ParsedDocument) -> list[Finding]:
    """What the document held that no description carries: reported, never silently lost."""
    findings = []
    listed = {q for d in doc.datasets for q in doc.links_to.get(d, ())}
    unlisted = [
        q
        for c in doc.catalogs
        if c in doc.visited
        for q in doc.by_subject.get(c, ())
        if q.predicate in CATALOG_LISTS and q not in listed
    ]
    if unlisted:
        findings.append(
            Finding(
                stage=Stage.MAP,
                severity=Severity.INFO,
                rule="catalogue-entries-not-described",
                message=f"{len(unlisted)} triples of a catalogue's dcat:dataset / dcat:service / "
                "dcat:record lists name resources this document does not describe (another "
                f"page of the catalogue?); not kept: first <{unlisted[0].predicate.value}> "
                f"{unlisted[0].object}",
                location=unlisted[0].subject.value
                if isinstance(unlisted[0].subject, NamedNode)
                else None,
            )
        )
    orphans = [s for s in doc.by_subject if s not in doc.visited]
    if orphans:
        count = sum(len(doc.by_subject[s]) for s in orphans)
        names = ", ".join(
            f"<{s.value}>" if isinstance(s, NamedNode) else "[blank node]"
            for s in orphans[:MAX_REPORTED]
        )
        more = f" and {len(orphans) - MAX_REPORTED} more" if len(orphans) > MAX_REPORTED else ""
        findings.append(
            Finding(
                stage=Stage.MAP,
                severity=Severity.WARNING,
                rule="unreachable-triples",
                message=f"{count} triples of the document are about resources that no dataset, "
                f"catalogue or catalogue record refers to, and are not kept: {names}{more}",
                location=orphans[0].value if isinstance(orphans[0], NamedNode) else None,
            )
        )
    if parsed.repaired:
        examples = ", ".join(f"{k!r} -> <{v}>" for k, v in list(parsed.repaired.items())[:3])
        findings.append(
            Finding(
                stage=Stage.MAP,
                severity=Severity.WARNING,
                rule="iri-percent-encoded",
                message=f"{len(parsed.repaired)} illegal IRIs percent-encoded, the original "
                f"string kept as dct:identifier: {examples}",
            )
        )
    if parsed.dropped:
        shown = "; ".join(str(node) for node in parsed.dropped[:MAX_REPORTED])
        more = (
            f" and {len(parsed.dropped) - MAX_REPORTED} more"
            if len(parsed.dropped) > MAX_REPORTED
            else ""
        )
        findings.append(
            Finding(
                stage=Stage.PARSE,
                severity=Severity.WARNING,
                rule="rdf-xml-node-unreadable",
                message=f"{len(parsed.dropped)} top-level RDF/XML element(s) could not be read "
                f"and are not kept (the rest of the document is): {shown}{more}",
            )
        )
    if parsed.undefined_terms:
        terms = ", ".join(parsed.undefined_terms[:MAX_REPORTED])
        findings.append(
            Finding(
                stage=Stage.MAP,
                severity=Severity.WARNING,
                rule="json-ld-term-undefined",
                message=f"JSON-LD keys that no @context defines, dropped by JSON-LD processing: "
                f"{terms}",
            )
        )
    return findings


def _replace(quads: Iterable[Quad], iris: Mapping[BlankNode, NamedNode]) -> list[Quad]:
    """``quads`` with each blank-node dataset of ``iris`` replaced by the IRI minted for it (as
    subject of its own description, as object of a link from another: a service's
    ``dcat:servesDataset``, a catalogue's ``dcat:dataset``)."""
    out = []
    for quad in quads:
        subject, obj = quad.subject, quad.object
        new_subject = iris.get(subject) if isinstance(subject, BlankNode) else None
        new_object = iris.get(obj) if isinstance(obj, BlankNode) else None
        if new_subject is None and new_object is None:
            out.append(quad)
        else:
            out.append(Quad(new_subject or subject, quad.predicate, new_object or obj))
    return out


class DcatMapper(Mapper):
    """DCAT-AP RDF (Turtle, RDF/XML, JSON-LD, N-Triples) -> one DCAT-AP 3 graph per dataset."""

    name = "dcat"
    reads_collections = True

    def __init__(self, rules_path: Path | None = None) -> None:
        self.rules: RuleSet = load_rules(rules_path or DEFAULT_RULES_PATH)

    def map_payload(self, payload: ParsedPayload, ctx: MappingContext) -> list[MappedDataset]:
        raw = payload.raw
        parsed = payload.rdf()  # shared with the payload validators: parsed once
        quads = parsed.quads
        if parsed.repaired:
            quads = quads + _original_iris(quads, parsed.repaired)
        doc = Document(quads)
        where = f" ({raw.url})" if raw.url else ""
        if not doc.datasets:
            raise MappingError(
                f"no dcat:Dataset, dcat:DataService or dcat:DatasetSeries in {raw.local_id!r}"
                f"{where}"
            )
        single = not raw.is_collection and len(doc.datasets) == 1
        catalog_cache: dict[object, tuple[list[Quad], list[Finding]]] = {}
        # Every blank-node dataset gets its IRI before any description is written, so that a
        # link to it from another description (a data service's dcat:servesDataset) names the
        # same IRI as the dataset's own record instead of a dangling blank node.
        minted = self._mint_all(raw, ctx, doc, single)
        iris = {node: iri for node, (iri, _, _) in minted.items()}
        results = []
        budget = MAX_AMPLIFICATION * len(quads) + AMPLIFICATION_SLACK
        for node in doc.datasets:
            mapped = self._map_one(raw, doc, node, single, catalog_cache, minted, iris)
            budget -= mapped.ntriples.count(b"\n") + mapped.catalog_ntriples.count(b"\n")
            if budget < 0:
                raise MappingError(
                    f"the descriptions of {raw.local_id!r}{where} grow past {MAX_AMPLIFICATION} "
                    f"times its {len(quads)} triples (shared resources copied into each "
                    "dataset): refused as a possible expansion bomb"
                )
            results.append(mapped)
        document_findings = _document_findings(doc, parsed)
        if document_findings:  # reported once, on the first description of the document
            first = results[0]
            results[0] = replace(first, findings=first.findings + tuple(document_findings))
        if single and not _titled(doc, doc.datasets[0]):
            raise MappingError(
                f"{show(doc.datasets[0])} in {raw.local_id!r}{where} has no dct:title "
                "(mandatory in every DCAT-AP version)"
            )
        return results

    # --- one dataset ------------------------------------------------------------------------

    def _mint_all(
        self, raw: RawRecord, ctx: MappingContext, doc: Document, single: bool
    ) -> dict[BlankNode, tuple[NamedNode, list[Quad], Finding]]:
        """The IRI (with its dct:identifier, if added, and finding) of each blank-node dataset,
        in document order (which decides which of two datasets with one key gets the hash)."""
        out: dict[BlankNode, tuple[NamedNode, list[Quad], Finding]] = {}
        taken: set[str] = set()
        for node in doc.datasets:
            if isinstance(node, BlankNode):
                out[node] = self._mint(raw, ctx, node, doc.closure(node), single, taken)
        return out

    def _map_one(
        self,
        raw: RawRecord,
        doc: Document,
        node: Node,
        single: bool,
        catalog_cache: dict[object, tuple[list[Quad], list[Finding]]],
        minted: Mapping[BlankNode, tuple[NamedNode, list[Quad], Finding]],
        iris: Mapping[BlankNode, NamedNode],
    ) -> MappedDataset:
        quads = doc.closure(node)
        records = self._records_about(doc, node)
        findings: list[Finding] = []
        if isinstance(node, BlankNode):
            iri, extra, finding = minted[node]
            findings.append(finding)
        else:
            iri, extra = node, []
        if iris:  # links to blank-node datasets (its own node among them) follow their IRIs
            quads = _replace(quads, iris) + extra
            records = _replace(records, iris)
        quads, trace, ground = self.rules.apply_split(quads, index=doc)
        findings.extend(findings_from(trace, self.rules))
        if not _titled(doc, node):
            findings.append(
                Finding(
                    stage=Stage.MAP,
                    severity=Severity.VIOLATION,
                    rule="dataset-without-title",
                    message=f"{show(node)} has no dct:title (mandatory in every DCAT-AP version)",
                    location=iri.value,
                    path=DCT_TITLE.value,
                )
            )
        catalog_quads, catalog_findings = self._catalog_facts(doc, node, catalog_cache)
        links = doc.links_to.get(node)
        if links:  # the catalogue's own dcat:dataset / dcat:record triple naming this dataset
            catalog_quads = catalog_quads + (_replace(links, iris) if iris else links)
        record_quads, record_trace, record_ground = (
            self.rules.apply_split(records) if records else ([], [], [])
        )
        findings.extend(catalog_findings)
        findings.extend(findings_from(record_trace, self.rules))
        ntriples = canonical_quads(quads, ground)
        themes = _themes(ntriples, iri)
        return MappedDataset(
            local_id=raw.local_id if single else iri.value,
            dataset_iri=iri.value,
            ntriples=ntriples,
            content_hash=content_hash(ntriples),
            datestamp=raw.datestamp,
            catalog_ntriples=canonical_quads(catalog_quads + record_quads, record_ground)
            if catalog_quads or record_quads
            else b"",
            findings=tuple(findings),
            themes=tuple(themes),
        )

    def _mint(
        self,
        raw: RawRecord,
        ctx: MappingContext,
        node: BlankNode,
        quads: list[Quad],
        single: bool,
        minted: set[str],
    ) -> tuple[NamedNode, list[Quad], Finding]:
        """A stable IRI for a blank-node dataset, plus a dct:identifier if it had none."""
        identifiers = [
            q.object.value
            for q in quads
            if q.subject == node and q.predicate == DCT_IDENTIFIER and isinstance(q.object, Literal)
        ]

        def closure_key() -> str:
            return hashlib.sha256(canonical_quads(quads)).hexdigest()[:32]

        if len(identifiers) == 1:
            key, source = identifiers[0], f"its dct:identifier {identifiers[0]!r}"
        elif single:
            key, source = raw.local_id, f"the record identifier {raw.local_id!r}"
        else:
            key, source = closure_key(), "a hash of its description (changes with its content)"
        iri = mint_iri(ctx, "dataset", key)
        severity = Severity.INFO
        if iri in minted:  # two blank-node datasets with the same key in one document
            key, source = closure_key(), "a hash of its description (its key was not unique)"
            iri = mint_iri(ctx, "dataset", key)
            severity = Severity.WARNING
        minted.add(iri)
        extra: list[Quad] = []
        if not any(q.subject == node and q.predicate == DCT_IDENTIFIER for q in quads):
            extra.append(Quad(NamedNode(iri), DCT_IDENTIFIER, Literal(key if single else iri)))
        finding = Finding(
            stage=Stage.MAP,
            severity=severity,
            rule="dataset-iri-minted",
            message=f"blank-node dataset given the IRI <{iri}> from {source}",
            location=iri,
        )
        return NamedNode(iri), extra, finding

    # --- catalogue facts ----------------------------------------------------------------------

    def _records_about(self, doc: Document, node: Node) -> list[Quad]:
        """Closures of the source's dcat:CatalogRecords whose foaf:primaryTopic is ``node``."""
        out: list[Quad] = []
        for record in doc.records_of.get(node, ()):
            out.extend(doc.closure(record))
        return out

    def _catalog_facts(
        self,
        doc: Document,
        node: Node,
        cache: dict[object, tuple[list[Quad], list[Finding]]],
    ) -> tuple[list[Quad], list[Finding]]:
        """Normalised facts of the catalogues listing ``node`` (all of them if none does)."""
        if not doc.catalogs:
            return [], []
        listing = doc.catalogs_of.get(node) or doc.catalogs
        quads: list[Quad] = []
        findings: list[Finding] = []
        for catalog in listing:
            cached = cache.get(catalog)
            if cached is None:
                closure = doc.closure(catalog, skip=CATALOG_LISTS)
                rewritten, trace = self.rules.apply(closure)
                cached = cache[catalog] = (rewritten, findings_from(trace, self.rules))
            quads.extend(cached[0])
            findings.extend(cached[1])
        return quads, findings
