"""The table of DCAT-AP 3.0.1 class ranges (``mappings/dcat-ap-3-ranges.toml``), compiled.

:mod:`aggregator.mapping.ranges` applies it to every mapped record; the file's header says
what each key means and ``docs/mappings/ranges.md`` shows the table.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pyoxigraph import NamedNode

from aggregator.core.errors import ConfigError
from aggregator.core.resources import bundled
from aggregator.core.vocab import RDF_TYPE, RDFS, SKOS
from aggregator.mapping.dcat.vocab import Vocabulary, load_vocabularies


@lru_cache(maxsize=256)
def _node(iri: str) -> NamedNode:
    return NamedNode(iri)


DEFAULT_RANGES_PATH = bundled("mappings", "dcat-ap-3-ranges.toml")
LiteralRule = Literal["node", "keyword"]
_KEYS = frozenset(
    {
        "properties",
        "class",
        "subjects",
        "described",
        "iri",
        "literal",
        "label",
        "lookup",
        "labels",
        "label-property",
        "requires",
        "fallback",
        "spec",
    }
)


@dataclass(frozen=True, slots=True)
class Range:
    """One row: values of ``properties`` (of subjects of ``subjects``, if any) are ``cls``."""

    properties: tuple[str, ...]
    cls: str
    spec: str
    subjects: frozenset[str] = frozenset()
    described: bool = False  # only a value the record describes is typed
    iri: bool = False  # the value must be an IRI (a blank node moves to dct:subject)
    literal: LiteralRule | None = None  # what a literal value becomes (None: left alone)
    label: str = RDFS + "label"  # the property that carries a literal's text on its node
    lookup: Vocabulary | None = None  # a literal found in this table becomes the term's IRI
    labels: Mapping[str, str] = field(default_factory=dict)  # term IRI -> English label
    label_property: str | None = None  # the property ``labels`` are written as
    requires: frozenset[str] = frozenset()  # described rows: the class's mandatory properties
    fallback: str | None = None  # described rows: where a value without them goes

    @property
    def cls_node(self) -> NamedNode:
        return _node(self.cls)


@dataclass(frozen=True, slots=True)
class LineKind:
    """What a statement of one predicate tells the range step (see :class:`RangeTable`)."""

    required: str | None  # the property, when a described row requires it
    link: bool  # a range property: the statement may have to be parsed
    label: str | None  # the property, when it is a label property the step reads


@dataclass(frozen=True, slots=True)
class RangeTable:
    """The compiled table: rows by property, and what to look for in N-Triples lines."""

    by_property: Mapping[str, tuple[Range, ...]]
    prefixes: Mapping[str, str]
    #: the label properties the step reads (a moved theme's labels, vocabulary labels)
    label_properties: frozenset[str]
    #: the mandatory properties the described rows ask for (their presence is read):
    #: ``<P>`` as written in N-Triples -> P
    required_tokens: Mapping[bytes, str]
    #: ``<P>`` as written in N-Triples -> the rows of P: the statements the step may parse
    #: (rdf:type and the required properties are read from the text)
    by_property_token: Mapping[bytes, tuple[Range, ...]]
    #: ``<P>`` -> P of the label properties (their statements are parsed only for values the
    #: step works on)
    label_tokens: Mapping[bytes, str]
    #: ``<P>`` -> what a line of P tells the step, for the three maps above in one lookup
    #: (a record's lines are read one by one: one lookup each is cheaper than three)
    line_kinds: Mapping[bytes, LineKind] = field(default_factory=dict)

    #: the CURIE of each property, class and label property of the table
    curies: Mapping[str, str] = field(default_factory=dict)

    def curie(self, iri: str) -> str:
        """``iri`` written with the table's prefixes (for messages)."""
        known = self.curies.get(iri)
        if known is not None:
            return known
        for prefix, base in self.prefixes.items():
            if iri.startswith(base) and len(iri) > len(base):
                return f"{prefix}:{iri[len(base) :]}"
        return f"<{iri}>"


def _expand(term: Any, prefixes: Mapping[str, str], where: str) -> str:
    if not isinstance(term, str) or not term:
        raise ConfigError(f"{where}: a term must be a non-empty string, not {term!r}")
    if term.startswith(("http://", "https://")):
        return term
    prefix, sep, local = term.partition(":")
    if not sep or prefix not in prefixes:
        raise ConfigError(f"{where}: {term!r} has no known prefix")
    return prefixes[prefix] + local


def _terms(
    entry: Mapping[str, Any], key: str, prefixes: Mapping[str, str], where: str
) -> list[str]:
    values = entry.get(key, [])
    if not isinstance(values, list):
        raise ConfigError(f"{where}: {key!r} must be a list")
    return [_expand(v, prefixes, where) for v in values]


