"""The metadata formats of the OAI-PMH provider and how each record is written in them.

- ``dcat_ap`` (alias ``dcat``): one ``rdf:RDF`` per record, the dataset's stored canonical
  N-Triples (the dataset and everything it links to) written as RDF/XML by pyoxigraph, the
  dataset's own description first;
- ``oai_dc``: simple Dublin Core derived from that graph (see :func:`oai_dc`);
- ``iso19139``: for records whose original payload was ISO 19139, that payload unchanged
  apart from its XML declaration.

Graphs come from SQLite, never from the graph store (whose datatypes change on insert). They
are parsed leniently: the stored N-Triples were written by pyoxigraph from terms it had parsed
and checked, and checking every IRI and language tag again was most of a page's parse time
(docs/benchmarks.md#the-1m-run-issue-31).
"""

from __future__ import annotations

import codecs
import logging
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from lxml import etree
from pyoxigraph import BlankNode, Literal, NamedNode, RdfFormat, Triple, parse, serialize

from aggregator.core.vocab import DCAT as DCATNS
from aggregator.core.vocab import DCT, FOAF, RDF, RDFS, SCHEMA, SKOS, VCARD
from aggregator.core.xml import safe_parser
from aggregator.serve.oai_xml import clean_bytes, esc, strip_declaration

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MetadataFormat:
    prefix: str
    schema: str
    namespace: str


DCAT_AP = MetadataFormat(
    "dcat_ap",
    "https://www.w3.org/TR/rdf-syntax-grammar/",  # RDF/XML has no XSD; its grammar stands in
    "http://www.w3.org/ns/dcat#",
)
DCAT = MetadataFormat("dcat", DCAT_AP.schema, DCAT_AP.namespace)
OAI_DC = MetadataFormat(
    "oai_dc",
    "http://www.openarchives.org/OAI/2.0/oai_dc.xsd",
    "http://www.openarchives.org/OAI/2.0/oai_dc/",
)
ISO19139 = MetadataFormat(
    "iso19139",
    "https://schemas.isotc211.org/schemas/19139/-/gmd/gmd.xsd",
    "http://www.isotc211.org/2005/gmd",
)
FORMATS = {f.prefix: f for f in (DCAT_AP, DCAT, OAI_DC, ISO19139)}
RDF_PREFIXES = frozenset({"dcat_ap", "dcat"})
ISO_FORMAT = "iso19139"  # records.format of records harvested as ISO 19139


def formats_of(record_format: str | None) -> list[MetadataFormat]:
    """The formats a published record can be disseminated in."""
    out = [DCAT_AP, DCAT, OAI_DC]
    if record_format == ISO_FORMAT:
        out.append(ISO19139)
    return out


PREFIXES = {
    "dcat": DCATNS,
    "dct": DCT,
    "foaf": FOAF,
    "vcard": VCARD,
    "adms": "http://www.w3.org/ns/adms#",
    "skos": SKOS,
    "rdfs": RDFS,
    "owl": "http://www.w3.org/2002/07/owl#",
    "locn": "http://www.w3.org/ns/locn#",
    "prov": "http://www.w3.org/ns/prov#",
    "spdx": "http://spdx.org/rdf/terms#",
    "dcatap": "http://data.europa.eu/r5r/",
    "schema": SCHEMA,
}
_TYPE = NamedNode(RDF + "type")
_DATASET = NamedNode(DCATNS + "Dataset")


class RdfXmlWriter:
    """N-Triples -> RDF/XML for one record, with pyoxigraph, and no Python work per triple.

    The stored N-Triples are canonical (sorted lines), so the dataset's own triples are one
    block of lines: it is moved to the front, which puts the dataset's ``rdf:Description``
    first. RDF/XML cannot write a predicate whose IRI does not end in an XML name
    (``.../123``): pyoxigraph then writes an ``oxprefix:`` element, which is not XML. Only
    then is each predicate tried on its own (cached per writer, bounded) and the triples that
    cannot be written left out, with a warning.
    """

    MAX_CACHED = 20_000

    def __init__(self) -> None:
        self._writable: dict[str, bool] = {}

    def _can_write(self, predicate: NamedNode) -> bool:
        iri = predicate.value
        known = self._writable.get(iri)
        if known is None:
            probe = Triple(NamedNode("http://example.org/s"), predicate, Literal("x"))
            data = serialize([probe], format=RdfFormat.RDF_XML, prefixes=PREFIXES) or b""
            try:
                etree.fromstring(data, parser=safe_parser())
                known = _BROKEN not in data
            except etree.XMLSyntaxError:
                known = False
            if not known:
                log.warning("predicate %s cannot be written in RDF/XML; left out", iri)
            if len(self._writable) >= self.MAX_CACHED:
                self._writable.clear()
            self._writable[iri] = known
        return known

    def write(self, ntriples: bytes, dataset_iri: str | None) -> bytes:
        """The ``rdf:RDF`` element (no XML declaration)."""
        if dataset_iri:
            ntriples = dataset_first(ntriples, dataset_iri)
        data = (
            serialize(
                parse(ntriples, format=RdfFormat.N_TRIPLES, lenient=True),
                format=RdfFormat.RDF_XML,
                prefixes=PREFIXES,
            )
            or b""
        )
        if _BROKEN in data:
            triples = [
                t
                for t in parse(ntriples, format=RdfFormat.N_TRIPLES, lenient=True)
                if self._can_write(t.predicate)
            ]
            data = serialize(triples, format=RdfFormat.RDF_XML, prefixes=PREFIXES) or b""
        return clean_bytes(strip_declaration(data))


