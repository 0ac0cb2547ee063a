"""The SPARQL worker process: runs one query at a time on a read-only store snapshot.

Started by :class:`aggregator.serve.sparql_pool.WorkerPool` as
``python -m aggregator.serve.sparql_worker FD PARENT_PID``, where FD is its end of a Unix
socket pair. Before anything else it asks to die with its parent and denies itself IP
networking (:mod:`aggregator.serve.sparql_sandbox`). It answers a ready frame, then serves
requests until the socket closes. The parent kills it at the query deadline: pyoxigraph's
``query()`` cannot be interrupted, a process can.

Frames: a 4-byte big-endian length, then the payload. A request is a JSON object (see
:func:`execute`); a response is a 4-byte header length, a JSON header (``status`` plus
``media_type`` or ``message``) and the body. The body is always complete: results are
serialised in full here, and the row cap is checked while serialising, so the web layer never
starts a response it might have to truncate.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import struct
import sys
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
from aggregator.serve.sparql_sandbox import deny_network, die_with_parent

_LEN = struct.Struct(">I")
MAX_FRAME = 1 << 31

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


def recv_exact(sock: socket.socket, size: int) -> bytes | None:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return bytes(buf)


def recv_frame(sock: socket.socket) -> bytes | None:
    head = recv_exact(sock, 4)
    if head is None:
        return None
    return recv_exact(sock, _LEN.unpack(head)[0])


def send_response(sock: socket.socket, header: dict[str, Any], body: bytes = b"") -> None:
    meta = json.dumps(header).encode()
    sock.sendall(_LEN.pack(4 + len(meta) + len(body)) + _LEN.pack(len(meta)) + meta + body)


def _error(status: int, message: str) -> tuple[dict[str, Any], bytes]:
    return {"status": status, "message": message}, b""


def execute(store: Store, req: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """Run one request. Keys: ``query``; ``results`` / ``graph`` the negotiated media types
    for SELECT/ASK and CONSTRUCT/DESCRIBE (None: not acceptable); ``default_graph`` /
    ``named_graphs`` IRI lists or None; ``max_rows``; ``check_service``."""
    query: str = req["query"]
    if req.get("check_service"):
        try:  # parse only: no result is read, and the text cannot name SERVICE any more
            Store().query(neutralised(query))
        except SyntaxError as err:
            return _error(400, f"malformed query, or a SERVICE clause (not allowed): {err}")
    kwargs: dict[str, Any] = {}
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
        writer = _LineCappedWriter(max_rows + 1)  # + the header line
        try:
            result.serialize(writer, format=QueryResultsFormat.TSV)
        except TooManyRows:
            return _error(400, too_many)
        body = writer.getvalue()
        fmt = RESULT_FORMATS[media]
        if fmt != QueryResultsFormat.TSV:
            parsed = parse_query_results(body, format=QueryResultsFormat.TSV)
            body = parsed.serialize(format=fmt) or b""
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
        triples = parse(body, format=RdfFormat.N_TRIPLES)
        prefixes = PREFIXES if rdf_format in (RdfFormat.TURTLE, RdfFormat.RDF_XML) else None
        body = serialize(triples, format=rdf_format, prefixes=prefixes) or b""
    return {"status": 200, "media_type": media}, body


def serve(sock: socket.socket, sandboxed: bool) -> None:
    send_response(sock, {"ready": True, "sandboxed": sandboxed, "pid": os.getpid()})
    store: Store | None = None
    opened: str | None = None
    while True:
        frame = recv_frame(sock)
        if frame is None:
            return
        req = json.loads(frame)
        try:
            if req["snapshot"] != opened:
                store = None  # close the old snapshot before opening the new one
                store = Store.read_only(req["snapshot"])
                opened = req["snapshot"]
            assert store is not None
            header, body = execute(store, req)
        except (OSError, ValueError, TypeError) as err:
            header, body = _error(500, f"query failed: {err}")
        send_response(sock, header, body)


def main(argv: list[str]) -> int:
    fd, parent = int(argv[1]), int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    die_with_parent(signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request above took effect
        return 1
    sandboxed = deny_network()  # before the store opens and any thread starts
    sock = socket.socket(fileno=fd)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        serve(sock, sandboxed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
