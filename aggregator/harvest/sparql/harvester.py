"""Harvest DCAT-AP descriptions from a SPARQL 1.1 endpoint.

1. ``COUNT`` the dataset IRIs (``listing.expected_total``, known before the first record) and
   the blank-node datasets;
2. list dataset IRIs by keyset paging: ``FILTER(STR(?d) > "<last>") ORDER BY ?d LIMIT n``
   (never OFFSET: its cost grows with depth and it skips or repeats rows when data changes);
3. for each batch of ``batch_size`` listed IRIs, one SELECT fetches the closures of the whole
   batch (the dataset's triples plus the resources it links to, up to ``depth`` hops, stopping
   at records of their own): see :mod:`aggregator.harvest.sparql._closure`. Each dataset's
   closure becomes one :class:`~aggregator.core.models.RawRecord` (N-Triples or Turtle).

Transport: the SPARQL 1.1 Protocol requests (GET with ``query=``, or a form POST) are built
here and sent with the source's :class:`aggregator.net.client.HttpSession`, so the SSRF guard,
timeouts, retries with ``Retry-After``, size caps and per-host limits apply exactly as for
every other harvester. See docs/protocols/sparql.md.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlencode, urlsplit

from pyoxigraph import RdfFormat, parse, serialize

from aggregator.config import SourceConfig
from aggregator.core.errors import ConfigError, HarvestError
from aggregator.core.models import RawRecord
from aggregator.core.vocab import DCAT, SKOS
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.sparql import _results as results
from aggregator.harvest.sparql._closure import REACHED, BatchGraph, ClosureShape, closure_query
from aggregator.net.client import HttpSession, Response

log = logging.getLogger("aggregator.harvest.sparql")  # the name operators filter on

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
#: the serialisation of each record's payload (option ``construct_format``)
PAYLOAD_FORMATS = ("ntriples", "turtle")
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
    batch_size: int = 100
    parallel: int = 1  # closure queries in flight while a batch is split
    graph: str | None = None
    depth: int = 3
    construct_format: str = "ntriples"
    method: str = "auto"  # GET, POST, or auto: GET unless the URL would exceed MAX_GET_URL
    stop_types: tuple[str, ...] = DEFAULT_STOP_TYPES

    @classmethod
    def from_source(cls, source: SourceConfig) -> SparqlOptions:
        opts: Mapping[str, Any] = source.options
        where = f"sources.{source.name}.options"
        known = {
            "types",
            "page_size",
            "batch_size",
            "parallel",
            "graph",
            "depth",
            "construct_format",
            "method",
        }
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
        batch_size = _int(opts, "batch_size", 100, 1, 1000, where)
        parallel = _int(opts, "parallel", 1, 1, 4, where)
        depth = _int(opts, "depth", 3, 0, 6, where)
        graph = opts.get("graph")
        if graph is not None and (not isinstance(graph, str) or not _absolute_iri(graph)):
            raise ConfigError(f"{where}.graph: expected an absolute IRI")
        fmt = opts.get("construct_format", "ntriples")
        if fmt not in PAYLOAD_FORMATS:
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
        return cls(types, page_size, batch_size, parallel, graph, depth, fmt, method, stop_types)

    @property
    def closure(self) -> ClosureShape:
        return ClosureShape(self.depth, self.stop_types, self.graph)


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


@dataclass(slots=True)
class _Walk:
    expected: int
    started: float
    accounted: int = 0  # yielded, or skipped for a reason that repeats on every run


# -- harvester ------------------------------------------------------------------------------
class SparqlHarvester(Harvester):
    """Dataset descriptions from a SPARQL endpoint, one closure query per batch of datasets."""

    name: ClassVar[str] = "sparql"
    formats: ClassVar[tuple[str, ...]] = ("dcat",)

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
        log.info("%s: %d dataset IRI(s) to fetch from %s", self.source.name, iris, self.source.url)
        if blanks:
            listing.note(
                f"skipped {blanks} dataset(s) identified by a blank node: a blank node "
                "cannot be addressed across SPARQL queries"
            )
        walk = _Walk(expected=iris, started=time.monotonic())
        pool = ThreadPoolExecutor(
            max_workers=opts.parallel, thread_name_prefix=f"sparql-{self.source.name}"
        )
        try:
            # the closure queries of the next ``parallel`` batches run while this one is split
            pending: deque[tuple[list[str], Future[Response]]] = deque()
            for batch in self._batches(opts, request, listing, walk):
                query = closure_query(opts.closure, batch)
                pending.append((batch, pool.submit(self._send, query, results.ACCEPT)))
                if len(pending) > opts.parallel:
                    yield from self._yield_batch(opts, request, listing, walk, *pending.popleft())
            while pending:
                yield from self._yield_batch(opts, request, listing, walk, *pending.popleft())
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        if request.cancel.is_set():
            listing.mark_truncated("cancelled")
            return
        if walk.accounted != iris and listing.truncated_reason is None:
            listing.mark_truncated(
                f"COUNT gave {iris} dataset IRI(s) but keyset paging listed {walk.accounted}"
            )
        listing.mark_complete()

    def _batches(
        self, opts: SparqlOptions, request: HarvestRequest, listing: Listing, walk: _Walk
    ) -> Iterator[list[str]]:
        """Keyset pages of dataset IRIs, cut into batches (until cancelled)."""
        after: str | None = None
        while not request.cancel.is_set():
            page = self._page(opts, after)
            listing.pages += 1
            usable: list[str] = []
            for iri in page:
                if safe_iri(iri):
                    usable.append(iri)
                else:
                    listing.note(f"skipped dataset IRI {iri!r}: it cannot be written in a query")
                    walk.accounted += 1
            for at in range(0, len(usable), opts.batch_size):
                if request.cancel.is_set():
                    return
                yield usable[at : at + opts.batch_size]
            if len(page) < opts.page_size:
                return
            after = page[-1]

    def _yield_batch(
        self,
        opts: SparqlOptions,
        request: HarvestRequest,
        listing: Listing,
        walk: _Walk,
        batch: list[str],
        fetch: Future[Response],
    ) -> Iterator[RawRecord]:
        for iri, record in zip(batch, self._describe(opts, batch, fetch.result()), strict=True):
            if request.cancel.is_set():
                return
            if record is None:
                listing.mark_truncated(f"{iri} was listed but has no triples any more")
                continue
            yield record
            listing.seen += 1
            walk.accounted += 1
        elapsed = time.monotonic() - walk.started
        log.info(
            "%s: %d/%d dataset(s) fetched, %d page(s), %.0f/s",
            self.source.name,
            listing.seen,
            walk.expected,
            listing.pages,
            listing.seen / elapsed if elapsed > 0 else 0.0,
        )

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

    def _describe(
        self, opts: SparqlOptions, batch: Sequence[str], response: Response
    ) -> list[RawRecord | None]:
        """The batch's closure answer split: a record per IRI (``None``: no triples)."""
        variables = ("s", "p", "o", REACHED)
        try:
            if response.media_type == results.TSV:
                rows = results.tsv_rows(response.content, variables)
            elif response.media_type in (results.JSON, "application/json"):
                rows = results.json_rows(response.content, variables)
            else:
                raise ValueError(f"media type {response.media_type or 'none'!r}")
            graph = BatchGraph.from_rows(rows)
        except (ValueError, KeyError, TypeError) as err:
            raise HarvestError(
                f"{self.source.url} did not answer the closure query with SPARQL TSV or JSON "
                f"results ({err}): {response.excerpt}",
                code="malformedResults",
            ) from err
        records: list[RawRecord | None] = []
        for iri in batch:
            lines = graph.closure(f"<{iri}>", opts.depth)
            if not lines:
                records.append(None)
                continue
            payload = "".join(lines).encode()
            media_type = "application/n-triples"
            if opts.construct_format == "turtle":
                quads = parse(payload, RdfFormat.N_TRIPLES)
                payload = serialize(quads, format=RdfFormat.TURTLE) or b""
                media_type = RdfFormat.TURTLE.media_type
            records.append(
                RawRecord(
                    source=self.source.name,
                    local_id=iri,
                    format=self.source.format,
                    payload=payload,
                    media_type=media_type,
                    url=self.source.url,
                    is_collection=False,
                )
            )
        return records

    def _select(self, query: str) -> list[dict[str, Any]]:
        response = self._send(query, RESULTS_JSON)
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

    def _send(self, query: str, accept: str) -> Response:
        """A SPARQL 1.1 Protocol query request (GET ``?query=``, or a form-encoded POST)."""
        get_url = self.source.url + "?" + urlencode({"query": query})
        method = self.options.method
        if method == "auto":
            method = "GET" if len(get_url) <= MAX_GET_URL else "POST"
        headers = {"Accept": accept}
        if method == "GET":
            response = self.http.request("GET", get_url, headers=headers, raise_for_status=False)
        else:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            body = urlencode({"query": query}).encode()
            response = self.http.request(
                "POST", self.source.url, data=body, headers=headers, raise_for_status=False
            )
        if response.status >= 400:
            if response.status >= 500 or response.status == 429:
                raise response.status_error(f"SPARQL endpoint {self.source.url}")
            raise HarvestError(
                f"SPARQL endpoint {self.source.url} refused the query "
                f"(HTTP {response.status}): {response.excerpt}",
                code="sparqlQueryError",
            )
        return response
