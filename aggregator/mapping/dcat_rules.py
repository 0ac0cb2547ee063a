"""The declarative DCAT-AP 2 -> 3 rewrite rules (``mappings/dcat-ap-3.toml``) and their engine.

The TOML file is the single place where a rewrite is defined: a metadata specialist reads and
edits it; :func:`load_rules` compiles it into lookup tables keyed by pyoxigraph terms and
:meth:`RuleSet.apply` rewrites a list of quads with them. Each applied rewrite is recorded as
a :class:`Rewrite` (rule id, the quad it replaced, the quads it produced) so that findings,
documentation and the "no triple lost" accounting test all come from the same trace.

Vocabulary tables (``mappings/dcat-ap-3-vocabularies.toml``, :mod:`.dcat_vocab`) give the IRIs
``literal-to-term`` rules look literals up in; the ``[[format]]`` table of the rule file gives
the two built-in tables ``file-type`` and ``media-type``. ``range-class`` rules run after the
per-triple rewrites, on the whole description (:mod:`.dcat_ranges`).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pyoxigraph import BlankNode, Literal, NamedNode, Quad

from aggregator.errors import ConfigError
from aggregator.mapping.dcat_vocab import (
    DEFAULT_VOCABULARIES_PATH,
    Vocabulary,
    load_vocabularies,
    lookup_key,
)
from aggregator.models import Finding, Severity, Stage

if TYPE_CHECKING:
    from aggregator.mapping.dcat_ranges import Index

XSD = "http://www.w3.org/2001/XMLSchema#"
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
RDFS_LABEL = NamedNode("http://www.w3.org/2000/01/rdf-schema#label")
XSD_STRING = NamedNode(XSD + "string")

KINDS = (
    "rename-property",
    "rename-class",
    "map-value",
    "literal-datatype",
    "literal-to-term",
    "literal-url",
    "range-class",
)
NOT_TYPED = "range-class-not-typed"  # reported when a range-class rule may not type a node
DEFAULT_RULES_PATH = Path(__file__).resolve().parents[2] / "mappings" / "dcat-ap-3.toml"


@dataclass(frozen=True, slots=True)
class RangeRow:
    """One row of a range-class rule, as written (full IRIs)."""

    properties: tuple[str, ...]
    cls: str
    requires: tuple[str, ...]
    at_most_one: tuple[str, ...]
    spec: str


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the rule table, with CURIEs expanded to full IRIs."""

    id: str
    kind: str
    spec: str
    source: str = ""  # the term rewritten: property, class or value IRI
    target: str = ""  # the term written instead (a datatype for literal-datatype)
    property: str = ""  # the first (often only) property of the rule
    check: str = ""  # literal-datatype: name of the lexical test
    lookup: str = ""  # literal-to-term: name of a vocabulary table ("" = none)
    fallback_class: str = ""  # literal-to-term: class of the node kept for an unknown literal
    fallback_id: str = ""
    fallback_label: str = ""  # literal-to-term: property carrying the original literal
    properties: tuple[str, ...] = ()  # every property the rule applies to
    ranges: tuple[RangeRow, ...] = ()  # range-class: one row per range
    email: bool = False  # literal-url: bare e-mail addresses become mailto: IRIs


# flags of RuleSet._dispatch: what to do with a triple, by its predicate
_ANY = 1  # some rule may rewrite it, whatever its object
_LITERAL = 2  # some rule may rewrite it when its object is a literal
_RANGE = 4  # its IRI / blank-node object may need the class of its range
_TYPE = 8  # rdf:type
_DATATYPE = 16  # a literal-datatype rule; literals of an accepted datatype need no rewrite


class Rewrite(NamedTuple):
    """One applied rewrite: ``removed`` was replaced by ``added`` under rule ``rule``.

    (A tuple rather than a dataclass: several are made per record, and it is 3x cheaper.)
    """

    rule: str
    removed: Quad
    added: tuple[Quad, ...]
    severity: Severity = Severity.INFO
    note: str = ""
    triples: int = 1  # how many triples this entry stands for (range-class: one per rule)


Check = Callable[[str], tuple[str, str] | None]


def _non_negative_integer(lexical: str) -> tuple[str, str] | None:
    text = lexical.strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite() or value < 0 or value != value.to_integral_value():
        return None
    return str(int(value)), ""


