"""Reading ISO 19139 XML and writing triples: the small helpers every part of the mapping uses.

* :class:`Texts` reads a ``gco:CharacterString`` / ``gmx:Anchor`` property with its
  ``gmd:PT_FreeText`` translations as language-tagged literals (the record's ``gmd:locale``
  list gives each ``#locale`` its language).
* :class:`Out` collects the triples of one graph and makes blank nodes; :func:`canonical_ntriples`
  writes them as canonical N-Triples.
* :func:`xpath` compiles an XPath with the ISO namespaces, once (``lxml.etree.XPath``).

Terms are N-Triples strings from the start (:func:`named`, :func:`lit`, :func:`typed_lit`,
``_:`` blank nodes): a record makes a few hundred of them, and building pyoxigraph objects
only to print them again cost more than the rest of the mapping. An IRI taken from the record
is checked by pyoxigraph (:func:`iri`) before it is used.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import date, datetime
from functools import lru_cache
from itertools import count

from lxml import etree
from pyoxigraph import NamedNode, RdfFormat, parse

from aggregator.core.vocab import RDF_TYPE, XSD

NS = {
    "gmd": "http://www.isotc211.org/2005/gmd",
    "gco": "http://www.isotc211.org/2005/gco",
    "gmx": "http://www.isotc211.org/2005/gmx",
    "srv": "http://www.isotc211.org/2005/srv",
    "gml": "http://www.opengis.net/gml/3.2",
    "gml31": "http://www.opengis.net/gml",
    "xlink": "http://www.w3.org/1999/xlink",
}
GMD = f"{{{NS['gmd']}}}"
GCO = f"{{{NS['gco']}}}"
GMX = f"{{{NS['gmx']}}}"
XLINK_HREF = f"{{{NS['xlink']}}}href"
CHARACTER_STRING = GCO + "CharacterString"
ANCHOR = GMX + "Anchor"
FREE_TEXT = GMD + "PT_FreeText"
LOCALISED = GMD + "LocalisedCharacterString"

Node = str  # an N-Triples IRI ("<...>") or blank node ("_:n1")
Term = str  # a Node or an N-Triples literal
_BLANKS = count()


def named(iri_text: str) -> str:
    """A trusted IRI (a constant, a table value, a minted IRI) as an N-Triples term."""
    return f"<{iri_text}>"


def blank() -> str:
    return f"_:n{next(_BLANKS)}"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")


def lit(text: str, tag: str = "") -> str:
    """A plain or language-tagged literal."""
    return f'"{_escape(text)}"@{tag}' if tag else f'"{_escape(text)}"'


def typed_lit(text: str, datatype: str) -> str:
    return f'"{_escape(text)}"^^<{datatype}>'


def lexical(term: str) -> str:
    """The lexical form of a literal made by :func:`lit` / :func:`typed_lit`."""
    return _UNESCAPE.sub(lambda m: _ECHAR[m.group(1)], term[1 : term.rfind('"')])


_ECHAR = {"n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_UNESCAPE = re.compile(r'\\([nr"\\])')


def compile_xpath(path: str) -> etree.XPath:
    """``path`` compiled with the ISO 19139 prefixes it uses (gmd, gco, gmx, srv, gml, xlink):
    lxml registers every prefix it is given, and the EXSLT regular expression functions
    unless ``regexp=False``, on each evaluation (a quarter of the time of a short path). Those
    functions are out of reach anyway: no prefix is bound to their namespace."""
    used = {prefix: uri for prefix, uri in NS.items() if f"{prefix}:" in path}
    return etree.XPath(path, namespaces=used, regexp=False)


@lru_cache(maxsize=512)
def xpath(path: str) -> etree.XPath:
    """``path`` compiled once (:func:`compile_xpath`)."""
    return compile_xpath(path)


def elements(path: str, node: etree._Element) -> list[etree._Element]:
    found = xpath(path)(node)
    if not isinstance(found, list):
        return []
    for e in found:
        if not isinstance(e, etree._Element):
            return [e for e in found if isinstance(e, etree._Element)]
    return found  # type: ignore[return-value]  # elements only, checked above


def first(path: str, node: etree._Element) -> etree._Element | None:
    found = xpath(path)(node)
    if isinstance(found, list):
        for e in found:
            if isinstance(e, etree._Element):
                return e
    return None


def children(node: etree._Element, tags: frozenset[str]) -> dict[str, list[etree._Element]]:
    """The children of ``node`` whose tag is one of ``tags``, by tag, in document order: one
    pass over the children instead of one lookup per tag."""
    found: dict[str, list[etree._Element]] = {}
    for child in node:
        tag = child.tag
        if tag in tags:
            same = found.get(tag)
            if same is None:
                found[tag] = [child]
            else:
                same.append(child)
    return found


def child(found: dict[str, list[etree._Element]], tag: str) -> etree._Element | None:
    """The first of the :func:`children` with ``tag`` (what ``node.find(tag)`` returns)."""
    same = found.get(tag)
    return same[0] if same else None


def localname(el: etree._Element) -> str:
    """The element's local name (``etree.QName(el).localname``, without making a QName)."""
    return el.tag.rpartition("}")[2]


