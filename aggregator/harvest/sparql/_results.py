"""Rows of a SPARQL SELECT answer as N-Triples term strings, fast.

The closure query of the ``sparql`` harvester answers thousands of rows per batch; making a
pyoxigraph term object per cell costs more than the endpoint's work. So the rows are read as
text: TSV (preferred: half the bytes of JSON) cell by cell, SPARQL JSON with :mod:`json`, and
each term is written the way N-Triples writes it, ready to be joined into a payload.

TSV cells use the SPARQL/Turtle term syntax: ``<iri>``, ``_:label`` and ``"..."`` literals are
N-Triples already (``"..."`` with Turtle's escapes, which N-Triples shares); the Turtle
shorthands (``1``, ``1.5``, ``1e3``, ``true``) become typed literals, and the rarer Turtle-only
forms (``'...'``, long strings) are rewritten by pyoxigraph. A cell that is none of these is a
``ValueError``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence

from pyoxigraph import Literal, RdfFormat, parse

XSD = "http://www.w3.org/2001/XMLSchema#"
TSV = "text/tab-separated-values"
JSON = "application/sparql-results+json"
#: the Accept of the closure query: TSV, or JSON from endpoints that do not write TSV
ACCEPT = f"{TSV}, {JSON};q=0.9"

_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_DECIMAL = re.compile(r"[+-]?[0-9]*\.[0-9]+\Z")
_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][+-]?[0-9]+\Z")
_SHORT_STRING = re.compile(
    r'"(?:[^"\\\n\r]|\\.)*"(?:@[A-Za-z]+(?:-[A-Za-z0-9]+)*|\^\^<[^<>"{}|^`\\\s]*>)?\Z'
)
_IRI = re.compile(r'<[^<>"{}|^`\\\x00-\x20]*>\Z')
_BNODE = re.compile(r"_:[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")
_LANG = re.compile(r"[A-Za-z]+(?:-[A-Za-z0-9]+)*\Z")
_BNODE_LABEL = re.compile(r"[A-Za-z0-9_]+\Z")

Row = tuple[str, str | None, str | None, bool]


def tsv_term(cell: str) -> str:
    """A TSV cell (SPARQL/Turtle syntax) as an N-Triples term."""
    first = cell[:1]
    if first == "<":
        if _IRI.match(cell):
            return cell
    elif first == "_":
        if _BNODE.match(cell):
            return cell
    elif first == '"' and not cell.startswith('"""'):
        if _SHORT_STRING.match(cell):
            return cell
    elif cell in ("true", "false"):
        return f'"{cell}"^^<{XSD}boolean>'
    elif _INTEGER.match(cell):
        return f'"{cell}"^^<{XSD}integer>'
    elif _DECIMAL.match(cell):
        return f'"{cell}"^^<{XSD}decimal>'
    elif _DOUBLE.match(cell):
        return f'"{cell}"^^<{XSD}double>'
    if first in ('"', "'"):  # a Turtle-only string form: let a Turtle parser read it
        try:
            quads = list(parse(f"<x:s> <x:p> {cell} .", RdfFormat.TURTLE))
        except SyntaxError as err:
            raise ValueError(f"not an RDF term: {cell[:80]!r}") from err
        obj = quads[0].object
        if len(quads) == 1 and isinstance(obj, Literal):
            return str(obj)
    raise ValueError(f"not an RDF term: {cell[:80]!r}")


def tsv_rows(content: bytes, variables: Sequence[str]) -> Iterator[Row]:
    """``(s, p, o, reached)`` rows of a TSV answer whose head names ``variables``."""
    lines = content.decode("utf-8").split("\n")
    head = [v.strip().lstrip("?$") for v in lines[0].rstrip("\r").split("\t")]
    try:
        at = [head.index(v) for v in variables]
    except ValueError as err:
        raise ValueError(f"the answer's variables are {head}, not {list(variables)}") from err
    width = len(head)
    si, pi, oi, ri = at
    terms: dict[str, str] = {}  # subjects, predicates and vocabulary terms repeat

    def term(cell: str) -> str:
        known = terms.get(cell)
        if known is None:
            known = terms[cell] = tsv_term(cell)
        return known

    for line in lines[1:]:
        line = line.rstrip("\r")
        if not line:
            continue
        cells = line.split("\t")
        if len(cells) != width:
            raise ValueError(f"a row of {len(cells)} cells under a head of {width}")
        p, o = cells[pi], cells[oi]
        yield term(cells[si]), term(p) if p else None, term(o) if o else None, bool(cells[ri])


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")


def _bnode(label: str, renamed: dict[str, str]) -> str:
    if _BNODE_LABEL.match(label):
        return "_:" + label
    return renamed.setdefault(label, f"_:r-{len(renamed)}")  # "-": never a kept label


def json_term(cell: object, renamed: dict[str, str]) -> str:
    """A SPARQL JSON results cell as an N-Triples term (blank-node labels made safe)."""
    if not isinstance(cell, dict):
        raise ValueError(f"not an RDF term: {cell!r}")
    kind, value = cell.get("type"), cell.get("value")
    if not isinstance(value, str):
        raise ValueError(f"not an RDF term: {cell!r}")
    if kind == "uri":
        term = f"<{value}>"
        if not _IRI.match(term):
            raise ValueError(f"not an IRI that can be written: {value[:80]!r}")
        return term
    if kind == "bnode":
        return _bnode(value, renamed)
    if kind in ("literal", "typed-literal"):
        lang, datatype = cell.get("xml:lang"), cell.get("datatype")
        if isinstance(lang, str) and lang:
            if not _LANG.match(lang):
                raise ValueError(f"not a language tag: {lang[:40]!r}")
            return f'"{_escape(value)}"@{lang}'
        if isinstance(datatype, str) and datatype != XSD + "string":
            if not _IRI.match(f"<{datatype}>"):
                raise ValueError(f"not a datatype IRI: {datatype[:80]!r}")
            return f'"{_escape(value)}"^^<{datatype}>'
        return f'"{_escape(value)}"'
    raise ValueError(f"not an RDF term: {cell!r}")


def json_rows(content: bytes, variables: Sequence[str]) -> Iterator[Row]:
    """``(s, p, o, reached)`` rows of a SPARQL JSON answer."""
    doc = json.loads(content)
    bindings = doc["results"]["bindings"]
    if not isinstance(bindings, list):
        raise ValueError("results.bindings is not a list")
    s_var, p_var, o_var, r_var = variables
    renamed: dict[str, str] = {}
    for row in bindings:
        if not isinstance(row, dict):
            raise ValueError(f"a row that is not an object: {row!r}")
        p, o = row.get(p_var), row.get(o_var)
        yield (
            json_term(row.get(s_var), renamed),
            json_term(p, renamed) if p is not None else None,
            json_term(o, renamed) if o is not None else None,
            r_var in row,
        )
