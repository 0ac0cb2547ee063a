"""Harvest DCAT-AP catalogues published as RDF documents ("dumps"), Hydra paging included.

One fetched document (or one page of a Hydra-paged collection) becomes one
:class:`~aggregator.core.models.RawRecord` with ``is_collection=True``: the bytes exactly as
received.
The page is parsed here (pyoxigraph, streamed quad by quad, no graph kept) only to find the
paging links, the announced ``hydra:totalItems`` and the ``dcat:Dataset`` subjects it holds;
splitting it into per-dataset graphs is the mapper's job.

Serialisation: the ``Content-Type`` header when it names an RDF media type, else the URL
extension, else the source option ``format``; the option ``force_format = true`` makes the
option win over both. See docs/protocols/rdf-dump.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urldefrag, urljoin, urlsplit

from pyoxigraph import BlankNode, Literal, NamedNode, Quad, RdfFormat, parse

from aggregator.config import SourceConfig
from aggregator.core.errors import ConfigError, HarvestError, ParseError, UnsafeInputError
from aggregator.core.models import RawRecord
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.mapping.dcat.input import check_rdf_xml
from aggregator.mapping.rdf_xml import MAX_DROPPED_REPORTED, RdfXmlRead, read_rdf_xml
from aggregator.net.client import Response

HYDRA = "http://www.w3.org/ns/hydra/core#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
DCAT_DATASET = "http://www.w3.org/ns/dcat#Dataset"
# What hydra:totalItems counts in a DCAT catalogue: everything the dcat mapper makes a record of.
DESCRIBED_TYPES = frozenset(
    {
        DCAT_DATASET,
        "http://www.w3.org/ns/dcat#DataService",
        "http://www.w3.org/ns/dcat#DatasetSeries",
    }
)
_NEXT = frozenset({HYDRA + "next", HYDRA + "nextPage"})  # nextPage: deprecated Hydra
_VIEW_TYPES = frozenset({HYDRA + "PartialCollectionView", HYDRA + "PagedCollection"})
_VIEW = HYDRA + "view"
_TOTAL = HYDRA + "totalItems"
DEFAULT_MAX_PAGES = 10_000


@dataclass(frozen=True, slots=True)
class RdfSyntax:
    """One RDF serialisation: option key, canonical media type, pyoxigraph format."""

    key: str
    media_type: str
    rdf_format: RdfFormat


SYNTAXES: Mapping[str, RdfSyntax] = {
    s.key: s
    for s in (
        RdfSyntax("turtle", "text/turtle", RdfFormat.TURTLE),
        RdfSyntax("rdfxml", "application/rdf+xml", RdfFormat.RDF_XML),
        RdfSyntax("jsonld", "application/ld+json", RdfFormat.JSON_LD),
        RdfSyntax("ntriples", "application/n-triples", RdfFormat.N_TRIPLES),
        RdfSyntax("nquads", "application/n-quads", RdfFormat.N_QUADS),
        RdfSyntax("trig", "application/trig", RdfFormat.TRIG),
    )
}

#: media types (lower case, parameters stripped) that name an RDF serialisation
MEDIA_TYPES: Mapping[str, str] = {
    "text/turtle": "turtle",
    "application/x-turtle": "turtle",
    "application/turtle": "turtle",
    "application/rdf+xml": "rdfxml",
    "application/ld+json": "jsonld",
    "application/json": "jsonld",  # JSON-LD served with the generic JSON type
    "application/n-triples": "ntriples",
    "application/n-quads": "nquads",
    "text/x-nquads": "nquads",
    "application/trig": "trig",
}

#: URL path extensions, consulted when the Content-Type says nothing useful
EXTENSIONS: Mapping[str, str] = {
    ".ttl": "turtle",
    ".rdf": "rdfxml",
    ".xml": "rdfxml",
    ".owl": "rdfxml",
    ".jsonld": "jsonld",
    ".json": "jsonld",
    ".nt": "ntriples",
    ".nq": "nquads",
    ".trig": "trig",
}

ACCEPT = (
    "text/turtle, application/rdf+xml;q=0.9, application/ld+json;q=0.9, "
    "application/n-triples;q=0.8, application/n-quads;q=0.7, application/trig;q=0.7, */*;q=0.1"
)


def syntax_for_media_type(media_type: str) -> RdfSyntax | None:
    """The RDF syntax a Content-Type names (parameters ignored), or None."""
    key = MEDIA_TYPES.get(media_type.split(";")[0].strip().lower())
    return SYNTAXES[key] if key else None


def syntax_for_url(url: str) -> RdfSyntax | None:
    """The RDF syntax the URL path's extension names, or None."""
    path = urlsplit(url).path.lower()
    for ext, key in EXTENSIONS.items():
        if path.endswith(ext):
            return SYNTAXES[key]
    return None


