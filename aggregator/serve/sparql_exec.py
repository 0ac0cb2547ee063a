"""Running one SPARQL query on a read-only store and serialising its complete result.

:func:`execute` is pure with respect to the web layer: it gets a request dict and returns a
header dict (``status`` plus ``media_type`` or ``message``) and the body. The body is always
complete: results are serialised in full here, and the row cap is checked while serialising,
so the web layer never starts a response it might have to truncate.

Row cap, cheaply: SELECT results are written straight in the negotiated format while the
writer counts bytes; a result smaller than ``max_rows`` times the smallest possible row of
that format cannot have too many rows. Only a result past that size is evaluated again as
TSV, where each row is one line and the count is exact (``_exact_solutions``).
"""

from __future__ import annotations

import io
from typing import Any

from pyoxigraph import (
    NamedNode,
    QueryBoolean,
    QueryResultsFormat,
    QuerySolutions,
    RdfFormat,
    Store,
    parse,
    parse_query_results,
    serialize,
)

from aggregator.serve.sparql_formats import GRAPH_FORMATS, RESULT_FORMATS
from aggregator.serve.sparql_guard import neutralised

# Prefixes used when writing Turtle and RDF/XML: shorter, friendlier output.
PREFIXES = {
    "adms": "http://www.w3.org/ns/adms#",
    "dcat": "http://www.w3.org/ns/dcat#",
    "dct": "http://purl.org/dc/terms/",
    "foaf": "http://xmlns.com/foaf/0.1/",
    "prov": "http://www.w3.org/ns/prov#",
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "skos": "http://www.w3.org/2004/02/skos/core#",
    "spdx": "http://spdx.org/rdf/terms#",
    "vcard": "http://www.w3.org/2006/vcard/ns#",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
}


class TooManyRows(Exception):
    pass


class _LineCappedWriter(io.BytesIO):
    """A binary sink for pyoxigraph's serialisers that stops once it holds more than
    ``max_lines`` lines (TSV results and N-Triples hold one row or triple per line)."""

    def __init__(self, max_lines: int) -> None:
        super().__init__()
        self.max_lines = max_lines
        self.lines = 0

    def write(self, data: bytes) -> int:  # type: ignore[override]
        chunk = bytes(data)
        self.lines += chunk.count(b"\n")
        if self.lines > self.max_lines:
            raise TooManyRows
        return super().write(chunk)


class _Oversize(Exception):
    pass


class _ByteCappedWriter(io.BytesIO):
    """A binary sink that stops once it holds more than ``max_bytes`` bytes."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.room = max_bytes

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.room -= len(data)
        if self.room < 0:
            raise _Oversize
        return super().write(data)


# The fewest bytes one more solution adds in each format ("{}," in JSON, "<result/>" in
# XML, a line end in CSV): below max_rows times this, a result is within the row cap.
_MIN_ROW_BYTES = {QueryResultsFormat.JSON: 2, QueryResultsFormat.XML: 9, QueryResultsFormat.CSV: 1}


def _error(status: int, message: str) -> tuple[dict[str, Any], bytes]:
    return {"status": status, "message": message}, b""


def execute(store: Store, req: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """Run one request. Keys: ``query``; ``results`` / ``graph`` the negotiated media types
    for SELECT/ASK and CONSTRUCT/DESCRIBE (None: not acceptable); ``default_graph`` /
    ``named_graphs`` IRI lists or None; ``max_rows``; ``check_service``; ``base_iri`` the IRI
    relative IRIs resolve against when the query has no BASE (None: relative IRIs are an
    error)."""
    query: str = req["query"]
    base_iri: str | None = req.get("base_iri")
    if req.get("check_service"):
        try:  # parse only: no result is read, and the text cannot name SERVICE any more
            Store().query(neutralised(query), base_iri=base_iri)
        except SyntaxError as err:
            return _error(400, f"malformed query, or a SERVICE clause (not allowed): {err}")
    kwargs: dict[str, Any] = {"base_iri": base_iri}
    if req.get("default_graph") is None and req.get("named_graphs") is None:
        kwargs["use_default_graph_as_union"] = True
    else:  # the protocol's dataset replaces the query's: both lists, missing ones empty
        kwargs["default_graph"] = [NamedNode(i) for i in req.get("default_graph") or ()]
        kwargs["named_graphs"] = [NamedNode(i) for i in req.get("named_graphs") or ()]
    try:
        result = store.query(query, **kwargs)
    except SyntaxError as err:
        return _error(400, f"malformed query: {err}")
    max_rows: int = req["max_rows"]
    too_many = (
        f"the result has more than {max_rows} rows, the limit of this endpoint:"
        " narrow the query or page through it with LIMIT and OFFSET"
    )
    if isinstance(result, QueryBoolean):
        media = req.get("results")
        if media is None:
            return _error(406, "no acceptable media type for an ASK result")
        return {"status": 200, "media_type": media}, result.serialize(
            format=RESULT_FORMATS[media]
        ) or b""
    if isinstance(result, QuerySolutions):
        media = req.get("results")
        if media is None:
            return _error(406, "no acceptable media type for SELECT results")
        fmt = RESULT_FORMATS[media]
        if fmt in _MIN_ROW_BYTES:
            small = _ByteCappedWriter(max_rows * _MIN_ROW_BYTES[fmt])
            try:
                result.serialize(small, format=fmt)
                return {"status": 200, "media_type": media}, small.getvalue()
            except _Oversize:  # perhaps too many rows: count them exactly
                result = store.query(query, **kwargs)
                assert isinstance(result, QuerySolutions)
        body = _exact_solutions(result, fmt, max_rows)
        if body is None:
            return _error(400, too_many)
        return {"status": 200, "media_type": media}, body
    media = req.get("graph")
    if media is None:
        return _error(406, "no acceptable media type for a CONSTRUCT or DESCRIBE result")
    writer = _LineCappedWriter(max_rows)
    try:
        serialize(result, writer, RdfFormat.N_TRIPLES)
    except TooManyRows:
        return _error(400, too_many.replace("rows", "triples"))
    body = writer.getvalue()
    rdf_format = GRAPH_FORMATS[media]
    if rdf_format != RdfFormat.N_TRIPLES:
        triples = parse(body, format=RdfFormat.N_TRIPLES, lenient=True)  # pyoxigraph's own output
        prefixes = PREFIXES if rdf_format in (RdfFormat.TURTLE, RdfFormat.RDF_XML) else None
        body = serialize(triples, format=rdf_format, prefixes=prefixes) or b""
    return {"status": 200, "media_type": media}, body


def _exact_solutions(
    result: QuerySolutions, fmt: QueryResultsFormat, max_rows: int
) -> bytes | None:
    """The solutions in ``fmt``, or None past ``max_rows``: counted as TSV lines."""
    writer = _LineCappedWriter(max_rows + 1)  # + the header line
    try:
        result.serialize(writer, format=QueryResultsFormat.TSV)
    except TooManyRows:
        return None
    body = writer.getvalue()
    if fmt != QueryResultsFormat.TSV:
        parsed = parse_query_results(body, format=QueryResultsFormat.TSV)
        body = parsed.serialize(format=fmt) or b""
    return body