_BROKEN = b"<oxprefix:"


def dataset_first(ntriples: bytes, dataset_iri: str) -> bytes:
    """Sorted N-Triples with the block of lines about ``dataset_iri`` moved to the front."""
    prefix = b"<" + dataset_iri.encode("utf-8") + b"> "
    if ntriples.startswith(prefix):
        return ntriples
    start = ntriples.find(b"\n" + prefix)
    if start < 0:
        return ntriples
    start += 1
    last = ntriples.rfind(b"\n" + prefix)
    end = ntriples.find(b"\n", last + 1)
    end = len(ntriples) if end < 0 else end + 1
    rest = ntriples[:start] + ntriples[end:]
    return ntriples[start:end] + rest


# -- oai_dc ----------------------------------------------------------------------------------
_DC_HEAD = (
    '<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" '
    'xmlns:dc="http://purl.org/dc/elements/1.1/" '
    'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
    'xsi:schemaLocation="http://www.openarchives.org/OAI/2.0/oai_dc/ '
    'http://www.openarchives.org/OAI/2.0/oai_dc.xsd">'
)
_EU_LANGUAGE = "http://publications.europa.eu/resource/authority/language/"
_LABELS = tuple(
    NamedNode(p)
    for p in (
        FOAF + "name",
        SKOS + "prefLabel",
        RDFS + "label",
        VCARD + "fn",
        DCT + "title",
        "http://www.w3.org/ns/locn#geographicName",
    )
)
Term = NamedNode | BlankNode | Literal


class _Graph:
    def __init__(self, triples: Iterable[Triple]) -> None:
        self.out: dict[object, dict[str, list[Term]]] = defaultdict(lambda: defaultdict(list))
        for t in triples:
            obj = t.object
            if isinstance(obj, NamedNode | BlankNode | Literal):
                self.out[t.subject][t.predicate.value].append(obj)

    def values(self, node: object, *predicates: str) -> list[Term]:
        props = self.out.get(node)
        if not props:
            return []
        return [v for p in predicates for v in props.get(p, ())]

    def labels(self, node: object) -> list[Literal]:
        props = self.out.get(node)
        if not props:
            return []
        for p in _LABELS:
            found = [v for v in props.get(p.value, ()) if isinstance(v, Literal)]
            if found:
                return found
        return []


def _text(graph: _Graph, term: Term) -> list[tuple[str, str | None]]:
    """What a DC element says for a value: a literal as it is, a resource by its labels
    (else its IRI; a blank node without labels says nothing)."""
    if isinstance(term, Literal):
        return [(term.value, term.language)]
    labels = graph.labels(term)
    if labels:
        return [(v.value, v.language) for v in labels]
    return [(term.value, None)] if isinstance(term, NamedNode) else []


def _period(graph: _Graph, node: Term) -> list[tuple[str, str | None]]:
    start = graph.values(node, DCATNS + "startDate", SCHEMA + "startDate")
    end = graph.values(node, DCATNS + "endDate", SCHEMA + "endDate")
    if start or end:
        s = start[0].value if start else ".."
        e = end[0].value if end else ".."
        return [(f"{s}/{e}", None)]
    return _text(graph, node)


def _find_dataset(graph: _Graph, dataset_iri: str | None) -> object | None:
    if dataset_iri:
        return NamedNode(dataset_iri)
    for subject, props in graph.out.items():
        if _DATASET in props.get(_TYPE.value, ()):
            return subject
    return None