def _decimal(lexical: str) -> tuple[str, str] | None:
    text = lexical.strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    return (text if re.fullmatch(r"[+-]?[0-9]*\.?[0-9]+", text) else str(value)), ""


_HEX = re.compile(r"^(?:[0-9A-Fa-f]{2})+$")


def _hex_binary(lexical: str) -> tuple[str, str] | None:
    text = lexical.strip()
    return (text, "") if _HEX.match(text) else None


_DURATION = re.compile(
    r"^-?P(?=\d|T\d)(?:\d+Y)?(?:\d+M)?(?:\d+D)?(?:T(?=\d)(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$"
)


def _duration(lexical: str) -> tuple[str, str] | None:
    text = lexical.strip()
    return (text, "") if _DURATION.match(text) else None


_TZ = r"(?:Z|[+-](?:0\d|1[0-3]):[0-5]\d|[+-]14:00)?"
_DATE_FORMS = (
    (re.compile(r"^\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])" + _TZ + "$"), XSD + "date"),
    (
        re.compile(
            r"^\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])T(?:[01]\d|2[0-3]):[0-5]\d"
            r"(?::[0-5]\d(?:\.\d+)?)?" + _TZ + "$"
        ),
        XSD + "dateTime",
    ),
    (re.compile(r"^\d{4}-(?:0[1-9]|1[0-2])" + _TZ + "$"), XSD + "gYearMonth"),
    (re.compile(r"^\d{4}" + _TZ + "$"), XSD + "gYear"),
)


def _temporal(lexical: str) -> tuple[str, str] | None:
    """xsd:date, xsd:dateTime, xsd:gYearMonth or xsd:gYear, by the lexical form."""
    text = lexical.strip()
    for pattern, datatype in _DATE_FORMS:
        if pattern.match(text):
            if datatype == XSD + "dateTime" and text.count(":") == 1 + (text[-6:-5] in "+-"):
                text = text[:16] + ":00" + text[16:]  # hh:mm -> hh:mm:ss
            return text, datatype
    return None


# Lexical tests for literal-datatype rules: return (canonical lexical form, datatype IRI or ""
# for the rule's datatype), or None when the value is not valid.
CHECKS: Mapping[str, Check] = {
    "non-negative-integer": _non_negative_integer,
    "decimal": _decimal,
    "hex-binary": _hex_binary,
    "duration": _duration,
    "temporal": _temporal,
}
# Source datatypes a literal-datatype rule may convert from (others are reported, not changed).
_NUMERIC = frozenset(
    XSD + name
    for name in (
        "string", "integer", "decimal", "double", "float", "long", "int", "short", "byte",
        "unsignedLong", "unsignedInt", "positiveInteger", "nonNegativeInteger",
    )
)  # fmt: skip
# the datatypes each check may convert from (others are reported, not changed)
_CONVERTIBLE: Mapping[str, frozenset[str]] = {
    "non-negative-integer": _NUMERIC,
    "decimal": _NUMERIC,
    "hex-binary": frozenset({XSD + "string"}),
    "duration": frozenset({XSD + "string"}),
    "temporal": frozenset({XSD + "string"}),
}
# datatypes accepted as they are (no finding) besides the rule's own datatype
_ACCEPTED: Mapping[str, frozenset[str]] = {
    "temporal": frozenset(XSD + n for n in ("date", "dateTime", "gYear", "gYearMonth")),
}
_URL = re.compile(r"^(?:https?|ftp)://[^\s<>\"{}|\\^`]+$", re.IGNORECASE)
_EMAIL = re.compile(r"^(?:mailto:)?([^@\s<>\"]+@[^@\s<>\"]+\.[A-Za-z]{2,})$", re.IGNORECASE)

__all__ = ["CHECKS", "KINDS", "RuleSet", "findings_from", "load_rules", "lookup_key"]


@dataclass(frozen=True, slots=True)
class _LiteralTerm:
    rule: str
    fallback_rule: str
    table: Mapping[str, NamedNode] | Vocabulary | None
    fallback_class: NamedNode
    fallback_label: NamedNode


@dataclass(frozen=True, slots=True)
class RangeClass:
    """A compiled range-class rule: values of ``property`` get ``rdf:type cls`` when untyped."""

    rule: str
    cls: NamedNode
    requires: frozenset[NamedNode]
    at_most_one: frozenset[NamedNode]
    suffix: str = ""  # ' <rdf:type> <class> .': the end of the N-Triples line that types a node
    checked: bool = False  # requires or at_most_one is not empty