def first_under(nodes: Iterable[etree._Element], *tags: str) -> etree._Element | None:
    """The first element in document order reached from ``nodes`` by child steps ``tags``
    (what ``first("t1/t2", node)`` finds, ``nodes`` being the node's ``t1`` children)."""
    if len(tags) == 1:
        tag = tags[0]
        for node in nodes:
            for hit in node.iterchildren(tag):
                return hit
        return None
    for node in nodes:
        if not tags:
            return node
        found = first_under(node.iterchildren(tags[0]), *tags[1:])
        if found is not None:
            return found
    return None


def clean(text: str | None) -> str:
    """Text with its runs of white space kept but its ends trimmed ("" for None)."""
    return text.strip() if text else ""


def plain(prop: etree._Element | None) -> str:
    """The text of a property element: its gco:CharacterString / gmx:Anchor / other gco
    value child (gco:Decimal, gco:Date ...), or its own text."""
    if prop is None:
        return ""
    if len(prop):
        value = prop[0]  # most often the value itself: no iterator
        tag = value.tag
        if tag != FREE_TEXT and isinstance(tag, str):
            text = value.text
            return text.strip() if text else ""
        for child in prop:
            tag = child.tag
            if tag != FREE_TEXT and isinstance(tag, str):
                text = child.text
                return text.strip() if text else ""
    text = prop.text
    return text.strip() if text else ""


def anchor_href(prop: etree._Element | None) -> str:
    """The xlink:href of the property's gmx:Anchor (or of the property itself), or ""."""
    if prop is None:
        return ""
    count = len(prop)
    if count == 1:  # most often: no iterator
        only = prop[0]
        if only.tag == ANCHOR:
            return clean(only.get(XLINK_HREF))
    elif count:
        for child in prop:
            if child.tag == ANCHOR:
                return clean(child.get(XLINK_HREF))
    return clean(prop.get(XLINK_HREF))


def code_value(el: etree._Element | None) -> str:
    """A code list element's value: @codeListValue, else its text."""
    if el is None:
        return ""
    return clean(el.get("codeListValue")) or clean(el.text)


class Texts:
    """Language-tagged text of a record: the metadata language and the PT_Locale tags."""

    def __init__(self, default_tag: str, locales: dict[str, str]) -> None:
        self.default_tag = default_tag
        self.locales = locales  # "#EN" / "EN" -> "en"

    def literals(self, prop: etree._Element) -> list[str]:
        """The main text with the metadata language and each translation with its own tag
        (a translation in the metadata language itself is dropped when it repeats the text)."""
        out: list[str] = []
        main = plain(prop)
        if main:
            out.append(lit(main, self.default_tag))
        if len(prop) == 1 and prop.tag != LOCALISED:
            only = prop[0]
            if not len(only) and only.tag != LOCALISED:  # one leaf child: no translations
                return out
        for loc in prop.iter(LOCALISED):
            text = clean(loc.text)
            if not text:
                continue
            ref = clean(loc.get("locale"))
            tag = self.locales.get(ref) or self.locales.get(ref.lstrip("#")) or ""
            if tag == self.default_tag and text == main:
                continue
            term = lit(text, tag)
            if term not in out:
                out.append(term)
        return out

    @staticmethod
    def literal(text: str, tag: str) -> str:
        return lit(text, tag)


_DATE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$")


@lru_cache(maxsize=4096)  # records repeat their dates
def date_literal(text: str) -> str | None:
    """An ISO date or date-time as xsd:gYear / gYearMonth / date / dateTime; None if it is none.

    A date-time at midnight of a record that only gives dates stays a dateTime: the source
    wrote it that way."""
    text = text.strip()
    m = _DATE.match(text)
    if m:
        year, month, day = m.groups()
        try:
            if day:
                date(int(year), int(month), int(day))
                return typed_lit(text, XSD + "date")
            if month:
                date(int(year), int(month), 1)
                return typed_lit(text, XSD + "gYearMonth")
        except ValueError:
            return None
        return typed_lit(text, XSD + "gYear")
    if _DATETIME.match(text):
        if len(text) == 16:  # no seconds: xsd:dateTime needs them
            text += ":00"
        try:
            datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        return typed_lit(text, XSD + "dateTime")
    return None


def parse_datetime(text: str) -> datetime | None:
    """A gco:Date / gco:DateTime value as a datetime (dates at midnight), None if unreadable."""
    text = text.strip()
    try:
        if "T" in text:
            return datetime.fromisoformat(text.replace("Z", "+00:00"))
        return datetime.fromisoformat(text + "T00:00:00") if _DATE.match(text) else None
    except ValueError:
        return None


