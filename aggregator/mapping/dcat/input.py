"""Safe parsing of an RDF payload (hostile input) into pyoxigraph quads, for the dcat mapper.

What is checked before pyoxigraph sees the bytes, and why (measured on pyoxigraph 0.5):

* **RDF/XML DOCTYPEs: internal string entities only.** The common
  ``<!ENTITY xsd "http://www.w3.org/2001/XMLSchema#">`` (used as ``rdf:datatype="&xsd;date"``)
  is expanded by :func:`aggregator.core.xml.expand_internal_entities`, with limits (an entity bomb
  is refused with :class:`UnsafeInputError`); an external DTD, an external or parameter entity
  or any other declaration is refused. pyoxigraph's own parser would expand internal entities
  without limits, so it never sees a DOCTYPE.
* **One broken node loses only itself** (:mod:`aggregator.mapping.rdf_xml`): RDF/XML that does
  not parse whole, or holds a character XML forbids (a NUL, which pyoxigraph would accept), is
  read node by node; the nodes that fail are dropped and listed (``dropped``, with line and
  column), the mapper reports them.
* **Truncated RDF/XML is refused** (:class:`ParseError`). pyoxigraph returns the triples read
  so far, without an error, when a document ends inside open elements; the root element must
  be closed.
* **RDF/XML in another encoding than UTF-8** (declared or by UTF-16 byte-order mark) is
  transcoded to UTF-8 first: pyoxigraph's RDF/XML parser only reads UTF-8.
* **JSON-LD contexts are never fetched.** A remote ``@context`` / ``@import`` whose URL is one
  of the usual DCAT-AP / DCAT contexts is replaced by our own copy
  (:mod:`aggregator.mapping.dcat._contexts`); any other remote context is refused
  (:class:`ParseError`) before parsing. pyoxigraph has no document loader unless one is given
  (none is), so it could not fetch anyway; the pre-check gives a clear message and keeps that
  guarantee independent of the library. Keys that no context defines are listed (JSON-LD
  drops them silently) so that the mapper can report them.
* **Illegal IRIs are repaired, not refused.** An IRI with spaces, quotes, braces ... makes the
  strict parser fail; the document is then parsed again leniently and every illegal IRI is
  percent-encoded (the mapper keeps the original string as ``dct:identifier``). JSON-LD is
  always parsed leniently: its strict mode drops triples with illegal IRIs without an error.

Every pyoxigraph syntax error becomes :class:`ParseError` with the line and column.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass, field
from typing import Any

from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad, RdfFormat, parse

from aggregator.core.errors import ParseError
from aggregator.core.input_limits import DEFAULT_LIMITS, InputLimitError, InputLimits
from aggregator.core.xml import expand_internal_entities
from aggregator.mapping.dcat._contexts import known_context
from aggregator.mapping.rdf_xml import DroppedNode, read_rdf_xml

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
    """UTF-8 bytes with internal entities expanded; refuse unsafe DOCTYPEs and truncation."""
    # a DOCTYPE in the prolog only (aggregator.core.xml.scan_prolog): "<!DOCTYPE html>" inside a
    # literal is content, kept as it is
    data = expand_internal_entities(_to_utf8(payload, where), where)
    # The root element's name, after the prolog (declaration, comments, PIs, whitespace).
    pos = 0
    while True:
        while pos < len(data) and data[pos : pos + 1].isspace():
            pos += 1
        if data.startswith(b"<?", pos):
            end, close = data.find(b"?>", pos), 2
        elif data.startswith(b"<!--", pos):
            end, close = data.find(b"-->", pos), 3
        else:
            break
        if end < 0:
            raise ParseError(f"RDF/XML{where}: document ends inside its prolog")
        pos = end + close
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


def _resolve_contexts(tree: Any) -> tuple[bool, str | None, set[str], bool, list[Any]]:
    """Replace known remote contexts by our copies, in place.

    Returns (changed, first unknown remote reference, defined terms, @vocab seen, node objects).
    """
    changed = False
    unknown: str | None = None
    terms: set[str] = set()
    vocab = False
    nodes: list[Any] = []

    def local(ref: str) -> dict[str, Any] | None:
        nonlocal unknown
        context = known_context(ref)
        if context is None and unknown is None:
            unknown = ref
        return context

    def resolve(value: Any) -> Any:
        nonlocal changed, vocab
        items = value if isinstance(value, list) else [value]
        out: list[Any] = []
        for item in items:
            if isinstance(item, str):
                context = local(item)
                if context is not None:
                    changed = True
                    item = context
            if isinstance(item, dict):
                imported = item.get("@import")
                if isinstance(imported, str):
                    context = local(imported)
                    if context is not None:
                        changed = True
                        item = {**context, **{k: v for k, v in item.items() if k != "@import"}}
                terms.update(k for k in item if not k.startswith("@"))
                vocab = vocab or item.get("@vocab") is not None
                for definition in item.values():  # scoped contexts
                    if isinstance(definition, dict) and "@context" in definition:
                        definition["@context"] = resolve(definition["@context"])
            out.append(item)
        return out if isinstance(value, list) else out[0]

    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "@context" in item:
                item["@context"] = resolve(item["@context"])
            nodes.append(item)
            stack.extend(
                v for k, v in item.items() if k != "@context" and isinstance(v, dict | list)
            )
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))
    return changed, unknown, terms, vocab, nodes


def check_json_ld(
    payload: bytes, where: str = "", limits: InputLimits = DEFAULT_LIMITS
) -> tuple[bytes, tuple[str, ...]]:
    """Resolve known contexts locally, refuse other remote ones, list undefined keys.

    Returns the payload to parse (re-serialised if a context was replaced) and the sorted keys
    that no context defines (JSON-LD processors drop them without an error).
    """
    tree = limits.load_json(payload, kind="JSON-LD", where=where)
    try:
        changed, unknown, terms, vocab, nodes = _resolve_contexts(tree)
    except RecursionError as err:
        raise ParseError(f"JSON-LD{where} is nested too deeply") from err
    if unknown is not None:
        raise ParseError(
            f"JSON-LD{where} refers to the remote @context {unknown!r}, which is never fetched "
            "(no network access while mapping) and is not one of the contexts we ship; "
            "embed the context in the document"
        )
    undefined: set[str] = set()
    if not vocab:
        for node in nodes:
            undefined.update(
                k for k in node if not k.startswith("@") and ":" not in k and k not in terms
            )
    if changed:
        payload = json.dumps(tree).encode()
    return payload, tuple(sorted(undefined))


# characters that may not appear in an IRI (RFC 3987) and a '%' that starts no escape
_ILLEGAL_IRI = re.compile(r'[\x00-\x20<>"{}|\\^`\x7f]|%(?![0-9A-Fa-f]{2})')


def encode_iri(value: str) -> str:
    """Percent-encode the characters that make ``value`` an illegal IRI."""
    return _ILLEGAL_IRI.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), value)


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    format: RdfFormat
    quads: list[Quad]
    repaired: dict[str, str] = field(default_factory=dict)  # illegal IRI -> percent-encoded
    undefined_terms: tuple[str, ...] = ()  # JSON-LD keys no context defines
    dropped: tuple[DroppedNode, ...] = ()  # RDF/XML nodes that could not be read


def _repair(
    quads: list[Quad], where: str, json_ld: bool = False
) -> tuple[list[Quad], dict[str, str]]:
    """Replace every illegal IRI (from a lenient parse) by its percent-encoded form.

    Language tags are lower-cased, as the strict parsers do, so that the output does not depend
    on which parse was used.
    """
    checked: dict[str, NamedNode | None] = {}  # value -> replacement (None: legal)
    repaired: dict[str, str] = {}

    def fix(term: NamedNode) -> NamedNode | None:
        value = term.value
        if value in checked:
            return checked[value]
        try:
            NamedNode(value)
            new: NamedNode | None = None
        except ValueError:
            encoded = encode_iri(value)
            try:
                new = NamedNode(encoded)
            except ValueError as err:
                raise ParseError(
                    f"the IRI {value!r}{where} is not valid and cannot be repaired: {err}"
                ) from err
            repaired[value] = encoded
        checked[value] = new
        return new

    out: list[Quad] = []
    for quad in quads:
        s, p, o = quad.subject, quad.predicate, quad.object
        s2 = fix(s) if isinstance(s, NamedNode) else None
        if json_ld and ":" not in p.value:
            continue  # a key no context defines: reported by the mapper (json-ld-term-undefined)
        p2 = fix(p)
        o2: Any = None
        if isinstance(o, NamedNode):
            o2 = fix(o)
        elif isinstance(o, Literal):
            language = o.language
            if language is None:
                dt = fix(o.datatype)
                o2 = None if dt is None else Literal(o.value, datatype=dt)
            elif language != language.lower():  # as the strict parsers give them
                o2 = Literal(o.value, language=language.lower())
        if s2 is None and p2 is None and o2 is None:
            out.append(quad)
        else:
            out.append(Quad(s2 or s, p2 or p, o2 or o))
    return out, repaired


_NAMES = {
    RdfFormat.TURTLE: "Turtle",
    RdfFormat.RDF_XML: "RDF/XML",
    RdfFormat.JSON_LD: "JSON-LD",
    RdfFormat.N_TRIPLES: "N-Triples",
}


def _unknown(media_type: str | None) -> str:
    """A preamble for errors on a payload whose media type names no RDF serialisation."""
    media = (media_type or "").split(";", 1)[0].strip().lower()
    if not media or media in _MEDIA_TYPES:
        return ""
    return (
        f"the media type {media!r} is not an RDF serialisation we read (Turtle, RDF/XML, "
        "JSON-LD, N-Triples); read by its first bytes as: "
    )


def _parse(payload: bytes, fmt: RdfFormat, url: str | None, lenient: bool) -> list[Quad]:
    return list(parse(payload, format=fmt, base_iri=url or None, lenient=lenient))


def parse_document(
    payload: bytes,
    media_type: str | None,
    url: str | None,
    limits: InputLimits = DEFAULT_LIMITS,
) -> ParsedDocument:
    """Parse a payload into default-graph quads after the safety checks above, within the
    input limits (:mod:`aggregator.core.input_limits`: JSON-LD as JSON, every literal's length)."""
    where = f" ({url})" if url else ""
    fmt = detect_format(payload, media_type, url)
    undefined: tuple[str, ...] = ()
    if fmt == RdfFormat.RDF_XML:
        payload = check_rdf_xml(payload, where)
    elif fmt == RdfFormat.JSON_LD:
        payload, undefined = check_json_ld(payload, where, limits)
    name = _NAMES.get(fmt, "RDF")
    repaired: dict[str, str] = {}
    dropped: tuple[DroppedNode, ...] = ()

    def strict_then_repaired(data: bytes) -> list[Quad]:
        nonlocal repaired
        try:
            repaired = {}
            return _parse(data, fmt, url, False)
        except SyntaxError as err:
            if "IRI" not in err.msg:
                raise
            quads, repaired = _repair(_parse(data, fmt, url, True), where)
            return quads

    try:
        if fmt == RdfFormat.JSON_LD:  # strict JSON-LD drops illegal IRIs silently
            quads, repaired = _repair(_parse(payload, fmt, url, True), where, json_ld=True)
        elif fmt == RdfFormat.RDF_XML:
            read = read_rdf_xml(payload, strict_then_repaired, where)
            quads, dropped = read.quads, read.dropped
        else:
            quads = strict_then_repaired(payload)
    except SyntaxError as err:
        raise ParseError(f"{_unknown(media_type)}{name} syntax error{where}: {err.msg}") from err
    except ValueError as err:  # e.g. an invalid base IRI
        raise ParseError(f"cannot parse{where}: {err}") from err
    except MemoryError as err:  # pyoxigraph: "Reached the buffer maximal size of 16777216"
        raise InputLimitError(
            f"{name}{where}: one token (a literal, an IRI) is longer than the parser reads "
            f"({err}); the input limit max_text_length is {limits.max_text_length:,} characters"
        ) from err
    limits.check_literals(quads, len(payload), url)
    if fmt == RdfFormat.JSON_LD and any(not isinstance(q.graph_name, DefaultGraph) for q in quads):
        quads = [Quad(q.subject, q.predicate, q.object) for q in quads]  # merge named graphs
    return ParsedDocument(fmt, quads, repaired, undefined, dropped)