def _as_iri(text: str, email: bool) -> NamedNode | None:
    value = text.strip()
    if email:
        match = _EMAIL.match(value)
        value = f"mailto:{match.group(1)}" if match else ""
    elif not _URL.match(value):
        return None
    try:
        return NamedNode(value) if value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class RuleSet:
    """The compiled rule table. Immutable; safe to share between threads."""

    rules: tuple[Rule, ...]
    meta: Mapping[str, str]
    property_renames: Mapping[NamedNode, tuple[NamedNode, str]] = field(default_factory=dict)
    class_renames: Mapping[NamedNode, tuple[NamedNode, str]] = field(default_factory=dict)
    value_maps: Mapping[NamedNode, Mapping[NamedNode, tuple[NamedNode, str]]] = field(
        default_factory=dict
    )
    literal_datatypes: Mapping[
        NamedNode, tuple[NamedNode, Check, str, frozenset[str], frozenset[str]]
    ] = field(default_factory=dict)
    literal_terms: Mapping[NamedNode, _LiteralTerm] = field(default_factory=dict)
    literal_urls: Mapping[NamedNode, tuple[str, bool]] = field(default_factory=dict)
    ranges: Mapping[NamedNode, RangeClass] = field(default_factory=dict)
    file_types: Mapping[str, NamedNode] = field(default_factory=dict)
    media_types: Mapping[str, NamedNode] = field(default_factory=dict)
    vocabularies: Mapping[str, Vocabulary] = field(default_factory=dict)
    _watched: frozenset[NamedNode] = frozenset()
    _literal_only: frozenset[NamedNode] = frozenset()  # watched only for literal values
    _dispatch: Mapping[NamedNode, int] = field(default_factory=dict)  # predicate -> flags
    # literal-datatype predicate -> datatypes its literals may keep (only if no other rule)
    _accepted: Mapping[NamedNode, frozenset[NamedNode]] = field(default_factory=dict)

    @cached_property
    def by_id(self) -> Mapping[str, Rule]:
        """Rule by id, fallback ids included."""
        out = {rule.id: rule for rule in self.rules}
        out.update({rule.fallback_id: rule for rule in self.rules if rule.fallback_id})
        return out

    @property
    def rule_ids(self) -> tuple[str, ...]:
        ids: list[str] = []
        for rule in self.rules:
            ids.append(rule.id)
            if rule.fallback_id and rule.fallback_id != rule.id:
                ids.append(rule.fallback_id)
        if self.ranges:
            ids.append(NOT_TYPED)
        return tuple(ids)

    def apply(self, quads: Iterable[Quad]) -> tuple[list[Quad], list[Rewrite]]:
        """Rewrite quads (all in the default graph); untouched quads are passed through as is.

        Then give untyped values of range-class properties their class (:mod:`.dcat_ranges`).
        """
        out, trace, _ = self.apply_split(quads, ground=False)
        return out, trace

    def apply_split(
        self,
        quads: Iterable[Quad],
        ground: bool = True,
        index: Index | None = None,
    ) -> tuple[list[Quad], list[Rewrite], list[str]]:
        """:meth:`apply`, with the ``rdf:type`` triples added to IRI values given apart.

        With ``ground``, those triples are returned as N-Triples lines (``<iri> <rdf:type>
        <class> .``) instead of quads: they hold no blank node, so they do not change the
        canonical blank node labels, and the mapper adds them to the canonical lines directly
        (building and canonicalising ~20 more quads per record cost ~25 % of the mapping).
        ``index``: the quads describing a node in this description, if the caller has them
        indexed (the range checks then count a node's properties there instead of scanning).

        One loop does both the per-triple rewrites and the collection of typed nodes and range
        candidates: pyoxigraph builds a new Python object on every term access, so each quad's
        terms are read once.
        """
        out: list[Quad] = []
        trace: list[Rewrite] = []
        dispatch = self._dispatch.get
        class_renames = self.class_renames
        ranges = self.ranges
        typed: set[object] = set()
        candidates: dict[object, tuple[Quad, RangeClass]] = {}
        append = out.append
        for quad in quads:
            predicate = quad.predicate
            flags = dispatch(predicate)
            if flags is None:
                append(quad)
                continue
            if flags & _TYPE:
                if flags & _ANY and quad.object in class_renames:
                    new = self._rewrite(quad, predicate, trace)
                    if new is not None:
                        out.extend(new)
                        for q in new:
                            _note(q, typed, candidates, ranges)
                        continue
                append(quad)
                typed.add(quad.subject)
                continue
            obj = quad.object
            if flags & _ANY or (
                flags & _LITERAL
                and isinstance(obj, Literal)
                and not (flags & _DATATYPE and obj.datatype in self._accepted[predicate])
            ):
                new = self._rewrite(quad, predicate, trace)
                if new is not None:
                    out.extend(new)
                    for q in new:
                        _note(q, typed, candidates, ranges)
                    continue
            append(quad)
            if flags & _RANGE and not isinstance(obj, Literal) and obj not in candidates:
                candidates[obj] = (quad, ranges[predicate])
        lines: list[str] = []
        if candidates:
            from aggregator.mapping.dcat_ranges import add_range_types

            add_range_types(
                out,
                trace,
                typed,
                candidates,
                lines if ground else None,
                index,
                self.property_renames,
            )
        return out, trace, lines

    def _rewrite(self, quad: Quad, predicate: NamedNode, trace: list[Rewrite]) -> list[Quad] | None:
        subject, obj = quad.subject, quad.object
        changed = False
        renamed = self.property_renames.get(predicate)
        if renamed is not None:
            predicate, rule_id = renamed
            changed = True
            trace.append(Rewrite(rule_id, quad, (Quad(subject, predicate, obj),)))
        if predicate == RDF_TYPE and isinstance(obj, NamedNode):
            target = self.class_renames.get(obj)
            if target is not None:
                obj = target[0]
                changed = True
                trace.append(Rewrite(target[1], quad, (Quad(subject, predicate, obj),)))
        elif isinstance(obj, NamedNode):
            mapped = self.value_maps.get(predicate, {}).get(obj)
            if mapped is not None:
                obj = mapped[0]
                changed = True
                trace.append(Rewrite(mapped[1], quad, (Quad(subject, predicate, obj),)))
        elif isinstance(obj, Literal):
            typed = self.literal_datatypes.get(predicate)
            if typed is not None and obj.language is None:
                datatype, check, rule_id, convertible, accepted = typed
                if obj.datatype != datatype and obj.datatype.value not in accepted:
                    result = check(obj.value) if obj.datatype.value in convertible else None
                    if result is None:
                        note = f"{obj.value!r} kept"
                        trace.append(Rewrite(rule_id, quad, (quad,), Severity.WARNING, note))
                    elif result[1] != obj.datatype.value or result[0] != obj.value:
                        obj = Literal(
                            result[0], datatype=NamedNode(result[1]) if result[1] else datatype
                        )
                        changed = True
                        trace.append(Rewrite(rule_id, quad, (Quad(subject, predicate, obj),)))
            term = self.literal_terms.get(predicate)
            url = self.literal_urls.get(predicate)
            if (term is not None or url is not None) and isinstance(obj, Literal):
                return self._literal_to_term(quad, subject, predicate, obj, term, url, trace)
        if not changed:
            return None
        return [Quad(subject, predicate, obj)]

    @staticmethod
    def _literal_to_term(
        quad: Quad,
        subject: NamedNode | BlankNode | Any,
        predicate: NamedNode,
        obj: Literal,
        term: _LiteralTerm | None,
        url: tuple[str, bool] | None,
        trace: list[Rewrite],
    ) -> list[Quad]:
        """A literal where a resource is due: vocabulary IRI, else URL as IRI, else typed node."""
        if term is not None and term.table is not None:
            table = term.table
            iri = (
                table.lookup(obj.value)
                if isinstance(table, Vocabulary)
                else table.get(lookup_key(obj.value))
            )
            if iri is not None:
                trace.append(Rewrite(term.rule, quad, (Quad(subject, predicate, iri),)))
                return [Quad(subject, predicate, iri)]
        if url is not None:
            iri = _as_iri(obj.value, url[1])
            if iri is not None:
                trace.append(Rewrite(url[0], quad, (Quad(subject, predicate, iri),)))
                return [Quad(subject, predicate, iri)]
        if term is None:
            return [quad]
        node = BlankNode()
        added = (
            Quad(subject, predicate, node),
            Quad(node, RDF_TYPE, term.fallback_class),
            Quad(node, term.fallback_label, obj),
        )
        trace.append(Rewrite(term.fallback_rule, quad, added))
        return list(added)