class Out:
    """The triples of one graph being built (the resource's, or the catalogue record's)."""

    __slots__ = ("triples",)

    def __init__(self) -> None:
        self.triples: list[tuple[Node, str, Term]] = []

    def add(self, s: Node, p: str, o: Term) -> None:
        self.triples.append((s, p, o))

    def add_all(self, s: Node, p: str, objects: Iterable[Term]) -> None:
        for o in objects:
            self.triples.append((s, p, o))

    def typed(self, cls: str, node: Node | None = None) -> Node:
        """A node (a new blank node by default) typed ``cls``."""
        node = node if node is not None else blank()
        self.triples.append((node, TYPE, cls))
        return node

    def canonical(self) -> bytes:
        """Canonical N-Triples of the graph (see :func:`canonical_ntriples`)."""
        return canonical_ntriples(self.triples)


class _Cycle(Exception):
    pass


# what a blank node says (its sorted (predicate, object) pairs, objects named) -> its label and
# its N-Triples lines: most nodes say what a node of an earlier record said (the same licence,
# standard, contact...), and both are functions of what it says alone
_NODES: dict[tuple[tuple[str, str], ...], tuple[str, str]] = {}
_NODES_MAX = 4096


def canonical_ntriples(triples: Iterable[tuple[Node, str, Term]]) -> bytes:
    """Sorted N-Triples whose blank node labels are hashes of what the node says.

    The mapper's blank nodes form trees hanging from IRIs (a distribution, its licence, an
    agent...), never cycles, so a node is named by the SHA-256 of its sorted outgoing
    triples, objects that are blank nodes replaced by their own names: isomorphic graphs get
    byte-equal output (two blank nodes that say exactly the same thing become one, which
    changes nothing an RDF reader can tell). It is ~20 times faster than RDFC-1.0 through a
    pyoxigraph Dataset (:func:`aggregator.mapping.base.canonical_ntriples`), which is used
    instead should a cycle ever appear.

    A node's label and lines are remembered by what it says (a bounded table), as records
    repeat nodes. The lines are sorted without sorting them all: those of IRI subjects
    (``<``) come before those of blank nodes (``_:b`` and 32 hex digits, one length), and
    the lines of two nodes compare as their labels do, so a node's lines stay one block.
    """
    rows = triples if isinstance(triples, list) else list(triples)
    edges: dict[str, list[tuple[Node, str, Term]]] = {}
    iri_rows: list[tuple[Node, str, Term]] = []
    keep = iri_rows.append
    for row in rows:
        s = row[0]
        if s[0] == "_":
            said = edges.get(s)
            if said is None:
                edges[s] = [row]
            else:
                said.append(row)
        else:
            keep(row)
    blocks: dict[str, str] = {}  # label -> the node's lines, sorted, without duplicates
    names: dict[str, str] = {}
    visiting: set[str] = set()
    known = _NODES
    sha256 = hashlib.sha256

    def name(node: str) -> str:
        if node in visiting:
            raise _Cycle
        visiting.add(node)
        pairs = []
        for _, p, o in edges.get(node, ()):
            if o[0] == "_":
                o = names.get(o) or name(o)
            pairs.append((p, o))
        pairs.sort()
        key = tuple(pairs)
        visiting.discard(node)
        said = known.get(key)
        if said is None:
            lines = sorted([f"{p} {o}" for p, o in pairs])
            label = "_:b" + sha256("\n".join(lines).encode()).hexdigest()[:32]
            block = "\n".join(sorted({f"{label} {line} ." for line in lines}))
            if len(known) >= _NODES_MAX:
                known.clear()
            said = known[key] = (label, block)
        label = said[0]
        names[node] = label
        blocks[label] = said[1]
        return label

    own: set[str] = set()
    try:
        for node in edges:
            if node not in names:
                name(node)
        get = names.get
        add = own.add
        for s, p, o in iri_rows:
            if o[0] == "_":
                o = get(o) or name(o)  # a blank node that says nothing
            add(f"{s} {p} {o} .")
    except _Cycle:
        from aggregator.mapping.base import canonical_ntriples as rdfc

        text = "".join(f"{s} {p} {o} .\n" for s, p, o in rows)
        return rdfc(parse(text.encode(), format=RdfFormat.N_TRIPLES))
    lines = sorted(own)
    if lines and lines[-1] >= "_":  # a subject that is neither an IRI nor a blank node
        lines = sorted(own.union(*(block.split("\n") for block in blocks.values() if block)))
    else:
        lines.extend(blocks[label] for label in sorted(blocks) if blocks[label])
    return ("\n".join(lines) + "\n").encode() if lines else b""


TYPE = named(RDF_TYPE)


@lru_cache(maxsize=4096)  # the same links recur
def is_iri(text: str) -> bool:
    """An absolute http(s) or urn IRI that pyoxigraph accepts (RFC 3987)."""
    return bool(_IRI.match(text)) and iri(text) is not None


@lru_cache(maxsize=4096)
def iri(text: str) -> str | None:
    """``text`` as an N-Triples IRI term, or None when it is not a valid IRI (any scheme:
    mailto:, tel:); checked by pyoxigraph's parser, cached (the same links recur)."""
    try:
        NamedNode(text)
    except ValueError:
        return None
    return f"<{text}>"


_IRI = re.compile(r"^(?:https?://[^\s<>\"{}|\\^`]+|urn:[A-Za-z0-9][^\s<>\"{}|\\^`]*)$")
