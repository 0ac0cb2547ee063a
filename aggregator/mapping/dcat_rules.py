"""The declarative DCAT-AP 2 -> 3 rewrite rules (``mappings/dcat-ap-3.toml``) and their engine.

The TOML file is the single place where a rewrite is defined: a metadata specialist reads and
edits it; :func:`load_rules` compiles it into lookup tables keyed by pyoxigraph terms and
:meth:`RuleSet.apply` rewrites a list of quads with them. Each applied rewrite is recorded as
a :class:`Rewrite` (rule id, the quad it replaced, the quads it produced) so that findings,
documentation and the "no triple lost" accounting test all come from the same trace.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

from pyoxigraph import BlankNode, Literal, NamedNode, Quad

from aggregator.errors import ConfigError
from aggregator.models import Finding, Severity, Stage

XSD = "http://www.w3.org/2001/XMLSchema#"
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
RDFS_LABEL = NamedNode("http://www.w3.org/2000/01/rdf-schema#label")
XSD_STRING = NamedNode(XSD + "string")

KINDS = ("rename-property", "rename-class", "map-value", "literal-datatype", "literal-to-term")
DEFAULT_RULES_PATH = Path(__file__).resolve().parents[2] / "mappings" / "dcat-ap-3.toml"


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the rule table, with CURIEs expanded to full IRIs."""

    id: str
    kind: str
    spec: str
    source: str = ""  # the term rewritten: property, class or value IRI
    target: str = ""  # the term written instead (a datatype for literal-datatype)
    property: str = ""  # for map-value / literal-datatype / literal-to-term
    check: str = ""  # literal-datatype: name of the lexical test
    lookup: str = ""  # literal-to-term: "file-type" or "media-type"
    fallback_class: str = ""
    fallback_id: str = ""


@dataclass(frozen=True, slots=True)
class Rewrite:
    """One applied rewrite: ``removed`` was replaced by ``added`` under rule ``rule``."""

    rule: str
    removed: Quad
    added: tuple[Quad, ...]
    severity: Severity = Severity.INFO
    note: str = ""


def _non_negative_integer(lexical: str) -> str | None:
    text = lexical.strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite() or value < 0 or value != value.to_integral_value():
        return None
    return str(int(value))


_HEX = re.compile(r"^(?:[0-9A-Fa-f]{2})+$")


def _hex_binary(lexical: str) -> str | None:
    text = lexical.strip()
    return text if _HEX.match(text) else None


# Lexical tests for literal-datatype rules: return the canonical lexical form, or None.
CHECKS: Mapping[str, Callable[[str], str | None]] = {
    "non-negative-integer": _non_negative_integer,
    "hex-binary": _hex_binary,
}
# Source datatypes a literal-datatype rule may convert from (others are reported, not changed).
_CONVERTIBLE = frozenset(
    XSD + name
    for name in (
        "string", "integer", "decimal", "double", "float", "long", "int", "short", "byte",
        "unsignedLong", "unsignedInt", "positiveInteger", "nonNegativeInteger",
    )
)  # fmt: skip


def lookup_key(text: str) -> str:
    """Normalise a format/media-type literal for table lookup."""
    key = text.split(";", 1)[0] if "/" in text else text
    key = " ".join(key.split()).casefold()
    return key[1:] if key.startswith(".") else key


@dataclass(frozen=True, slots=True)
class _LiteralTerm:
    rule: str
    fallback_rule: str
    table: Mapping[str, NamedNode]
    fallback_class: NamedNode


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
    literal_datatypes: Mapping[NamedNode, tuple[NamedNode, Callable[[str], str | None], str]] = (
        field(default_factory=dict)
    )
    literal_terms: Mapping[NamedNode, _LiteralTerm] = field(default_factory=dict)
    file_types: Mapping[str, NamedNode] = field(default_factory=dict)
    media_types: Mapping[str, NamedNode] = field(default_factory=dict)
    _watched: frozenset[NamedNode] = frozenset()

    @property
    def rule_ids(self) -> tuple[str, ...]:
        ids: list[str] = []
        for rule in self.rules:
            ids.append(rule.id)
            if rule.fallback_id:
                ids.append(rule.fallback_id)
        return tuple(ids)

    def apply(self, quads: Iterable[Quad]) -> tuple[list[Quad], list[Rewrite]]:
        """Rewrite quads (all in the default graph); untouched quads are passed through as is."""
        out: list[Quad] = []
        trace: list[Rewrite] = []
        watched = self._watched
        class_renames = self.class_renames
        for quad in quads:
            predicate = quad.predicate
            if predicate not in watched or (
                predicate == RDF_TYPE
                and predicate not in self.property_renames
                and quad.object not in class_renames
            ):
                out.append(quad)
                continue
            new = self._rewrite(quad, predicate, trace)
            if new is None:
                out.append(quad)
            else:
                out.extend(new)
        return out, trace

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
            if typed is not None and obj.datatype != typed[0] and obj.language is None:
                datatype, check, rule_id = typed
                lexical = check(obj.value) if obj.datatype.value in _CONVERTIBLE else None
                if lexical is None:
                    trace.append(
                        Rewrite(rule_id, quad, (quad,), Severity.WARNING, f"{obj.value!r} kept")
                    )
                else:
                    obj = Literal(lexical, datatype=datatype)
                    changed = True
                    trace.append(Rewrite(rule_id, quad, (Quad(subject, predicate, obj),)))
            term = self.literal_terms.get(predicate)
            if term is not None and isinstance(obj, Literal):
                iri = term.table.get(lookup_key(obj.value))
                if iri is not None:
                    trace.append(Rewrite(term.rule, quad, (Quad(subject, predicate, iri),)))
                    return [Quad(subject, predicate, iri)]
                node = BlankNode()
                added = (
                    Quad(subject, predicate, node),
                    Quad(node, RDF_TYPE, term.fallback_class),
                    Quad(node, RDFS_LABEL, obj),
                )
                trace.append(Rewrite(term.fallback_rule, quad, added))
                return list(added)
        if not changed:
            return None
        return [Quad(subject, predicate, obj)]