def _row(
    entry: Mapping[str, Any],
    prefixes: Mapping[str, str],
    vocabularies: Mapping[str, Vocabulary],
    where: str,
) -> Range:
    unknown = set(entry) - _KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    properties = _terms(entry, "properties", prefixes, where)
    if not properties:
        raise ConfigError(f"{where}: 'properties' must name at least one property")
    spec = entry.get("spec")
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"{where}: 'spec' must say where the range is written")
    literal = entry.get("literal")
    if literal not in (None, "node", "keyword"):
        raise ConfigError(f'{where}: \'literal\' must be "node" or "keyword"')
    lookup = None
    if "lookup" in entry:
        lookup = vocabularies.get(entry["lookup"])
        if lookup is None:
            raise ConfigError(f"{where}: no vocabulary table {entry['lookup']!r}")
    labels: dict[str, str] = {}
    for name in entry.get("labels", []):
        table = vocabularies.get(name)
        if table is None:
            raise ConfigError(f"{where}: no vocabulary table {name!r}")
        labels.update((term.value, text) for term, text in table.labels.items())
    label_property = entry.get("label-property")
    if labels and not label_property:
        raise ConfigError(f"{where}: 'labels' needs 'label-property'")
    return Range(
        properties=tuple(properties),
        cls=_expand(entry.get("class"), prefixes, where),
        spec=spec,
        subjects=frozenset(_terms(entry, "subjects", prefixes, where)),
        described=bool(entry.get("described", False)),
        iri=bool(entry.get("iri", False)),
        literal=literal,
        label=_expand(entry["label"], prefixes, where) if "label" in entry else RDFS + "label",
        lookup=lookup,
        labels=MappingProxyType(labels),
        label_property=None if label_property is None else _expand(label_property, prefixes, where),
        requires=frozenset(_terms(entry, "requires", prefixes, where)),
        fallback=_expand(entry["fallback"], prefixes, where) if "fallback" in entry else None,
    )


def compile_ranges(data: Mapping[str, Any], vocabularies: Mapping[str, Vocabulary]) -> RangeTable:
    prefixes = data.get("prefixes", {})
    if not isinstance(prefixes, dict):
        raise ConfigError("[prefixes] must be a table")
    rows = data.get("range")
    if not isinstance(rows, list) or not rows:
        raise ConfigError("the range table has no [[range]] rows")
    by_property: dict[str, list[Range]] = {}
    for number, entry in enumerate(rows, start=1):
        row = _row(entry, prefixes, vocabularies, f"[[range]] #{number}")
        for prop in row.properties:
            if prop == RDF_TYPE:
                raise ConfigError(f"[[range]] #{number}: rdf:type has no range here")
            same = by_property.setdefault(prop, [])
            if any(not (r.subjects and row.subjects) for r in same):
                raise ConfigError(
                    f"[[range]] #{number}: <{prop}> has two rows; give each its 'subjects'"
                )
            same.append(row)
    labels = frozenset(
        {SKOS + "prefLabel", RDFS + "label"}
        | {r.label_property for rs in by_property.values() for r in rs if r.label_property}
    )
    required = frozenset(p for rs in by_property.values() for r in rs for p in r.requires)
    terms = {
        *by_property,
        *labels,
        *(iri for rs in by_property.values() for r in rs for iri in (r.cls, r.label)),
    }
    table = RangeTable(
        MappingProxyType({p: tuple(rows) for p, rows in by_property.items()}),
        MappingProxyType(dict(prefixes)),
        labels,
        # the token maps are plain dicts: the step looks up every line of every record in
        # them, and a mappingproxy's lookup is dearer
        {f"<{p}>".encode(): p for p in required},
        {f"<{p}>".encode(): tuple(rows) for p, rows in by_property.items()},
        {f"<{p}>".encode(): p for p in labels},
    )
    kinds = {
        token: LineKind(
            table.required_tokens.get(token),
            token in table.by_property_token,
            table.label_tokens.get(token),
        )
        for token in {*table.required_tokens, *table.by_property_token, *table.label_tokens}
        if token != f"<{RDF_TYPE}>".encode()  # read as a type, whatever else it is
    }
    return replace(
        table, curies=MappingProxyType({t: table.curie(t) for t in terms}), line_kinds=kinds
    )


@lru_cache(maxsize=4)
def load_ranges(path: Path = DEFAULT_RANGES_PATH) -> RangeTable:
    """The compiled table (once per process and file)."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as err:
        raise ConfigError(f"cannot read the range table {path}: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"invalid TOML in the range table {path}: {err}") from err
    return compile_ranges(data, load_vocabularies())