def detect_syntax(
    media_type: str, url: str, fallback: str | None = None, force: bool = False
) -> RdfSyntax:
    """Content-Type, then URL extension, then the configured ``fallback``; HarvestError if none."""
    if force and fallback:
        return SYNTAXES[fallback]
    found = syntax_for_media_type(media_type) or syntax_for_url(url)
    if found is not None:
        return found
    if fallback:
        return SYNTAXES[fallback]
    raise HarvestError(
        f"cannot tell the RDF serialisation of {url}: Content-Type {media_type or 'missing'!r}, "
        "no known extension, and no 'format' option",
        code="unknownFormat",
    )


@dataclass(slots=True)
class PageFacts:
    """What one page says about paging and what it holds."""

    next_url: str | None = None
    total_items: int | None = None
    dataset_iris: set[str] = field(default_factory=set)
    blank_datasets: int = 0
    notes: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # RDF/XML nodes not read, with position


def _read_rdf_xml(payload: bytes, base_url: str) -> RdfXmlRead:
    where = f" ({base_url})"
    try:
        data = check_rdf_xml(payload, where)
        return read_rdf_xml(
            data,
            lambda d: list(parse(d, RdfFormat.RDF_XML, base_iri=base_url, lenient=True)),
            where,
        )
    except UnsafeInputError as err:
        raise HarvestError(err.message, code="unsafeInput") from err
    except ParseError as err:
        raise HarvestError(err.message, code="parseError") from err


def scan_page(payload: bytes, syntax: RdfSyntax, base_url: str) -> PageFacts:
    """Stream-parse one page: Hydra next link, totalItems and the described resources
    (dcat:Dataset, dcat:DataService, dcat:DatasetSeries subjects).

    Raises HarvestError (code ``parseError``) if the page is not valid in ``syntax``, and
    HarvestError (code ``unsafeInput``) for RDF/XML whose DOCTYPE is more than internal
    string entities, or whose entities expand too far (:func:`aggregator.core.xml.
    expand_internal_entities`). RDF/XML is read node by node when it does not parse whole
    (:mod:`aggregator.mapping.rdf_xml`): the nodes that cannot be read are listed in
    ``dropped`` and the rest is scanned.
    JSON-LD remote contexts are never fetched: pyoxigraph has no document loader unless one is
    given, so a remote ``@context`` is a parse error.
    """
    facts = PageFacts()
    scan = _Scan({base_url, urldefrag(base_url)[0]})
    try:
        if syntax.key == "rdfxml":
            read = _read_rdf_xml(payload, base_url)
            quads: Iterable[Quad] = read.quads
            facts.dropped = [str(node) for node in read.dropped]
        else:
            quads = parse(payload, syntax.rdf_format, base_iri=base_url)
        _scan_quads(quads, base_url, facts, scan)
    except (SyntaxError, ValueError, OSError) as err:
        raise HarvestError(
            f"cannot parse {base_url} as {syntax.key}: {err}", code="parseError"
        ) from err
    except MemoryError as err:  # pyoxigraph: "Reached the buffer maximal size of 16777216"
        raise HarvestError(
            f"cannot parse {base_url} as {syntax.key}: one token (a literal, an IRI) is longer "
            f"than the parser reads ({err})",
            code="inputLimit",
        ) from err
    facts.blank_datasets = len(scan.blank_datasets)
    _paging(facts, scan, base_url)
    return facts


@dataclass(slots=True)
class _Scan:
    """What the scan of a page collects besides its facts."""

    view_nodes: set[str]  # the page's view nodes, whose next links are the paging
    nexts: list[tuple[str, str]] = field(default_factory=list)  # (subject key, next URL)
    totals: set[int] = field(default_factory=set)
    blank_datasets: set[str] = field(default_factory=set)