def _note(
    quad: Quad,
    typed: set[object],
    candidates: dict[object, tuple[Quad, RangeClass]],
    ranges: Mapping[NamedNode, RangeClass],
) -> None:
    """Note the typed subject / range candidate of a triple produced by a rewrite."""
    predicate = quad.predicate
    if predicate == RDF_TYPE:
        typed.add(quad.subject)
        return
    rng = ranges.get(predicate)
    if rng is not None:
        obj = quad.object
        if not isinstance(obj, Literal) and obj not in candidates:
            candidates[obj] = (quad, rng)


def findings_from(trace: Iterable[Rewrite], rules: RuleSet) -> list[Finding]:
    """One finding per (rule, severity): what was rewritten, how often, where first."""
    by_id = rules.by_id
    grouped: dict[tuple[str, Severity], list[Rewrite]] = {}
    for rewrite in trace:
        grouped.setdefault((rewrite.rule, rewrite.severity), []).append(rewrite)
    findings = []
    for (rule_id, severity), rewrites in grouped.items():
        first = rewrites[0].removed
        rule = by_id.get(rule_id)
        what = _describe(rule, rule_id, rewrites[0])
        total = sum(r.triples for r in rewrites)
        count = f"{total} triple" + ("s" if total > 1 else "")
        subject = first.subject
        findings.append(
            Finding(
                stage=Stage.MAP,
                severity=severity,
                rule=rule_id,
                message=f"{what} ({count})",
                location=subject.value if isinstance(subject, NamedNode) else None,
                path=first.predicate.value,
            )
        )
    return findings


