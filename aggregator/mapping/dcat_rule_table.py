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

from aggregator.errors import ConfigError
from aggregator.mapping.dcat_checks import ACCEPTED, CHECKS, CONVERTIBLE, Check
from aggregator.mapping.dcat_ranges import NOT_TYPED, RDF_TYPE, RangeClass
from aggregator.mapping.dcat_rules import (
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
from aggregator.mapping.dcat_vocab import (
    DEFAULT_VOCABULARIES_PATH,
    Vocabulary,
    load_vocabularies,
    lookup_key,
)
from aggregator.resources import bundled

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
                    CONVERTIBLE[check],
                    ACCEPTED.get(check, frozenset()),
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
                labels: dict[NamedNode, str] = {}
                for name in _list(row, "labels", at):
                    vocabulary = (vocabularies or {}).get(name)
                    if vocabulary is None:
                        raise ConfigError(f"{at}: unknown vocabulary {name!r} in 'labels'")
                    labels.update(vocabulary.labels)
                label_property = None
                if labels:
                    label_property = NamedNode(
                        _expand(_str(row, "label-property", at), prefixes, at)
                    )
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