def _scan_quads(quads: Iterable[Quad], base_url: str, facts: PageFacts, scan: _Scan) -> None:
    """One pass over the page's quads (no call per quad: this is the harvest's inner loop)."""
    nexts, view_nodes, totals = scan.nexts, scan.view_nodes, scan.totals
    blank_datasets = scan.blank_datasets
    for quad in quads:
        pred = quad.predicate.value
        subj = quad.subject
        obj = quad.object
        if isinstance(subj, BlankNode):
            skey = f"_:{subj.value}"
        else:
            skey = subj.value if isinstance(subj, NamedNode) else str(subj)
        if pred == RDF_TYPE and isinstance(obj, NamedNode):
            if obj.value in DESCRIBED_TYPES:
                if isinstance(subj, NamedNode):
                    facts.dataset_iris.add(subj.value)
                else:
                    blank_datasets.add(skey)
            elif obj.value in _VIEW_TYPES:
                view_nodes.add(skey)
        elif pred in _NEXT:
            if isinstance(obj, NamedNode):
                nexts.append((skey, obj.value))
            elif isinstance(obj, Literal):
                nexts.append((skey, urljoin(base_url, obj.value.strip())))
                facts.notes.append(f"hydra next link given as a literal on {base_url}")
        elif pred == _VIEW and isinstance(obj, NamedNode | BlankNode):
            view_nodes.add(f"_:{obj.value}" if isinstance(obj, BlankNode) else str(obj.value))
        elif pred == _TOTAL and isinstance(obj, Literal):
            try:
                totals.add(int(obj.value.strip()))
            except ValueError:
                facts.notes.append(f"ignored non-integer hydra:totalItems {obj.value!r}")


def _paging(facts: PageFacts, scan: _Scan, base_url: str) -> None:
    """The page's next link and total, from the scan; an error when it states several."""
    candidates = {url for subj, url in scan.nexts if subj in scan.view_nodes}
    ignored = {url for subj, url in scan.nexts if subj not in scan.view_nodes}
    if ignored:
        facts.notes.append(
            f"ignored {len(ignored)} hydra next link(s) not on a PartialCollectionView, "
            f"PagedCollection or hydra:view of {base_url}"
        )
    if len(candidates) > 1:
        raise HarvestError(
            f"{base_url} has {len(candidates)} different hydra next links: "
            + ", ".join(sorted(candidates)),
            code="ambiguousPaging",
        )
    facts.next_url = candidates.pop() if candidates else None
    totals = scan.totals
    if len(totals) > 1:
        raise HarvestError(
            f"{base_url} states several hydra:totalItems: {sorted(totals)}", code="badPaging"
        )
    facts.total_items = totals.pop() if totals else None


@dataclass(frozen=True, slots=True)
class RdfDumpOptions:
    format: str | None = None  # fallback serialisation
    force_format: bool = False  # the option wins over Content-Type and extension
    max_pages: int = DEFAULT_MAX_PAGES
    check_total: bool = True  # compare hydra:totalItems with the dcat:Dataset subjects seen

    @classmethod
    def from_source(cls, source: SourceConfig) -> RdfDumpOptions:
        opts: Mapping[str, Any] = source.options
        where = f"sources.{source.name}.options"
        unknown = set(opts) - {"format", "force_format", "max_pages", "check_total"}
        if unknown:
            raise ConfigError(f"{where}: unknown option(s) {', '.join(sorted(unknown))}")
        fmt = opts.get("format")
        if fmt is not None and fmt not in SYNTAXES:
            raise ConfigError(f"{where}.format: expected one of {', '.join(SYNTAXES)}")
        force = opts.get("force_format", False)
        if not isinstance(force, bool):
            raise ConfigError(f"{where}.force_format: expected a boolean")
        if force and fmt is None:
            raise ConfigError(f"{where}.force_format needs 'format'")
        max_pages = opts.get("max_pages", DEFAULT_MAX_PAGES)
        if not isinstance(max_pages, int) or isinstance(max_pages, bool) or max_pages < 1:
            raise ConfigError(f"{where}.max_pages: expected a positive integer")
        check_total = opts.get("check_total", True)
        if not isinstance(check_total, bool):
            raise ConfigError(f"{where}.check_total: expected a boolean")
        return cls(format=fmt, force_format=force, max_pages=max_pages, check_total=check_total)