def _describe(rule: Rule | None, rule_id: str, example: Rewrite) -> str:
    if rule_id == NOT_TYPED:
        return f"value not given the class its DCAT-AP 3 range requires: {example.note}"
    if rule is None:
        return rule_id
    prop = example.removed.predicate.value
    if example.severity is not Severity.INFO:
        return f"<{prop}> value not converted to <{rule.target}>: {example.note}"
    if rule.kind in ("rename-property", "rename-class"):
        return f"<{rule.source}> rewritten to <{rule.target}>"
    if rule.kind == "map-value":
        return f"<{rule.property}> value <{rule.source}> rewritten to <{rule.target}>"
    if rule.kind == "literal-datatype":
        return f"<{prop}> literal given the datatype DCAT-AP 3 requires"
    if rule.kind == "literal-url":
        return f"<{prop}> literal holding a URL or e-mail address replaced by the IRI"
    if rule.kind == "range-class":
        return "untyped values given the class their DCAT-AP 3 range requires"
    if rule_id == rule.fallback_id:
        return f"unrecognised <{prop}> literal kept as a <{rule.fallback_class}> node"
    return f"<{prop}> literal replaced by a {rule.lookup} IRI"


def _expand(term: str, prefixes: Mapping[str, str], where: str) -> str:
    if "://" in term or term.startswith("urn:"):
        return term
    prefix, sep, local = term.partition(":")
    if not sep or prefix not in prefixes:
        raise ConfigError(f"{where}: unknown prefix in {term!r}")
    return prefixes[prefix] + local