def oai_dc(ntriples: bytes, dataset_iri: str | None) -> bytes:
    """Simple Dublin Core from the DCAT-AP graph (docs/serve/oai-pmh.md has the table)."""
    graph = _Graph(parse(ntriples, format=RdfFormat.N_TRIPLES, lenient=True))
    ds = _find_dataset(graph, dataset_iri)
    fields: list[tuple[str, str, str | None]] = []

    def add(element: str, values: Iterable[tuple[str, str | None]]) -> None:
        for value, lang in values:
            item = (element, value, lang or None)
            if value.strip() and item not in fields:
                fields.append(item)

    def each(element: str, *predicates: str) -> None:
        for term in graph.values(ds, *predicates):
            add(element, _text(graph, term))

    each("title", DCT + "title")
    each("creator", DCT + "creator")
    add(
        "subject",
        [
            (t.value, t.language)
            for t in graph.values(ds, DCATNS + "keyword")
            if isinstance(t, Literal)
        ],
    )
    add(
        "subject",
        [(t.value, None) for t in graph.values(ds, DCATNS + "theme") if isinstance(t, NamedNode)],
    )
    each("description", DCT + "description")
    each("publisher", DCT + "publisher")
    each("contributor", DCT + "contributor")
    add("date", [(t.value, None) for t in graph.values(ds, DCT + "issued", DCT + "modified")])
    add("type", [("Dataset", None)])
    each("type", DCT + "type")
    distributions = graph.values(ds, DCATNS + "distribution")
    for dist in distributions:
        for term in graph.values(dist, DCT + "format", DCATNS + "mediaType"):
            add("format", _text(graph, term) if isinstance(term, Literal) else [(term.value, None)])
    if isinstance(ds, NamedNode):
        add("identifier", [(ds.value, None)])
    add(
        "identifier",
        [(t.value, None) for t in graph.values(ds, DCT + "identifier") if isinstance(t, Literal)],
    )
    for term in graph.values(ds, DCT + "language"):
        if isinstance(term, NamedNode) and term.value.startswith(_EU_LANGUAGE):
            add("language", [(term.value[len(_EU_LANGUAGE) :].lower(), None)])
        else:
            add("language", [(term.value, None)])
    add(
        "relation",
        [
            (t.value, None)
            for t in graph.values(ds, DCATNS + "landingPage")
            if isinstance(t, NamedNode)
        ],
    )
    each("coverage", DCT + "spatial")
    for term in graph.values(ds, DCT + "temporal"):
        add("coverage", _period(graph, term))
    each("rights", DCT + "accessRights", DCT + "rights", DCT + "license")
    for dist in distributions:
        for term in graph.values(dist, DCT + "license", DCT + "rights"):
            add("rights", _text(graph, term))
    parts = [_DC_HEAD]
    for element, value, lang in fields:
        attr = f' xml:lang="{esc(lang)}"' if lang else ""
        parts.append(f"<dc:{element}{attr}>{esc(value)}</dc:{element}>")
    parts.append("</oai_dc:dc>")
    return "".join(parts).encode("utf-8")


# -- iso19139 --------------------------------------------------------------------------------
_ENCODING = re.compile(rb"""encoding\s*=\s*["']([A-Za-z][A-Za-z0-9._-]*)["']""")
_DECL_END = re.compile(rb"\?>")


def embeddable_xml(payload: bytes) -> bytes | None:
    """The payload as it can sit inside ``<metadata>``: without its XML declaration, in
    UTF-8. None when it cannot (not well-formed, a DOCTYPE, an element in no namespace, which
    the envelope's default namespace would capture)."""
    data = payload.removeprefix(codecs.BOM_UTF8)
    encoding = "utf-8"
    if data.lstrip()[:5] == b"<?xml":
        end = _DECL_END.search(data)
        if end is None:
            return None
        found = _ENCODING.search(data[: end.start()])
        if found:
            encoding = found.group(1).decode("ascii").lower()
        data = data[end.end() :].lstrip()
    if encoding not in ("utf-8", "utf8"):
        try:
            data = data.decode(encoding).encode("utf-8")
        except (LookupError, UnicodeError):
            return None
    try:
        root = etree.fromstring(data, parser=safe_parser())
    except etree.XMLSyntaxError:
        return None
    docinfo = root.getroottree().docinfo
    if (
        docinfo.internalDTD is not None
        or docinfo.externalDTD is not None
        or any(not el.tag.startswith("{") for el in root.iter() if isinstance(el.tag, str))
    ):
        return None
    return data.strip()
