"""The rule file ``mappings/dcat-ap-3.toml``: reading it and compiling it into a :class:`RuleSet`.

A mistake in the file (unknown kind, prefix or lookup table, duplicate id, renaming chain) is a
:class:`ConfigError` when the mapper is created, never a silent no-op.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pyoxigraph import NamedNode

from aggregator.core.errors import ConfigError
from aggregator.core.resources import bundled
from aggregator.mapping.dcat._checks import ACCEPTED, CHECKS, CONVERTIBLE, Check
from aggregator.mapping.dcat._ranges import NOT_TYPED, RDF_TYPE, RangeClass
from aggregator.mapping.dcat.rules import (
    _ANY,
    _DATATYPE,
    _LITERAL,
    _RANGE,
    _TYPE,
    KINDS,
    RangeRow,
    Rule,
    RuleSet,
    _LiteralTerm,
)
from aggregator.mapping.dcat.vocab import (
    DEFAULT_VOCABULARIES_PATH,
    Vocabulary,
    load_vocabularies,
    lookup_key,
)

DEFAULT_RULES_PATH = bundled("mappings", "dcat-ap-3.toml")

__all__ = ["DEFAULT_RULES_PATH", "compile_rules", "load_rules"]


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
    compiler = _Compiler(data, vocabularies or {})
    seen: set[str] = set()
    rules: list[Rule] = []
    for n, entry in enumerate(data.get("rule", [])):
        rule_id = _str(entry, "id", f"[[rule]] #{n + 1}")
        where = f"rule {rule_id!r}"
        kind = _str(entry, "kind", where)
        spec = _str(entry, "spec", where)
        if kind not in KINDS:
            raise ConfigError(f"{where}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
        rule = compiler.rule(kind, Rule(rule_id, kind, spec), entry, where)
        for rid in {rule.id, rule.fallback_id}:
            if rid and (rid in seen or rid == NOT_TYPED):
                raise ConfigError(f"{where}: duplicate rule id {rid!r}")
            seen.add(rid)
        rules.append(rule)
    return compiler.rule_set(tuple(rules), data)


class _Compiler:
    """The tables the rules of one file fill, by kind of rule."""

    def __init__(self, data: Mapping[str, Any], vocabularies: Mapping[str, Vocabulary]) -> None:
        self.prefixes = {str(k): str(v) for k, v in data.get("prefixes", {}).items()}
        self.vocabularies = vocabularies
        self.file_types, self.media_types = _format_tables(data)
        self.tables: dict[str, Mapping[str, NamedNode] | Vocabulary] = {
            "file-type": self.file_types,
            "media-type": self.media_types,
            **vocabularies,
        }
        self.prop_renames: dict[NamedNode, tuple[NamedNode, str]] = {}
        self.class_renames: dict[NamedNode, tuple[NamedNode, str]] = {}
        self.value_maps: dict[NamedNode, dict[NamedNode, tuple[NamedNode, str]]] = {}
        self.datatypes: dict[
            NamedNode, tuple[NamedNode, Check, str, frozenset[str], frozenset[str]]
        ] = {}
        self.terms: dict[NamedNode, _LiteralTerm] = {}
        self.urls: dict[NamedNode, tuple[str, bool]] = {}
        self.ranges: dict[NamedNode, RangeClass] = {}

    def _term(self, entry: Mapping[str, Any], key: str, where: str) -> str:
        return _expand(_str(entry, key, where), self.prefixes, where)

    def _props(self, entry: Mapping[str, Any], where: str) -> tuple[str, ...]:
        names = _list(entry, "properties", where)
        if "property" in entry:
            names.insert(0, _str(entry, "property", where))
        if not names:
            raise ConfigError(f"{where}: needs 'property' or 'properties'")
        return tuple(_expand(name, self.prefixes, where) for name in names)

    def rule(self, kind: str, base: Rule, entry: Mapping[str, Any], where: str) -> Rule:
        """Compile one rule (``base``: its id, kind and spec) into the tables of its kind."""
        if kind in ("rename-property", "rename-class"):
            return self._rename(base, entry, where)
        if kind == "map-value":
            return self._map_value(base, entry, where)
        if kind == "literal-datatype":
            return self._literal_datatype(base, entry, where)
        if kind == "literal-url":
            return self._literal_url(base, entry, where)
        if kind == "range-class":
            return self._range_class(base, entry, where)
        return self._literal_term(base, entry, where)

    def _rename(self, base: Rule, entry: Mapping[str, Any], where: str) -> Rule:
        rule = replace(
            base, source=self._term(entry, "from", where), target=self._term(entry, "to", where)
        )
        table = self.prop_renames if rule.kind == "rename-property" else self.class_renames
        table[NamedNode(rule.source)] = (NamedNode(rule.target), rule.id)
        return rule

    def _map_value(self, base: Rule, entry: Mapping[str, Any], where: str) -> Rule:
        rule = replace(
            base,
            source=self._term(entry, "from", where),
            target=self._term(entry, "to", where),
            property=self._term(entry, "property", where),
        )
        self.value_maps.setdefault(NamedNode(rule.property), {})[NamedNode(rule.source)] = (
            NamedNode(rule.target),
            rule.id,
        )
        return rule

    def _literal_datatype(self, base: Rule, entry: Mapping[str, Any], where: str) -> Rule:
        check = _str(entry, "check", where)
        if check not in CHECKS:
            raise ConfigError(f"{where}: unknown check {check!r} (one of {sorted(CHECKS)})")
        names = self._props(entry, where)
        rule = replace(
            base,
            target=self._term(entry, "datatype", where),
            property=names[0],
            check=check,
            properties=names,
        )
        for name in names:
            self.datatypes[NamedNode(name)] = (
                NamedNode(rule.target),
                CHECKS[check],
                rule.id,
                CONVERTIBLE[check],
                ACCEPTED.get(check, frozenset()),
            )
        return rule

    def _literal_url(self, base: Rule, entry: Mapping[str, Any], where: str) -> Rule:
        names = self._props(entry, where)
        email = bool(entry.get("email", False))
        rule = replace(base, property=names[0], properties=names, email=email)
        for name in names:
            self.urls[NamedNode(name)] = (rule.id, email)
        return rule

    def _range_class(self, base: Rule, entry: Mapping[str, Any], where: str) -> Rule:
        rows = [
            self._range_row(base.id, row, f"{where}, range #{m + 1}")
            for m, row in enumerate(entry.get("range", []))
        ]
        if not rows:
            raise ConfigError(f"{where}: needs at least one [[rule.range]]")
        return replace(base, property=rows[0].properties[0], ranges=tuple(rows))

    def _range_row(self, rule_id: str, row: Mapping[str, Any], at: str) -> RangeRow:
        prefixes = self.prefixes
        names = self._props(row, at)
        compiled = RangeClass(
            rule_id,
            NamedNode(_expand(_str(row, "class", at), prefixes, at)),
            frozenset(NamedNode(_expand(p, prefixes, at)) for p in _list(row, "requires", at)),
            frozenset(NamedNode(_expand(p, prefixes, at)) for p in _list(row, "at-most-one", at)),
        )
        labels: dict[NamedNode, str] = {}
        for name in _list(row, "labels", at):
            vocabulary = self.vocabularies.get(name)
            if vocabulary is None:
                raise ConfigError(f"{at}: unknown vocabulary {name!r} in 'labels'")
            labels.update(vocabulary.labels)
        label_property = None
        if labels:
            label_property = NamedNode(_expand(_str(row, "label-property", at), prefixes, at))
            if label_property not in compiled.requires:
                raise ConfigError(f"{at}: 'label-property' must be one of 'requires'")
        compiled = replace(
            compiled,
            suffix=f" <{RDF_TYPE.value}> <{compiled.cls.value}> .",
            checked=bool(compiled.requires or compiled.at_most_one),
            label_property=label_property,
            labels=MappingProxyType(labels),
        )
        for name in names:
            if NamedNode(name) in self.ranges:
                raise ConfigError(f"{at}: <{name}> already has a range")
            self.ranges[NamedNode(name)] = compiled
        return RangeRow(
            names,
            compiled.cls.value,
            tuple(sorted(p.value for p in compiled.requires)),
            tuple(sorted(p.value for p in compiled.at_most_one)),
            _str(row, "spec", at),
        )

    def _literal_term(self, base: Rule, entry: Mapping[str, Any], where: str) -> Rule:
        lookup = str(entry.get("lookup", ""))
        if lookup and lookup not in self.tables:
            raise ConfigError(f"{where}: unknown lookup table {lookup!r} ({sorted(self.tables)})")
        names = self._props(entry, where)
        label = entry.get("fallback-label", "rdfs:label")
        rule = replace(
            base,
            property=names[0],
            properties=names,
            lookup=lookup,
            fallback_class=self._term(entry, "fallback-class", where),
            fallback_id=_str(entry, "fallback-id", where) if lookup else base.id,
            fallback_label=_expand(str(label), self.prefixes, where),
        )
        media_as = entry.get("media-type-as")
        if media_as is not None:
            rule = replace(rule, media_type_as=_expand(str(media_as), self.prefixes, where))
        for name in names:
            self.terms[NamedNode(name)] = _LiteralTerm(
                rule.id,
                rule.fallback_id,
                self.tables[lookup] if lookup else None,
                NamedNode(rule.fallback_class),
                NamedNode(rule.fallback_label),
                (NamedNode(rule.media_type_as), self.media_types) if rule.media_type_as else None,
            )
        return rule

    def rule_set(self, rules: tuple[Rule, ...], data: Mapping[str, Any]) -> RuleSet:
        """The compiled rules, once all are read: check what needs all of them."""
        prop_renames, datatypes, terms, urls = (
            self.prop_renames,
            self.datatypes,
            self.terms,
            self.urls,
        )
        for renamed in prop_renames.values():
            if renamed[0] in prop_renames:
                raise ConfigError(
                    f"rule {renamed[1]!r}: target is itself renamed (chains not allowed)"
                )
        watched = set(prop_renames) | set(self.value_maps) | set(datatypes) | set(terms) | set(urls)
        if self.class_renames:
            watched.add(RDF_TYPE)
        meta = {str(k): str(v) for k, v in data.get("meta", {}).items()}
        literal_only = frozenset(
            (set(datatypes) | set(terms) | set(urls)) - set(prop_renames) - set(self.value_maps)
        )
        accepted = {
            predicate: frozenset({entry[0], *(NamedNode(d) for d in entry[4])})
            for predicate, entry in datatypes.items()
            if predicate not in terms and predicate not in urls and predicate in literal_only
        }
        return RuleSet(
            rules=rules,
            meta=meta,
            property_renames=prop_renames,
            class_renames=self.class_renames,
            value_maps=self.value_maps,
            literal_datatypes=datatypes,
            literal_terms=terms,
            literal_urls=urls,
            ranges=self.ranges,
            file_types=self.file_types,
            media_types=self.media_types,
            vocabularies=dict(self.vocabularies),
            _watched=frozenset(watched),
            _literal_only=literal_only,
            _dispatch=_dispatch_table(watched, literal_only, self.ranges, accepted),
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
