"""Read an RDF/XML document node by node when it does not parse whole.

A large catalogue dump in RDF/XML is one document: one broken ``rdf:Description`` (a NUL or
another character XML forbids, an unescaped ``&``, a bad attribute) would make the whole
document unreadable and lose every dataset in it. pyoxigraph's parser also *accepts* some
characters XML forbids (a NUL inside a literal comes out in the literal), so they are looked
for first.

:func:`read_rdf_xml` parses the document whole; only if that fails, or an illegal character
is found, it splits the document into the top-level elements of its root (the node elements
of ``rdf:RDF``, or the property elements of a root node element) with a small scanner that
only follows ``<...>`` markup (so it is not thrown by what breaks the XML inside an element),
parses each one alone inside the root's start and end tags (which hold the namespace and
``xml:base`` declarations), drops the ones that fail, and parses the rest together (so that
``rdf:nodeID`` references between nodes still join). Each dropped node is reported with its
line, column and the parser's message. A document whose prolog or root start tag is broken
is refused whole (:class:`ParseError`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pyoxigraph import Quad

from aggregator.core.errors import ParseError

# Characters XML 1.0 forbids (section 2.2), as UTF-8 bytes: C0 controls other than tab, LF,
# CR, and U+FFFE / U+FFFF. (Surrogates are not valid UTF-8: the parser rejects them.)
_ILLEGAL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]|\xef\xbf[\xbe\xbf]")
_C0 = bytes(b for b in range(0x20) if b not in (0x09, 0x0A, 0x0D))
_NAME = re.compile(rb"[A-Za-z_][\w.-]*(?::[A-Za-z_][\w.-]*)?")
MAX_DROPPED_REPORTED = 20


@dataclass(frozen=True, slots=True)
class DroppedNode:
    """A top-level element of the document that could not be read."""

    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}: {self.message}"


def position(data: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of a byte offset."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8", "replace")) + 1
    return data.count(b"\n", 0, offset) + 1, column


def illegal_character(data: bytes, start: int = 0, end: int | None = None) -> str | None:
    """A message naming the first character XML forbids in ``data[start:end]``, or None."""
    stop = len(data) if end is None else end
    part = data if start == 0 and stop == len(data) else data[start:stop]
    # bytes.translate and `in` run at memory speed; the regex (alternation, no literal
    # prefix) is slow (docs/benchmarks.md#mapping), so it only runs to locate a character
    # known to be there
    if len(part.translate(None, _C0)) == len(part) and (
        b"\xef" not in part or (b"\xef\xbf\xbe" not in part and b"\xef\xbf\xbf" not in part)
    ):
        return None
    found = _ILLEGAL.search(data, start, stop)
    if found is None:
        return None
    line, column = position(data, found.start())
    char = found.group().decode("utf-8")
    return f"illegal XML character U+{ord(char):04X} at line {line}, column {column}"


def _skip_markup(data: bytes, pos: int, end: int) -> tuple[int, str]:
    """From a '<' at ``pos``: the offset after the construct and its kind.

    Kinds: "comment", "cdata", "pi", "decl" (``<!...>``), "end" (``</x>``), "empty"
    (``<x/>``), "start" (``<x ...>``), "text" (a '<' that starts nothing: the parser will
    complain about it). An unclosed construct runs to ``end``.
    """
    for opener, closer, kind in (
        (b"<!--", b"-->", "comment"),
        (b"<![CDATA[", b"]]>", "cdata"),
        (b"<?", b"?>", "pi"),
    ):
        if data.startswith(opener, pos):
            close = data.find(closer, pos + len(opener), end)
            return (end if close < 0 else close + len(closer)), kind
    if data.startswith(b"<!", pos):
        close = data.find(b">", pos, end)
        return (end if close < 0 else close + 1), "decl"
    kind = "end" if data.startswith(b"</", pos) else "start"
    if kind == "start" and not _NAME.match(data, pos + 1):
        return pos + 1, "text"
    i = pos + 1
    quote = 0
    while i < end:
        byte = data[i]
        if quote:
            if byte == quote:
                quote = 0
        elif byte in (0x22, 0x27):  # " '
            quote = byte
        elif byte == 0x3E:  # >
            if kind == "start" and data[i - 1] == 0x2F:  # />
                return i + 1, "empty"
            return i + 1, kind
        elif byte == 0x3C:  # '<' inside a tag: the tag is broken; stop before it
            return i, kind
        i += 1
    return end, kind


def split_root(data: bytes) -> tuple[int, int, list[tuple[int, int]]]:
    """(end of the root start tag, start of the root end tag, [(start, end) of each child]).

    Raises ParseError when no root element or its end tag cannot be found.
    """
    pos = 0
    n = len(data)
    while True:  # the prolog
        lt = data.find(b"<", pos)
        if lt < 0:
            raise ParseError("no root element")
        pos, kind = _skip_markup(data, lt, n)
        if kind in ("start", "empty"):
            break
        if kind in ("end", "text"):
            raise ParseError(f"no root element (markup at line {position(data, lt)[0]})")
    if kind == "empty":
        return pos, pos, []
    head_end = pos
    root_name = _NAME.match(data, data.rfind(b"<", 0, head_end) + 1)
    assert root_name is not None
    tail_start = data.rfind(b"</" + root_name.group())
    if tail_start < head_end:
        raise ParseError(f"the root element <{root_name.group().decode()}> is not closed")
    children: list[tuple[int, int]] = []
    pos = head_end
    depth = 0
    start = -1
    while True:
        lt = data.find(b"<", pos, tail_start)
        if lt < 0:
            break
        pos, kind = _skip_markup(data, lt, tail_start)
        if kind == "start":
            if depth == 0:
                start = lt
            depth += 1
        elif kind == "empty" and depth == 0:
            children.append((lt, pos))
        elif kind == "end":
            depth -= 1
            if depth == 0:
                children.append((start, pos))
            depth = max(depth, 0)
    if depth > 0:  # an element left open swallows everything up to the root's end tag
        children.append((start, tail_start))
    return head_end, tail_start, children


@dataclass(frozen=True, slots=True)
class RdfXmlRead:
    quads: list[Quad]
    dropped: tuple[DroppedNode, ...] = ()


Parse = Callable[[bytes], list[Quad]]


def read_rdf_xml(data: bytes, parse: Parse, where: str = "") -> RdfXmlRead:
    """Parse RDF/XML (UTF-8, no DOCTYPE) with ``parse``; salvage the readable nodes if needed.

    ``parse`` raises SyntaxError (or ValueError) on a document it cannot read. ParseError when
    nothing at all can be read; the message then names the first problem and its position.
    """
    if illegal_character(data) is None:
        try:
            return RdfXmlRead(parse(data))
        except (SyntaxError, ValueError):
            pass
    try:
        head_end, tail_start, children = split_root(data)
    except ParseError as err:
        raise ParseError(f"RDF/XML{where}: {err.message}") from err
    bad = illegal_character(data, 0, head_end)
    if bad is None:
        bad = illegal_character(data, tail_start)
    if bad is not None:
        raise ParseError(f"RDF/XML{where}: {bad}")
    head, tail = data[:head_end], data[tail_start:]
    kept: list[bytes] = []
    dropped: list[DroppedNode] = []
    for start, end in children:
        line, column = position(data, start)
        bad = illegal_character(data, start, end)
        if bad is not None:
            dropped.append(DroppedNode(line, column, bad))
            continue
        chunk = data[start:end]
        try:
            parse(head + chunk + tail)
        except (SyntaxError, ValueError) as err:
            message = err.msg if isinstance(err, SyntaxError) and err.msg else str(err)
            dropped.append(DroppedNode(line, column, message))
            continue
        kept.append(chunk)
    if not dropped:  # every node reads alone: the problem is between them
        raise ParseError(f"RDF/XML{where} cannot be parsed, and no single node is at fault")
    if not kept:
        raise ParseError(f"RDF/XML{where}: no node can be read; first: {dropped[0]}")
    try:
        quads = parse(head + b"\n".join(kept) + tail)
    except (SyntaxError, ValueError) as err:
        raise ParseError(f"RDF/XML{where} cannot be parsed: {err}") from err
    return RdfXmlRead(quads, tuple(dropped))