def _str(entry: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {key!r} must be a non-empty string")
    return value


def _format_tables(data: Mapping[str, Any]) -> tuple[dict[str, NamedNode], dict[str, NamedNode]]:
    table = data.get("table", {})
    ft_base = _str(table, "file-type-base", "[table]")
    mt_base = _str(table, "media-type-base", "[table]")
    file_types: dict[str, NamedNode] = {}
    media_types: dict[str, NamedNode] = {}
    for n, entry in enumerate(data.get("format", [])):
        where = f"[[format]] #{n + 1}"
        code = entry.get("file-type")
        media = entry.get("media-type")
        names = [str(a) for a in entry.get("aliases", [])]
        names += [k for k in (code, media) if isinstance(k, str)]
        for name in names:
            key = lookup_key(name)
            if code and file_types.setdefault(key, NamedNode(ft_base + code)) != NamedNode(
                ft_base + code
            ):
                raise ConfigError(f"{where}: {key!r} already maps to another file type")
            if media:  # a media-type alias ('text/xml') stands for itself, not for `media`
                own = name.split(";", 1)[0].strip().casefold()
                media_types.setdefault(key, NamedNode(mt_base + (own if "/" in own else media)))
        if not code and not media:
            raise ConfigError(f"{where}: needs a file-type or a media-type")
    return file_types, media_types


def _list(entry: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: {key!r} must be a list of strings")
    return list(value)


def compile_rules(
    data: Mapping[str, Any], vocabularies: Mapping[str, Vocabulary] | None = None
) -> RuleSet:
    """Build a RuleSet from the parsed TOML document; raise ConfigError on any mistake."""
    prefixes = {str(k): str(v) for k, v in data.get("prefixes", {}).items()}
    file_types, media_types = _format_tables(data)
    tables: dict[str, Mapping[str, NamedNode] | Vocabulary] = {
        "file-type": file_types,
        "media-type": media_types,
        **(vocabularies or {}),
    }
    rules: list[Rule] = []
    prop_renames: dict[NamedNode, tuple[NamedNode, str]] = {}
    class_renames: dict[NamedNode, tuple[NamedNode, str]] = {}
    value_maps: dict[NamedNode, dict[NamedNode, tuple[NamedNode, str]]] = {}
    datatypes: dict[NamedNode, tuple[NamedNode, Check, str, frozenset[str], frozenset[str]]] = {}
    terms: dict[NamedNode, _LiteralTerm] = {}
    urls: dict[NamedNode, tuple[str, bool]] = {}
    ranges: dict[NamedNode, RangeClass] = {}
    seen: set[str] = set()
    for n, entry in enumerate(data.get("rule", [])):
        rule_id = _str(entry, "id", f"[[rule]] #{n + 1}")
        where = f"rule {rule_id!r}"
        kind = _str(entry, "kind", where)
        spec = _str(entry, "spec", where)
        if kind not in KINDS:
            raise ConfigError(f"{where}: unknown kind {kind!r} (one of {', '.join(KINDS)})")

        def term(key: str, entry: Mapping[str, Any] = entry, where: str = where) -> str:
            return _expand(_str(entry, key, where), prefixes, where)

        def props(entry: Mapping[str, Any] = entry, where: str = where) -> tuple[str, ...]:
            names = _list(entry, "properties", where)
            if "property" in entry:
                names.insert(0, _str(entry, "property", where))
            if not names:
                raise ConfigError(f"{where}: needs 'property' or 'properties'")
            return tuple(_expand(name, prefixes, where) for name in names)

        if kind in ("rename-property", "rename-class"):
            rule = Rule(rule_id, kind, spec, source=term("from"), target=term("to"))
            table = prop_renames if kind == "rename-property" else class_renames
            table[NamedNode(rule.source)] = (NamedNode(rule.target), rule_id)
        elif kind == "map-value":
            rule = Rule(rule_id, kind, spec, term("from"), term("to"), term("property"))
            value_maps.setdefault(NamedNode(rule.property), {})[NamedNode(rule.source)] = (
                NamedNode(rule.target),
                rule_id,
            )
        elif kind == "literal-datatype":
            check = _str(entry, "check", where)
            if check not in CHECKS:
                raise ConfigError(f"{where}: unknown check {check!r} (one of {sorted(CHECKS)})")
            names = props()
            rule = Rule(
                rule_id,
                kind,
                spec,
                target=term("datatype"),
                property=names[0],
                check=check,
                properties=names,
            )
            for name in names:
                datatypes[NamedNode(name)] = (
                    NamedNode(rule.target),
                    CHECKS[check],
                    rule_id,
                    _CONVERTIBLE[check],
                    _ACCEPTED.get(check, frozenset()),
                )
        elif kind == "literal-url":
            names = props()
            email = bool(entry.get("email", False))
            rule = Rule(rule_id, kind, spec, property=names[0], properties=names, email=email)
            for name in names:
                urls[NamedNode(name)] = (rule_id, email)
        elif kind == "range-class":
            rows: list[RangeRow] = []
            for m, row in enumerate(entry.get("range", [])):
                at = f"{where}, range #{m + 1}"
                names = props(row, at)
                compiled = RangeClass(
                    rule_id,
                    NamedNode(_expand(_str(row, "class", at), prefixes, at)),
                    frozenset(
                        NamedNode(_expand(p, prefixes, at)) for p in _list(row, "requires", at)
                    ),
                    frozenset(
                        NamedNode(_expand(p, prefixes, at)) for p in _list(row, "at-most-one", at)
                    ),
                )
                compiled = replace(
                    compiled,
                    suffix=f" <{RDF_TYPE.value}> <{compiled.cls.value}> .",
                    checked=bool(compiled.requires or compiled.at_most_one),
                )
                for name in names:
                    if NamedNode(name) in ranges:
                        raise ConfigError(f"{at}: <{name}> already has a range")
                    ranges[NamedNode(name)] = compiled
                rows.append(
                    RangeRow(
                        names,
                        compiled.cls.value,
                        tuple(sorted(p.value for p in compiled.requires)),
                        tuple(sorted(p.value for p in compiled.at_most_one)),
                        _str(row, "spec", at),
                    )
                )
            if not rows:
                raise ConfigError(f"{where}: needs at least one [[rule.range]]")
            rule = Rule(rule_id, kind, spec, property=rows[0].properties[0], ranges=tuple(rows))
        else:
            lookup = str(entry.get("lookup", ""))
            if lookup and lookup not in tables:
                raise ConfigError(f"{where}: unknown lookup table {lookup!r} ({sorted(tables)})")
            names = props()
            label = entry.get("fallback-label", "rdfs:label")
            rule = Rule(
                rule_id,
                kind,
                spec,
                property=names[0],
                properties=names,
                lookup=lookup,
                fallback_class=term("fallback-class"),
                fallback_id=_str(entry, "fallback-id", where) if lookup else rule_id,
                fallback_label=_expand(str(label), prefixes, where),
            )
            for name in names:
                terms[NamedNode(name)] = _LiteralTerm(
                    rule_id,
                    rule.fallback_id,
                    tables[lookup] if lookup else None,
                    NamedNode(rule.fallback_class),
                    NamedNode(rule.fallback_label),
                )
        for rid in {rule.id, rule.fallback_id}:
            if rid and (rid in seen or rid == NOT_TYPED):
                raise ConfigError(f"{where}: duplicate rule id {rid!r}")
            seen.add(rid)
        rules.append(rule)
    for renamed in prop_renames.values():
        if renamed[0] in prop_renames:
            raise ConfigError(f"rule {renamed[1]!r}: target is itself renamed (chains not allowed)")
    watched = set(prop_renames) | set(value_maps) | set(datatypes) | set(terms) | set(urls)
    if class_renames:
        watched.add(RDF_TYPE)
    meta = {str(k): str(v) for k, v in data.get("meta", {}).items()}
    literal_only = frozenset(
        (set(datatypes) | set(terms) | set(urls)) - set(prop_renames) - set(value_maps)
    )
    accepted = {
        predicate: frozenset({entry[0], *(NamedNode(d) for d in entry[4])})
        for predicate, entry in datatypes.items()
        if predicate not in terms and predicate not in urls and predicate in literal_only
    }
    return RuleSet(
        rules=tuple(rules),
        meta=meta,
        property_renames=prop_renames,
        class_renames=class_renames,
        value_maps=value_maps,
        literal_datatypes=datatypes,
        literal_terms=terms,
        literal_urls=urls,
        ranges=ranges,
        file_types=file_types,
        media_types=media_types,
        vocabularies=dict(vocabularies or {}),
        _watched=frozenset(watched),
        _literal_only=literal_only,
        _dispatch=_dispatch_table(watched, literal_only, ranges, accepted),
        _accepted=accepted,
    )


def _dispatch_table(
    watched: set[NamedNode],
    literal_only: frozenset[NamedNode],
    ranges: Mapping[NamedNode, Any],
    accepted: Mapping[NamedNode, frozenset[NamedNode]],
) -> dict[NamedNode, int]:
    table: dict[NamedNode, int] = {RDF_TYPE: _TYPE}
    for predicate in accepted:
        table[predicate] = _DATATYPE
    for predicate in watched:
        table[predicate] = table.get(predicate, 0) | (
            _LITERAL if predicate in literal_only else _ANY
        )
    for predicate in ranges:
        table[predicate] = table.get(predicate, 0) | _RANGE
    return table


@lru_cache(maxsize=8)
def load_rules(
    path: Path = DEFAULT_RULES_PATH, vocabularies: Path = DEFAULT_VOCABULARIES_PATH
) -> RuleSet:
    """Read and compile a rule file and its vocabulary tables (cached; immutable)."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as err:
        raise ConfigError(f"cannot read mapping rules {path}: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"invalid TOML in mapping rules {path}: {err}") from err
    return compile_rules(data, load_vocabularies(vocabularies))