def findings_from(trace: Iterable[Rewrite], rules: RuleSet) -> list[Finding]:
    """One finding per (rule, severity): what was rewritten, how often, where first."""
    by_id = {rule.id: rule for rule in rules.rules}
    by_fallback = {rule.fallback_id: rule for rule in rules.rules if rule.fallback_id}
    grouped: dict[tuple[str, Severity], list[Rewrite]] = {}
    for rewrite in trace:
        grouped.setdefault((rewrite.rule, rewrite.severity), []).append(rewrite)
    findings = []
    for (rule_id, severity), rewrites in grouped.items():
        first = rewrites[0].removed
        rule = by_id.get(rule_id) or by_fallback.get(rule_id)
        what = _describe(rule, rule_id, rewrites[0])
        count = f"{len(rewrites)} triple" + ("s" if len(rewrites) > 1 else "")
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
    if rule is None:
        return rule_id
    if example.severity is not Severity.INFO:
        return f"<{rule.property}> value not converted to <{rule.target}>: {example.note}"
    if rule.kind in ("rename-property", "rename-class"):
        return f"<{rule.source}> rewritten to <{rule.target}>"
    if rule.kind == "map-value":
        return f"<{rule.property}> value <{rule.source}> rewritten to <{rule.target}>"
    if rule.kind == "literal-datatype":
        return f"<{rule.property}> literal typed as <{rule.target}>"
    if rule_id == rule.fallback_id:
        return f"unrecognised <{rule.property}> literal kept as a <{rule.fallback_class}> node"
    return f"<{rule.property}> literal replaced by a {rule.lookup} IRI"


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
        keys = [str(a) for a in entry.get("aliases", [])]
        keys += [k for k in (code, media) if isinstance(k, str)]
        for key in map(lookup_key, keys):
            if code and file_types.setdefault(key, NamedNode(ft_base + code)) != NamedNode(
                ft_base + code
            ):
                raise ConfigError(f"{where}: {key!r} already maps to another file type")
            if media:  # a media-type alias ('text/xml') stands for itself, not for `media`
                media_types.setdefault(key, NamedNode(mt_base + (key if "/" in key else media)))
        if not code and not media:
            raise ConfigError(f"{where}: needs a file-type or a media-type")
    return file_types, media_types


def compile_rules(data: Mapping[str, Any]) -> RuleSet:
    """Build a RuleSet from the parsed TOML document; raise ConfigError on any mistake."""
    prefixes = {str(k): str(v) for k, v in data.get("prefixes", {}).items()}
    file_types, media_types = _format_tables(data)
    rules: list[Rule] = []
    prop_renames: dict[NamedNode, tuple[NamedNode, str]] = {}
    class_renames: dict[NamedNode, tuple[NamedNode, str]] = {}
    value_maps: dict[NamedNode, dict[NamedNode, tuple[NamedNode, str]]] = {}
    datatypes: dict[NamedNode, tuple[NamedNode, Callable[[str], str | None], str]] = {}
    terms: dict[NamedNode, _LiteralTerm] = {}
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
            rule = Rule(
                rule_id, kind, spec, target=term("datatype"), property=term("property"), check=check
            )
            datatypes[NamedNode(rule.property)] = (NamedNode(rule.target), CHECKS[check], rule_id)
        else:
            lookup = _str(entry, "lookup", where)
            if lookup not in ("file-type", "media-type"):
                raise ConfigError(f"{where}: lookup must be 'file-type' or 'media-type'")
            rule = Rule(
                rule_id,
                kind,
                spec,
                property=term("property"),
                lookup=lookup,
                fallback_class=term("fallback-class"),
                fallback_id=_str(entry, "fallback-id", where),
            )
            terms[NamedNode(rule.property)] = _LiteralTerm(
                rule_id,
                rule.fallback_id,
                file_types if lookup == "file-type" else media_types,
                NamedNode(rule.fallback_class),
            )
        for rid in (rule.id, rule.fallback_id):
            if rid and rid in seen:
                raise ConfigError(f"{where}: duplicate rule id {rid!r}")
            seen.add(rid)
        rules.append(rule)
    for renamed in prop_renames.values():
        if renamed[0] in prop_renames:
            raise ConfigError(f"rule {renamed[1]!r}: target is itself renamed (chains not allowed)")
    watched = set(prop_renames) | set(value_maps) | set(datatypes) | set(terms)
    if class_renames:
        watched.add(RDF_TYPE)
    meta = {str(k): str(v) for k, v in data.get("meta", {}).items()}
    return RuleSet(
        rules=tuple(rules),
        meta=meta,
        property_renames=prop_renames,
        class_renames=class_renames,
        value_maps=value_maps,
        literal_datatypes=datatypes,
        literal_terms=terms,
        file_types=file_types,
        media_types=media_types,
        _watched=frozenset(watched),
    )


@lru_cache(maxsize=8)
def load_rules(path: Path = DEFAULT_RULES_PATH) -> RuleSet:
    """Read and compile a rule file (cached per path; the result is immutable)."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as err:
        raise ConfigError(f"cannot read mapping rules {path}: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"invalid TOML in mapping rules {path}: {err}") from err
    return compile_rules(data)
