"""Harvest DCAT-AP descriptions from a SPARQL 1.1 endpoint.

1. ``COUNT`` the dataset IRIs (``listing.expected_total``) and the blank-node datasets;
2. list dataset IRIs by keyset paging: ``FILTER(STR(?d) > "<last>") ORDER BY ?d LIMIT n``
   (never OFFSET: its cost grows with depth and it skips or repeats rows when data changes);
3. for each IRI, ``CONSTRUCT`` the dataset's triples plus the closure of the resources it links
   to (distributions, agents, contact points, periods, locations, checksums, identifiers, blank
   nodes) up to ``depth`` hops, and yield the response bytes as received, one
   :class:`~aggregator.models.RawRecord` per dataset.

Transport: SPARQLWrapper builds every protocol request (query encoding, GET or form POST,
headers) but never sends it: the request is handed to :class:`aggregator.http.HttpSession`, so
the SSRF guard, timeouts, retries with ``Retry-After``, size caps and per-host limits all apply
exactly as for every other harvester. See docs/protocols/sparql.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

from SPARQLWrapper import GET, JSON, POST, TURTLE, SPARQLWrapper

from aggregator.config import SourceConfig
from aggregator.errors import ConfigError, HarvestError
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.rdf_dump import SYNTAXES, RdfSyntax, syntax_for_media_type
from aggregator.http import HttpSession, Response
from aggregator.models import RawRecord
from aggregator.vocab import DCAT, SKOS

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
TYPE_NAMES: Mapping[str, str] = {
    "Dataset": DCAT + "Dataset",
    "DataService": DCAT + "DataService",
    "DatasetSeries": DCAT + "DatasetSeries",
}
#: resources reached by a link whose description is not pulled into a dataset's record: they
#: are records (or vocabularies) of their own, and expanding them would drag in the catalogue.
#: DataService is among them because the ``dcat`` mapper makes a record of every Dataset,
#: DataService and DatasetSeries it finds in a payload: one payload must hold one of them.
DEFAULT_STOP_TYPES: tuple[str, ...] = (
    DCAT + "Catalog",
    DCAT + "Dataset",
    DCAT + "DatasetSeries",
    DCAT + "DataService",
    SKOS + "ConceptScheme",
)
CONSTRUCT_ACCEPT: Mapping[str, str] = {
    "ntriples": "application/n-triples, text/plain;q=0.5, text/turtle;q=0.3",
    "turtle": "text/turtle, application/n-triples;q=0.5",
}
RESULTS_JSON = "application/sparql-results+json"
#: with ``method = "auto"``, queries whose GET URL would be longer than this are POSTed
MAX_GET_URL = 2000
_IRI_FORBIDDEN = frozenset('<>"{}|^`\\')


def safe_iri(iri: str) -> bool:
    """True when ``iri`` can be written as ``<iri>`` in a query without breaking out of it."""
    return bool(iri) and not any(c in _IRI_FORBIDDEN or ord(c) <= 0x20 for c in iri)


def string_literal(value: str) -> str:
    """A SPARQL string literal for ``value`` (quotes, backslashes and newlines escaped)."""
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


@dataclass(frozen=True, slots=True)
class SparqlOptions:
    types: tuple[str, ...] = (DCAT + "Dataset",)
    page_size: int = 500
    graph: str | None = None
    depth: int = 3
    construct_format: str = "ntriples"
    method: str = "auto"  # GET, POST, or auto: GET unless the URL would exceed MAX_GET_URL
    stop_types: tuple[str, ...] = DEFAULT_STOP_TYPES

    @classmethod
    def from_source(cls, source: SourceConfig) -> SparqlOptions:
        opts: Mapping[str, Any] = source.options
        where = f"sources.{source.name}.options"
        known = {"types", "page_size", "graph", "depth", "construct_format", "method"}
        unknown = set(opts) - known - {"stop_types"}
        if unknown:
            raise ConfigError(f"{where}: unknown option(s) {', '.join(sorted(unknown))}")
        if urlsplit(source.url).query:
            raise ConfigError(
                f"sources.{source.name}.url: a SPARQL endpoint URL must not carry a query "
                "string (use the 'graph' option to choose a named graph)"
            )
        types = tuple(_type_iri(t, where) for t in _str_list(opts.get("types", ["Dataset"]), where))
        if not types:
            raise ConfigError(f"{where}.types: name at least one type")
        page_size = _int(opts, "page_size", 500, 1, 10_000, where)
        depth = _int(opts, "depth", 3, 0, 6, where)
        graph = opts.get("graph")
        if graph is not None and (not isinstance(graph, str) or not _absolute_iri(graph)):
            raise ConfigError(f"{where}.graph: expected an absolute IRI")
        fmt = opts.get("construct_format", "ntriples")
        if fmt not in CONSTRUCT_ACCEPT:
            raise ConfigError(f"{where}.construct_format: expected one of ntriples, turtle")
        method = str(opts.get("method", "auto"))
        method = method if method == "auto" else method.upper()
        if method not in ("auto", "GET", "POST"):
            raise ConfigError(f"{where}.method: expected auto, GET or POST")
        stop_types = DEFAULT_STOP_TYPES
        if "stop_types" in opts:
            stop_types = tuple(_str_list(opts["stop_types"], where))
            if not all(_absolute_iri(t) for t in stop_types):
                raise ConfigError(f"{where}.stop_types: expected absolute IRIs")
        return cls(types, page_size, graph, depth, fmt, method, stop_types)


def _str_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return list(value)


def _type_iri(name: str, where: str) -> str:
    short = name.removeprefix("dcat:").removeprefix(DCAT)
    if short not in TYPE_NAMES:
        raise ConfigError(f"{where}.types: {name!r} is not one of {', '.join(TYPE_NAMES)}")
    return TYPE_NAMES[short]


def _int(opts: Mapping[str, Any], key: str, default: int, low: int, high: int, where: str) -> int:
    value = opts.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(f"{where}.{key}: expected an integer from {low} to {high}")
    return value


def _absolute_iri(value: str) -> bool:
    return safe_iri(value) and bool(urlsplit(value).scheme)


# -- queries --------------------------------------------------------------------------------
def _in_graph(opts: SparqlOptions, pattern: str) -> str:
    return f"GRAPH <{opts.graph}> {{ {pattern} }}" if opts.graph else pattern


def _values(var: str, iris: Sequence[str]) -> str:
    return f"VALUES ?{var} {{ " + " ".join(f"<{i}>" for i in iris) + " }"


def count_query(opts: SparqlOptions) -> str:
    """Distinct dataset subjects, split into IRIs and blank nodes."""
    return (
        "SELECT ?iri (COUNT(DISTINCT ?d) AS ?n) WHERE { "
        + _in_graph(opts, "?d a ?t .")
        + f" {_values('t', opts.types)} }} GROUP BY (isIRI(?d) AS ?iri)"
    )


def page_query(opts: SparqlOptions, after: str | None) -> str:
    """One keyset page of dataset IRIs after ``after`` (exclusive), in IRI order."""
    keyset = f" FILTER(STR(?d) > {string_literal(after)})" if after is not None else ""
    return (
        "SELECT DISTINCT ?d WHERE { "
        + _in_graph(opts, "?d a ?t .")
        + f" {_values('t', opts.types)} FILTER(isIRI(?d)){keyset} }}"
        + f" ORDER BY ?d LIMIT {opts.page_size}"
    )


def construct_query(opts: SparqlOptions, iri: str) -> str:
    """The dataset's triples plus the descriptions of nodes up to ``opts.depth`` links away.

    A link is followed unless it is ``rdf:type``, points back to the dataset, ends at a
    literal, or ends at a node typed with one of ``opts.stop_types``.
    """
    root = f"<{iri}>"
    stops = " ".join(f"<{t}>" for t in opts.stop_types)
    template = [f"{root} ?p0 ?o0 ."]
    branches = [f"{{ {root} ?p0 ?o0 . }}"]
    path: list[str] = []
    for k in range(1, opts.depth + 1):
        prev = root if k == 1 else f"?n{k - 1}"
        step = (
            f"{prev} ?l{k} ?n{k} . FILTER(!isLiteral(?n{k}) && ?l{k} != <{RDF_TYPE}>"
            f" && !sameTerm(?n{k}, {root}))"
        )
        if stops:
            step += f" FILTER NOT EXISTS {{ ?n{k} a ?s{k} . VALUES ?s{k} {{ {stops} }} }}"
        path.append(step)
        template.append(f"?n{k} ?p{k} ?o{k} .")
        branches.append("{ " + " ".join(path) + f" ?n{k} ?p{k} ?o{k} . }}")
    where = " UNION ".join(branches)
    return "CONSTRUCT { " + " ".join(template) + " } WHERE { " + _in_graph(opts, where) + " }"


# -- harvester ------------------------------------------------------------------------------
class SparqlHarvester(Harvester):
    """Dataset descriptions from a SPARQL endpoint, one CONSTRUCT per dataset."""

    name: ClassVar[str] = "sparql"
    formats: ClassVar[tuple[str, ...]] = ("dcat",)
    supports_incremental: ClassVar[bool] = False

    def __init__(self, source: SourceConfig, http: HttpSession) -> None:
        super().__init__(source, http)
        self.options = SparqlOptions.from_source(source)

    @classmethod
    def check_config(cls, source: SourceConfig) -> None:
        SparqlOptions.from_source(source)

    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        opts = self.options
        if request.cancel.is_set():
            listing.mark_truncated("cancelled")
            return
        iris, blanks = self._count(opts)
        listing.expected_total = iris
        if blanks:
            listing.note(
                f"skipped {blanks} dataset(s) identified by a blank node: a blank node "
                "cannot be addressed across SPARQL queries"
            )
        after: str | None = None
        accounted = 0  # yielded, or skipped for a reason that repeats on every run
        while True:
            if request.cancel.is_set():
                listing.mark_truncated("cancelled")
                return
            page = self._page(opts, after)
            listing.pages += 1
            for iri in page:
                if request.cancel.is_set():
                    listing.mark_truncated("cancelled")
                    return
                if not safe_iri(iri):
                    listing.note(f"skipped dataset IRI {iri!r}: it cannot be written in a query")
                    accounted += 1
                    continue
                record = self._describe(opts, iri)
                if record is None:
                    listing.mark_truncated(f"{iri} was listed but its CONSTRUCT was empty")
                    continue
                yield record
                listing.seen += 1
                accounted += 1
            if len(page) < opts.page_size:
                break
            after = page[-1]
        if accounted != iris and listing.truncated_reason is None:
            listing.mark_truncated(
                f"COUNT gave {iris} dataset IRI(s) but keyset paging listed {accounted}"
            )
        listing.mark_complete()

    # -- the three query kinds ---------------------------------------------------------------
    def _count(self, opts: SparqlOptions) -> tuple[int, int]:
        rows = self._select(count_query(opts))
        iris = blanks = 0
        for row in rows:
            try:
                n = int(row["n"]["value"])
            except (KeyError, TypeError, ValueError) as err:
                raise HarvestError(
                    f"COUNT query on {self.source.url} gave a malformed row: {row!r}",
                    code="malformedResults",
                ) from err
            if row.get("iri", {}).get("value") in ("true", "1"):
                iris += n
            else:
                blanks += n
        return iris, blanks

    def _page(self, opts: SparqlOptions, after: str | None) -> list[str]:
        iris: list[str] = []
        for row in self._select(page_query(opts, after)):
            cell = row.get("d")
            if not isinstance(cell, dict) or cell.get("type") != "uri":
                raise HarvestError(
                    f"dataset listing on {self.source.url} gave a non-IRI row: {row!r}",
                    code="malformedResults",
                )
            iri = str(cell.get("value", ""))
            last = iris[-1] if iris else after
            if last is not None and not iri > last:
                raise HarvestError(
                    f"{self.source.url} ignores keyset paging: {iri!r} came after {last!r}",
                    code="badPaging",
                )
            iris.append(iri)
        return iris

    def _describe(self, opts: SparqlOptions, iri: str) -> RawRecord | None:
        query = construct_query(opts, iri)
        response, url = self._send(query, TURTLE, CONSTRUCT_ACCEPT[opts.construct_format])
        syntax = _construct_syntax(response)
        if not response.content.strip():
            return None
        return RawRecord(
            source=self.source.name,
            local_id=iri,
            format=self.source.format,
            payload=response.content,
            media_type=syntax.media_type,
            url=url,
            is_collection=False,
        )

    def _select(self, query: str) -> list[dict[str, Any]]:
        response, _ = self._send(query, JSON, RESULTS_JSON)
        try:
            doc = json.loads(response.content)
            rows = doc["results"]["bindings"]
        except (ValueError, KeyError, TypeError) as err:
            raise HarvestError(
                f"{self.source.url} did not answer with SPARQL JSON results: "
                f"{response.content[:200]!r}",
                code="malformedResults",
            ) from err
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise HarvestError(
                f"{self.source.url} sent malformed SPARQL JSON results", code="malformedResults"
            )
        return rows

    def _send(self, query: str, return_format: str, accept: str) -> tuple[Response, str]:
        """Build the protocol request with SPARQLWrapper; send it with the source's HttpSession."""
        opts = self.options
        wrapper = SPARQLWrapper(self.source.url, agent=self.http.settings.user_agent)
        wrapper.setOnlyConneg(True)  # content negotiation only, no format=/output= parameters
        wrapper.setMethod(POST if opts.method == "POST" else GET)
        wrapper.setReturnFormat(return_format)
        wrapper.setQuery(query)
        wrapper.addCustomHttpHeader("Accept", accept)
        built = wrapper._createRequest()
        if opts.method == "auto" and len(built.full_url) > MAX_GET_URL:
            wrapper.setMethod(POST)
            built = wrapper._createRequest()
        url: str = built.full_url
        headers = {name: str(value) for name, value in built.header_items()}
        data: bytes | None = built.data if isinstance(built.data, bytes) else None
        response = self.http.request(
            built.get_method(), url, data=data, headers=headers, raise_for_status=False
        )
        if response.status >= 400:
            if response.status >= 500 or response.status == 429:
                raise response.status_error(f"SPARQL endpoint {self.source.url}")
            raise HarvestError(
                f"SPARQL endpoint {self.source.url} refused the query "
                f"(HTTP {response.status}): {response.excerpt}",
                code="sparqlQueryError",
            )
        return response, url


def _construct_syntax(response: Response) -> RdfSyntax:
    if response.media_type == "text/plain":  # the pre-2014 N-Triples media type
        return SYNTAXES["ntriples"]
    syntax = syntax_for_media_type(response.media_type)
    if syntax is None:
        raise HarvestError(
            f"CONSTRUCT answer from {response.url} has media type "
            f"{response.media_type or 'none'!r}, not an RDF serialisation",
            code="unexpectedMediaType",
        )
    return syntax
