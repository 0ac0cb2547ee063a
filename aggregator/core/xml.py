"""The one hardened XML parser factory.

Every XML payload and every protocol response is parsed through :func:`parse_xml`: no entity
resolution, no DTD loading or validation, no network, no XInclude, no huge trees (libxml2's
default limits: depth 256, text nodes of 10 MB, entity amplification). A document that
declares a DOCTYPE is refused outright with :class:`UnsafeInputError` (the classic
billion-laughs, quadratic-blowup and XXE vectors all need one) *before* its internal subset
is read: a first pass stops at the DOCTYPE or at the root element, whichever comes first
(read from the bytes for UTF-8 documents, by a target parser for any other encoding).
Any other parse error becomes :class:`ParseError` with the line number.

Parsers are kept per thread (lxml parsers must not be shared by concurrent parses), so
:func:`parse_xml` may be called from any number of threads.

RDF/XML is the one payload with a legitimate DOCTYPE (``<!ENTITY xsd "http://www.w3.org/2001/
XMLSchema#">``); it is not parsed here but by pyoxigraph, after
:func:`expand_internal_entities` has checked the declarations (internal string entities only)
and expanded them within limits.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from lxml import etree

from aggregator.core.errors import ParseError, UnsafeInputError

_local = threading.local()


class _Doctype(Exception):
    pass


class _RootReached(Exception):
    pass


class _PrologScan:
    """A parser target that stops at the first DOCTYPE or the root element."""

    def doctype(self, name: str | None, pubid: str | None, system: str | None) -> None:
        raise _Doctype(name or "")

    def start(self, tag: str | bytes, attrib: Any, nsmap: Any = None) -> None:
        raise _RootReached(tag)

    def end(self, tag: str | bytes) -> None:
        pass

    def data(self, data: str | bytes) -> None:
        pass

    def comment(self, text: str | bytes) -> None:
        pass

    def close(self) -> None:
        return None


def _options() -> dict[str, Any]:
    return {
        "resolve_entities": False,
        "no_network": True,
        "load_dtd": False,
        "dtd_validation": False,
        "attribute_defaults": False,
        "huge_tree": False,
    }


def safe_parser() -> etree.XMLParser:
    """A per-thread lxml parser with every dangerous feature off (parsers are not thread-safe)."""
    parser: etree.XMLParser | None = getattr(_local, "parser", None)
    if parser is None:
        # Not collect_ids=False: lxml implements it through libxml2's "loadsubset" flags,
        # which makes libxml2 load the external DTD subset (file or, but for no_network,
        # URL) even with load_dtd=False. Proven by tests/test_xml_safety.py.
        parser = etree.XMLParser(remove_blank_text=False, **_options())
        _local.parser = parser
    return parser


_SCAN_CHUNK = 8192
_BOM_UTF8 = b"\xef\xbb\xbf"
_WHITESPACE = b" \t\r\n"
# what may follow '<' to open the root element: an ASCII name-start character, or the first
# byte of a multi-byte UTF-8 sequence (a non-ASCII name; an invalid one fails the real parse)
_ROOT_START = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_:") | frozenset(
    range(0xC2, 0xF5)
)
_DECLARATION = re.compile(rb"<\?xml[ \t\r\n][^>]*?\?>")
_DECLARED_ENCODING = re.compile(rb"""encoding[ \t\r\n]*=[ \t\r\n]*["']([^"']*)["']""")
_XML_TARGET = re.compile(rb"<\?[xX][mM][lL](?:[ \t\r\n?]|$)")
_SPACES = (b" ", b"\t", b"\r", b"\n")
_BYTE_ENCODINGS = frozenset({b"utf-8", b"utf8", b"us-ascii", b"ascii"})


@dataclass(frozen=True, slots=True)
class Prolog:
    """What the bytes before the root element hold, as far as the bytes decide it.

    ``kind`` is ``"doctype"`` (``<!DOCTYPE`` and white space), ``"declaration"`` (any other
    ``<!`` that is not a comment: a lower-case ``<!doctype``, ``<!ENTITY``, ``<![CDATA[``...),
    ``"root"`` (the root element's ``<``) or ``"undecided"``; ``offset`` is where that
    construct starts (-1 when undecided)."""

    kind: str
    offset: int = -1


_UNDECIDED = Prolog("undecided")


def scan_prolog(data: bytes) -> Prolog:
    """The one DOCTYPE pre-scan: walk the prolog of UTF-8 (or ASCII) bytes, never past it.

    The BOM, the XML declaration, white space, comments and processing instructions are
    skipped; the first other construct decides. Only a DOCTYPE *in the prolog* is a DOCTYPE:
    ``<!DOCTYPE html>`` inside the document (in CDATA, or escaped in text) is content. Another
    encoding than UTF-8 (declared, or UTF-16/-32), an unterminated comment or instruction, a
    misplaced XML declaration or any odd byte is undecided: the caller decides otherwise (a
    parser scan, or a conservative search). Costs microseconds whatever the document's size.
    """
    if type(data) is not bytes:
        return _UNDECIDED
    pos = 3 if data.startswith(_BOM_UTF8) else 0
    declaration = _DECLARATION.match(data, pos)
    if declaration is not None:
        encoding = _DECLARED_ENCODING.search(declaration.group())
        if encoding is not None and encoding.group(1).lower() not in _BYTE_ENCODINGS:
            return _UNDECIDED  # the parser decodes it (ISO-2022-JP may hide "-->" in a comment)
        pos = declaration.end()
    size = len(data)
    while True:
        while pos < size and data[pos] in _WHITESPACE:
            pos += 1
        if data.startswith(b"<!--", pos):
            end = data.find(b"-->", pos + 4)
            if end < 0:
                return _UNDECIDED
            pos = end + 3
        elif data.startswith(b"<?", pos):
            if _XML_TARGET.match(data, pos):
                return _UNDECIDED  # a misplaced XML declaration: the parser reports it
            end = data.find(b"?>", pos + 2)
            if end < 0:
                return _UNDECIDED
            pos = end + 2
        elif data.startswith(b"<!", pos):
            if data.startswith(b"<!DOCTYPE", pos) and data[pos + 9 : pos + 10] in _SPACES:
                return Prolog("doctype", pos)
            return Prolog("declaration", pos)
        elif pos + 1 < size and data[pos] == 0x3C and data[pos + 1] in _ROOT_START:
            return Prolog("root", pos)
        else:
            return _UNDECIDED


def _prolog_has_doctype(data: bytes) -> bool | None:
    """Whether the prolog holds a DOCTYPE, read from the bytes; None when they do not decide.

    :func:`scan_prolog` for UTF-8 (or ASCII) input: ``<!DOCTYPE`` is a DOCTYPE, and ``<``
    followed by a name's first character is the root element (nothing after it can be a
    DOCTYPE). Anything else (another encoding, an unterminated comment, a lower-case
    ``<!doctype``, any odd byte) is None, and the parser's scan decides: the bytes only ever
    short-cut a verdict the parser would give."""
    kind = scan_prolog(data).kind
    if kind == "doctype":
        return True
    if kind == "root":
        return False
    return None


def _parser_finds_doctype(data: bytes) -> bool:
    """Whether a target parser meets a DOCTYPE before the root element (or a syntax error).

    The bytes are fed in chunks, so the scan stops in the chunk where the root element (or
    the DOCTYPE) starts: given the whole document at once, libxml2 read all of it before the
    target's exception was seen, which cost half a full parse for every payload."""
    parser = etree.XMLParser(target=_PrologScan(), **_options())
    try:
        for start in range(0, len(data), _SCAN_CHUNK):
            parser.feed(data[start : start + _SCAN_CHUNK])
        parser.close()
    except _Doctype:
        return True
    except (_RootReached, etree.XMLSyntaxError, ValueError):
        pass  # no DOCTYPE before the root; syntax errors are reported by the real parse
    return False


def _refuse_doctype(data: bytes, where: str) -> None:
    """Raise UnsafeInputError if the prolog holds a DOCTYPE; reads no further than the root.

    :func:`_prolog_has_doctype` decides from the bytes when it can (UTF-8 documents: a scan
    of the prolog); otherwise :func:`_parser_finds_doctype` does, with a new target parser each
    time, much dearer (docs/benchmarks.md#doctype-refusal-of-protocol-xml)."""
    verdict = _prolog_has_doctype(data)
    if verdict is None:
        verdict = _parser_finds_doctype(data)
    if verdict:
        raise UnsafeInputError(f"XML with a DOCTYPE declaration is refused{where}")


def parse_xml(data: bytes, *, url: str | None = None) -> etree._Element:
    """Parse bytes into an element tree root; raise ParseError/UnsafeInputError, never crash."""
    where = f" ({url})" if url else ""
    _refuse_doctype(data, where)
    try:
        if url is None:
            root = etree.fromstring(data, parser=safe_parser())
        else:
            root = etree.fromstring(data, parser=safe_parser(), base_url=url)
    except etree.XMLSyntaxError as err:
        line = err.lineno if err.lineno else "?"
        raise ParseError(f"malformed XML{where} at line {line}: {err.msg}") from err
    except ValueError as err:  # e.g. a str with an encoding declaration
        raise ParseError(f"malformed XML{where}: {err}") from err
    docinfo = root.getroottree().docinfo
    if docinfo.internalDTD is not None or docinfo.externalDTD is not None or docinfo.doctype:
        raise UnsafeInputError(f"XML with a DOCTYPE declaration is refused{where}")
    return root


# -- internal entities (RDF/XML's <!ENTITY xsd "http://www.w3.org/2001/XMLSchema#">) ---------

MAX_ENTITIES = 64  # declarations in one internal subset
MAX_ENTITY_LENGTH = 4096  # bytes one entity expands to, nested references included
MAX_SUBSET = 65_536  # bytes of the internal subset
EXPANSION_SLACK = 1 << 20  # bytes all references may add, besides 4x the document

_DOCTYPE_START = re.compile(rb"<!DOCTYPE\s+([^\s\[>]+)\s*", re.IGNORECASE)
_ANY_DECLARATION = re.compile(rb"<!\s*(?:DOCTYPE|ENTITY)", re.IGNORECASE)
_ENTITY_DECL = re.compile(rb"<!ENTITY\s+(%\s*)?([^\s%;&<>\"']+)\s+")
_REFERENCE = re.compile(rb"&([^\s&;#<>\"']+);")
_BARE_AMPERSAND = re.compile(rb"&(?![^\s&;#<>\"']+;|#x[0-9A-Fa-f]+;|#[0-9]+;)")
_PREDEFINED = frozenset({b"lt", b"gt", b"amp", b"quot", b"apos"})


@dataclass(frozen=True, slots=True)
class Doctype:
    """A DOCTYPE declaration: where it is and the internal entities it declares."""

    start: int
    end: int  # just past its closing '>'
    entities: dict[bytes, bytes]  # name -> literal value (references not expanded)


def _prolog_doctype(data: bytes, where: str) -> re.Match[bytes] | None:
    """The DOCTYPE's opening ``<!DOCTYPE name`` in the prolog (:func:`scan_prolog`), or None.

    Only the prolog is read: ``<!DOCTYPE html>`` quoted in a literal (in CDATA, or escaped as
    text) is content, left as it is. Another ``<!`` declaration before the root element (an
    ``<!ENTITY`` outside any DOCTYPE...) is refused. A prolog the bytes do not decide (not
    UTF-8, unterminated, odd bytes: the document is broken anyway) falls back to a search of
    the whole document, so that no DOCTYPE reaches a parser that would expand it unchecked."""
    prolog = scan_prolog(data)
    if prolog.kind == "root":
        return None
    if prolog.kind == "undecided":
        found = _DOCTYPE_START.search(data)
        if found is None and _ANY_DECLARATION.search(data):
            raise UnsafeInputError(f"XML{where} with an ENTITY declaration is refused")
        return found
    found = _DOCTYPE_START.match(data, prolog.offset)
    if found is None:
        text = data[prolog.offset : prolog.offset + 40].decode("utf-8", "replace")
        raise UnsafeInputError(
            f"XML{where}: the declaration {text!r}... before the root element is refused"
        )
    return found


def read_doctype(data: bytes, where: str = "") -> Doctype | None:
    """The document's DOCTYPE, if it has one that only declares internal string entities.

    None when the prolog holds no DOCTYPE (one quoted in the document's content is content).
    :class:`UnsafeInputError` for anything else: an external
    DTD (``SYSTEM``/``PUBLIC``), an external or parameter entity, markup inside an entity
    value, any other declaration (``ELEMENT``, ``ATTLIST``, ``NOTATION``), more than
    ``MAX_ENTITIES`` entities or an internal subset over ``MAX_SUBSET`` bytes.
    """
    found = _prolog_doctype(data, where)
    if found is None:
        return None
    pos = found.end()
    if data.startswith((b"SYSTEM", b"PUBLIC"), pos):
        raise UnsafeInputError(
            f"XML{where} names an external DTD ({data[pos : pos + 6].decode()}): refused, "
            "only internal entity declarations are read"
        )
    entities: dict[bytes, bytes] = {}
    if data.startswith(b"[", pos):
        pos += 1
        limit = pos + MAX_SUBSET
        while True:
            while pos < len(data) and data[pos : pos + 1].isspace():
                pos += 1
            if pos >= limit:
                raise UnsafeInputError(
                    f"XML{where}: the DOCTYPE's internal subset is longer than {MAX_SUBSET} bytes"
                )
            if data.startswith(b"]", pos):
                pos += 1
                break
            if data.startswith(b"<!--", pos):
                end = data.find(b"-->", pos)
                if end < 0:
                    raise ParseError(f"malformed XML{where}: unclosed comment in the DOCTYPE")
                pos = end + 3
                continue
            decl = _ENTITY_DECL.match(data, pos)
            if decl is None:
                text = data[pos : pos + 40].decode("utf-8", "replace")
                raise UnsafeInputError(
                    f"XML{where}: the DOCTYPE declares {text!r}...: refused, only internal "
                    'entity declarations (<!ENTITY name "value">) are read'
                )
            name = decl.group(2)
            shown = name.decode("utf-8", "replace")
            if decl.group(1):
                raise UnsafeInputError(f"XML{where}: parameter entity %{shown} refused")
            pos = decl.end()
            quote = data[pos : pos + 1]
            if quote not in (b'"', b"'"):
                raise UnsafeInputError(
                    f"XML{where}: external entity {shown!r} "
                    f"({data[pos : pos + 6].decode('utf-8', 'replace')}) refused"
                )
            end = data.find(quote, pos + 1)
            if end < 0:
                raise ParseError(f"malformed XML{where}: unclosed value of entity {shown!r}")
            value = data[pos + 1 : end]
            if b"<" in value or b"%" in value:
                raise UnsafeInputError(
                    f"XML{where}: entity {shown!r} holds markup or a parameter reference: "
                    "refused, only string entities are read"
                )
            pos = end + 1
            while pos < len(data) and data[pos : pos + 1].isspace():
                pos += 1
            if not data.startswith(b">", pos):
                raise ParseError(f"malformed XML{where}: declaration of {shown!r} not closed")
            pos += 1
            entities.setdefault(name, value)  # the first declaration binds (XML 1.0, 4.2)
            if len(entities) > MAX_ENTITIES:
                raise UnsafeInputError(
                    f"XML{where}: the DOCTYPE declares more than {MAX_ENTITIES} entities"
                )
        while pos < len(data) and data[pos : pos + 1].isspace():
            pos += 1
    if not data.startswith(b">", pos):
        raise ParseError(f"malformed XML{where}: the DOCTYPE declaration is not closed")
    return Doctype(found.start(), pos + 1, entities)


def _expansions(entities: dict[bytes, bytes], where: str) -> dict[bytes, bytes]:
    """Each entity's replacement text, nested references expanded, quotes escaped (so that it
    may stand in an attribute value as well as in text); UnsafeInputError past
    MAX_ENTITY_LENGTH bytes or on a reference loop."""
    done: dict[bytes, bytes] = {}
    active: set[bytes] = set()

    def expand(name: bytes) -> bytes:
        known = done.get(name)
        if known is not None:
            return known
        shown = name.decode("utf-8", "replace")
        if name in active:
            raise UnsafeInputError(f"XML{where}: entity {shown!r} is part of a reference loop")
        active.add(name)
        value = entities[name]
        if _BARE_AMPERSAND.search(value):
            raise ParseError(f"malformed XML{where}: a bare '&' in the value of entity {shown!r}")

        def nested(ref: re.Match[bytes]) -> bytes:
            inner = ref.group(1)
            if inner in _PREDEFINED or inner not in entities:
                return ref.group(0)  # left to the XML parser (undeclared: its error)
            return expand(inner)

        text = _REFERENCE.sub(nested, value)
        active.discard(name)
        if len(text) > MAX_ENTITY_LENGTH:
            raise UnsafeInputError(
                f"XML{where}: entity {shown!r} expands to more than {MAX_ENTITY_LENGTH} "
                "bytes: refused as a possible entity expansion bomb"
            )
        done[name] = text
        return text

    for name in entities:
        expand(name)
    return {
        name: text.replace(b'"', b"&quot;").replace(b"'", b"&apos;") for name, text in done.items()
    }


_LITERAL_SECTIONS = re.compile(rb"<!--.*?-->|<!\[CDATA\[.*?\]\]>", re.DOTALL)


def expand_internal_entities(data: bytes, where: str = "") -> bytes:
    """The document with its DOCTYPE removed and its internal entities expanded.

    For documents (RDF/XML) whose DOCTYPE only declares string entities, the common
    ``<!ENTITY xsd "http://www.w3.org/2001/XMLSchema#">`` used as ``rdf:datatype="&xsd;date"``.
    The declarations are checked first (:func:`read_doctype`: no external DTD or entity, no
    parameter entity, no markup in a value); each entity may expand to at most
    ``MAX_ENTITY_LENGTH`` bytes and all references together may add at most 4 times the
    document's size plus ``EXPANSION_SLACK`` bytes, else :class:`UnsafeInputError` ("entity
    expansion bomb"). References are then replaced in the text (not inside comments or CDATA
    sections; references to undeclared entities are left for the parser to report), so that
    a document broken elsewhere is still read as far as it can be; the DOCTYPE is replaced by
    as many newlines as it spanned, so line numbers still point into the document as
    published. Documents without a DOCTYPE are returned unchanged (the same object).
    """
    doctype = read_doctype(data, where)
    if doctype is None:
        return data
    expansions = _expansions(doctype.entities, where)
    budget = 4 * len(data) + EXPANSION_SLACK
    added = 0

    def replace(ref: re.Match[bytes]) -> bytes:
        nonlocal added
        text = expansions.get(ref.group(1))
        if text is None:
            return ref.group(0)
        added += len(text)
        if added > budget:
            raise UnsafeInputError(
                f"XML{where}: entity references expand to more than {budget} bytes: "
                "refused as a possible entity expansion bomb"
            )
        return text

    body = data[doctype.end :]
    parts: list[bytes] = []
    pos = 0
    for section in _LITERAL_SECTIONS.finditer(body):
        parts.append(_REFERENCE.sub(replace, body[pos : section.start()]))
        parts.append(section.group())
        pos = section.end()
    parts.append(_REFERENCE.sub(replace, body[pos:]))
    newlines = b"\n" * data.count(b"\n", doctype.start, doctype.end)
    return data[: doctype.start] + newlines + b"".join(parts)
