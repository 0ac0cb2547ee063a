"""Safe parsing of an RDF payload (hostile input) into pyoxigraph quads, for the dcat mapper.

What is checked before pyoxigraph sees the bytes, and why (measured on pyoxigraph 0.5):

* **RDF/XML with a DOCTYPE is refused** (:class:`UnsafeInputError`). pyoxigraph's RDF/XML
  parser expands internal entities (``<!ENTITY a "x">`` then ``&a;`` becomes ``x``), so a
  billion-laughs document would be expanded; external entities are not loaded, but nothing
  legitimate in RDF/XML needs a DOCTYPE, so any declaration is refused.
* **Truncated RDF/XML is refused** (:class:`ParseError`). pyoxigraph returns the triples read
  so far, without an error, when a document ends inside open elements; the root element must
  be closed.
* **RDF/XML in another encoding than UTF-8** (declared or by UTF-16 byte-order mark) is
  transcoded to UTF-8 first: pyoxigraph's RDF/XML parser only reads UTF-8.
* **JSON-LD with a remote ``@context`` or ``@import`` is refused** (:class:`ParseError`) before
  parsing. pyoxigraph has no document loader unless one is given (none is), so it could not
  fetch anyway; the pre-check gives a clear message and keeps that guarantee independent of
  the library.

Every pyoxigraph syntax error becomes :class:`ParseError` with the line and column.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

from pyoxigraph import DefaultGraph, Quad, RdfFormat, parse

from aggregator.errors import ParseError, UnsafeInputError

_MEDIA_TYPES: dict[str, RdfFormat] = {
    "text/turtle": RdfFormat.TURTLE,
    "application/x-turtle": RdfFormat.TURTLE,
    "application/rdf+xml": RdfFormat.RDF_XML,
    "application/xml": RdfFormat.RDF_XML,
    "text/xml": RdfFormat.RDF_XML,
    "application/ld+json": RdfFormat.JSON_LD,
    "application/json": RdfFormat.JSON_LD,
    "application/n-triples": RdfFormat.N_TRIPLES,
}
_EXTENSIONS: dict[str, RdfFormat] = {
    "ttl": RdfFormat.TURTLE,
    "rdf": RdfFormat.RDF_XML,
    "xml": RdfFormat.RDF_XML,
    "owl": RdfFormat.RDF_XML,
    "jsonld": RdfFormat.JSON_LD,
    "json": RdfFormat.JSON_LD,
    "nt": RdfFormat.N_TRIPLES,
}
_XML_START = re.compile(rb"<(?:\?xml|!--|[A-Za-z_][\w.-]*(?::[A-Za-z_][\w.-]*)?[\s/>])")
_DOCTYPE = re.compile(rb"<!\s*(?:DOCTYPE|ENTITY)", re.IGNORECASE)
_XML_DECL = re.compile(rb"^<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"']")
_ROOT = re.compile(rb"<([A-Za-z_][\w.-]*(?::[A-Za-z_][\w.-]*)?)")
_BOM_UTF8 = b"\xef\xbb\xbf"


def detect_format(payload: bytes, media_type: str | None, url: str | None) -> RdfFormat:
    """The RDF format: from the media type, else the URL's extension, else the first bytes."""
    if media_type:
        fmt = _MEDIA_TYPES.get(media_type.split(";", 1)[0].strip().lower())
        if fmt is not None:
            return fmt
    if url:
        path = url.split("?", 1)[0].split("#", 1)[0]
        last = path.rsplit("/", 1)[-1]
        if "." in last:
            fmt = _EXTENSIONS.get(last.rsplit(".", 1)[-1].lower())
            if fmt is not None:
                return fmt
    head = payload[:512].removeprefix(_BOM_UTF8).lstrip()
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or _XML_START.match(head):
        return RdfFormat.RDF_XML
    if head.startswith((b"{", b"[")):
        return RdfFormat.JSON_LD
    return RdfFormat.TURTLE  # Turtle also reads N-Triples


def _to_utf8(payload: bytes, where: str) -> bytes:
    """RDF/XML as UTF-8 (pyoxigraph reads nothing else), from a BOM or the XML declaration."""
    if payload.startswith(_BOM_UTF8):
        return payload[3:]
    encoding: str | None = None
    if payload.startswith((b"\xff\xfe", b"\xfe\xff")):
        encoding = "utf-16"
    else:
        decl = _XML_DECL.match(payload)
        if decl is not None:
            encoding = decl.group(1).decode("ascii")
    if encoding is None:
        return payload
    try:
        codec = codecs.lookup(encoding)
    except LookupError as err:
        raise ParseError(f"RDF/XML{where}: unknown encoding {encoding!r}") from err
    if codec.name == "utf-8":
        return payload
    try:
        text = payload.decode(codec.name)
    except UnicodeDecodeError as err:
        raise ParseError(f"RDF/XML{where}: not valid {encoding}: {err.reason}") from err
    if text.startswith("<?xml"):
        end = text.find("?>")
        text = '<?xml version="1.0" encoding="UTF-8"' + text[end:] if end > 0 else text
    return text.encode("utf-8")