def _page_key(url: str) -> str:
    """Loop-detection key: the URL without fragment."""
    return urldefrag(url)[0]


class RdfDumpHarvester(Harvester):
    """An RDF document, or a chain of Hydra pages, as collection records."""

    name: ClassVar[str] = "rdf-dump"
    formats: ClassVar[tuple[str, ...]] = ("dcat",)

    @classmethod
    def check_config(cls, source: SourceConfig) -> None:
        RdfDumpOptions.from_source(source)

    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        opts = RdfDumpOptions.from_source(self.source)
        url: str | None = self.source.url
        visited: set[str] = set()
        dataset_iris: set[str] = set()
        blank_datasets = 0
        while url is not None:
            if request.cancel.is_set():
                listing.mark_truncated("cancelled")
                return
            if _page_key(url) in visited:
                listing.mark_truncated(f"hydra paging loop at {url}")
                return
            if listing.pages >= opts.max_pages:
                listing.mark_truncated(f"stopped after max_pages={opts.max_pages} pages")
                return
            visited.add(_page_key(url))
            response = self._fetch(url, request.cancel)
            if response is None:
                listing.mark_truncated("cancelled")
                return
            final = _page_key(response.url)
            if final != _page_key(url) and final in visited:
                listing.mark_truncated(f"hydra paging loop at {url} (redirected to {final})")
                return
            visited.add(final)
            syntax = detect_syntax(
                response.media_type, response.url, opts.format, opts.force_format
            )
            try:
                facts = scan_page(response.content, syntax, response.url)
            except HarvestError:
                # Hand the page on as received, so the record store keeps its bytes in the
                # dead-letter store (the mapper reports it); the listing stops here.
                yield RawRecord(
                    source=self.source.name,
                    local_id=url,
                    format=self.source.format,
                    payload=response.content,
                    media_type=syntax.media_type,
                    url=response.url,
                    is_collection=True,
                )
                raise
            for note in facts.notes:
                listing.note(note)
            if facts.dropped:  # its datasets are unknown: nothing may be withdrawn
                for node in facts.dropped[:MAX_DROPPED_REPORTED]:
                    listing.note(f"RDF/XML node not read in {response.url}: {node}")
                listing.mark_truncated(
                    f"{len(facts.dropped)} RDF/XML node(s) of {response.url} could not be "
                    f"read, the first at {facts.dropped[0]}"
                )
            listing.pages += 1
            if facts.total_items is not None:
                if listing.expected_total is None:
                    listing.expected_total = facts.total_items
                elif listing.expected_total != facts.total_items:
                    listing.mark_truncated(
                        f"hydra:totalItems changed from {listing.expected_total} to "
                        f"{facts.total_items} at {url}: the catalogue changed during the walk"
                    )
            dataset_iris |= facts.dataset_iris
            blank_datasets += facts.blank_datasets
            yield RawRecord(
                source=self.source.name,
                local_id=url,
                format=self.source.format,
                payload=response.content,
                media_type=syntax.media_type,
                url=response.url,
                is_collection=True,
            )
            listing.seen += 1
            url = facts.next_url
        counted = len(dataset_iris) + blank_datasets
        if blank_datasets:
            listing.note(f"{blank_datasets} dcat:Dataset node(s) without an IRI")
        expected = listing.expected_total
        if expected is not None and opts.check_total and counted != expected:
            listing.mark_truncated(
                f"hydra:totalItems is {expected} but the pages hold "
                f"{counted} dcat:Dataset subject(s)"
            )
        listing.mark_complete()

    def _fetch(self, url: str, cancel: threading.Event) -> Response | None:
        """GET one page through the HTTP layer, streamed so that cancel is honoured mid-body."""
        with self.http.stream(url, headers={"Accept": ACCEPT}) as (head, chunks):
            body = bytearray()
            for chunk in chunks:
                if cancel.is_set():
                    return None
                body += chunk
        return Response(url=head.url, status=head.status, headers=head.headers, content=bytes(body))