def check_rdf_xml(payload: bytes, where: str = "") -> bytes:
    """Refuse DOCTYPE/ENTITY declarations and truncated documents; return UTF-8 bytes."""
    data = _to_utf8(payload, where)
    if _DOCTYPE.search(data):
        raise UnsafeInputError(f"RDF/XML{where} with a DOCTYPE or ENTITY declaration is refused")
    # The root element's name, after the prolog (declaration, comments, PIs, whitespace).
    pos = 0
    while True:
        while pos < len(data) and data[pos : pos + 1].isspace():
            pos += 1
        if data.startswith(b"<?", pos):
            end = data.find(b"?>", pos)
        elif data.startswith(b"<!--", pos):
            end = data.find(b"-->", pos)
        else:
            break
        if end < 0:
            raise ParseError(f"RDF/XML{where}: document ends inside its prolog")
        pos = end + 2
    root = _ROOT.match(data, pos)
    if root is None:
        if pos >= len(data):
            return data  # empty document: no triples, reported as "no dataset" by the mapper
        raise ParseError(f"RDF/XML{where}: no root element")
    tail = _strip_tail(data[-4096:])
    name = re.escape(root.group(1))
    start_end = data.find(b">", root.end())
    empty_root = start_end > 0 and data[start_end - 1 : start_end] == b"/"
    if not (re.search(rb"</" + name + rb"\s*>$", tail) or (empty_root and tail.endswith(b"/>"))):
        line = data.count(b"\n") + 1
        raise ParseError(
            f"RDF/XML{where} is truncated: root element <{root.group(1).decode()}> "
            f"is not closed at the end of the document (line {line})"
        )
    return data


def _strip_tail(tail: bytes) -> bytes:
    """Drop trailing whitespace, comments and processing instructions after the root element."""
    while True:
        tail = tail.rstrip()
        if tail.endswith(b"-->"):
            start = tail.rfind(b"<!--")
        elif tail.endswith(b"?>"):
            start = tail.rfind(b"<?")
        else:
            return tail
        if start < 0:
            return tail
        tail = tail[:start]


def _remote_context(node: Any) -> str | None:
    """The first remote context reference (a string @context or @import) in a JSON-LD tree."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key == "@context":
                    refs = value if isinstance(value, list) else [value]
                    for ref in refs:
                        if isinstance(ref, str):
                            return ref
                elif key == "@import" and isinstance(value, str):
                    return value
                if isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))
    return None


def check_json_ld(payload: bytes, where: str = "") -> None:
    """Refuse JSON-LD that needs a remote context; report malformed JSON with its position."""
    try:
        tree = json.loads(payload)
    except json.JSONDecodeError as err:
        raise ParseError(
            f"malformed JSON-LD{where} at line {err.lineno} column {err.colno}: {err.msg}"
        ) from err
    except (UnicodeDecodeError, RecursionError) as err:
        raise ParseError(f"malformed JSON-LD{where}: {err}") from err
    ref = _remote_context(tree)
    if ref is not None:
        raise ParseError(
            f"JSON-LD{where} refers to the remote @context {ref!r}, which is never fetched "
            "(no network access while mapping); embed the context in the document"
        )


_NAMES = {
    RdfFormat.TURTLE: "Turtle",
    RdfFormat.RDF_XML: "RDF/XML",
    RdfFormat.JSON_LD: "JSON-LD",
    RdfFormat.N_TRIPLES: "N-Triples",
}


def parse_payload(
    payload: bytes, media_type: str | None, url: str | None
) -> tuple[RdfFormat, list[Quad]]:
    """Parse a payload into default-graph quads after the safety checks above."""
    where = f" ({url})" if url else ""
    fmt = detect_format(payload, media_type, url)
    if fmt == RdfFormat.RDF_XML:
        payload = check_rdf_xml(payload, where)
    elif fmt == RdfFormat.JSON_LD:
        check_json_ld(payload, where)
    try:
        quads = list(parse(payload, format=fmt, base_iri=url or None))
    except SyntaxError as err:
        raise ParseError(f"{_NAMES.get(fmt, 'RDF')} syntax error{where}: {err.msg}") from err
    except ValueError as err:  # e.g. an invalid base IRI
        raise ParseError(f"cannot parse{where}: {err}") from err
    if fmt == RdfFormat.JSON_LD and any(not isinstance(q.graph_name, DefaultGraph) for q in quads):
        quads = [Quad(q.subject, q.predicate, q.object) for q in quads]  # merge named graphs
    return fmt, quads
