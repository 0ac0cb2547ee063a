"""The declarative ISO 19139 mapping: ``mappings/iso19139.toml`` and
``mappings/eu-data-themes.toml`` read into typed tables, XPaths compiled once.

A malformed table is a :class:`~aggregator.core.errors.ConfigError` naming the file and the row.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from lxml import etree

from aggregator.core.errors import ConfigError
from aggregator.core.resources import bundled
from aggregator.core.vocab import EU_DATA_THEME, EU_THEME_LABELS
from aggregator.mapping.iso19139._xml import compile_xpath, lit

DEFAULT_TABLE = bundled("mappings", "iso19139.toml")
DEFAULT_THEMES = bundled("mappings", "eu-data-themes.toml")
KINDS = ("text", "codelist", "codeiri", "literal", "record")
RESOURCE_KINDS = ("dataset", "series", "service")


@dataclass(frozen=True, slots=True)
class ElementRule:
    """One regular element: an XPath, the properties it maps to and the kind of value."""

    name: str
    context: str  # "metadata" | "identification"
    path: str
    xpath: etree.XPath
    predicates: tuple[str, ...]
    kind: str
    on: frozenset[str]
    subject: str  # "resource" | "record"
    table: str = ""
    base: str = ""
    max: int = 0  # 0: no limit


@dataclass(frozen=True, slots=True)
class Role:
    code: str
    property: str
    vcard: bool
    max: int
    attribution: bool


@dataclass(frozen=True, slots=True)
class Thesaurus:
    name: str
    titles: tuple[str, ...]  # case-folded, white space collapsed; any one names it
    anchor: str
    scheme: str
    code_base: str = ""
    labels: dict[str, str] = field(default_factory=dict)  # case-folded label -> code
    property: str | None = None
    codes_are_labels: bool = False
    legislation: str = ""  # an act every concept of the thesaurus implies (HVD)
    theme: bool = False  # its concepts are also dcat:theme (beside ``property``)


@dataclass(frozen=True, slots=True)
class Protocol:
    prefix: str  # case-folded
    file_type: str
    service: bool
    standard: str = ""  # the OGC standard the endpoint speaks (geodcat:serviceProtocol)


@dataclass(frozen=True, slots=True)
class IsoTable:
    """Everything the mapper reads from the two files."""

    elements: tuple[ElementRule, ...]
    hierarchy: dict[str, tuple[str, str]]  # code -> (class, INSPIRE resource type)
    roles: dict[str, Role]
    codelists: dict[str, dict[str, str]]  # table name -> code -> IRI or literal text
    language_tags: dict[str, str]  # ISO 639-2 -> BCP 47
    online_function: dict[str, str]
    protocols: tuple[Protocol, ...]
    formats: dict[str, str]  # normalised name -> IRI
    thesauri: tuple[Thesaurus, ...]
    specifications: tuple[tuple[str, str], ...]  # (case-folded title part, IRI)
    licences: tuple[tuple[str, str], ...]  # (case-folded match, IRI)
    inspire_eu_themes: dict[str, tuple[str, ...]]  # INSPIRE theme code -> EU theme IRIs
    topic_eu_themes: dict[str, tuple[str, ...]]
    source: Path
    #: concept IRI (N-Triples form) -> its English skos:prefLabel (N-Triples literal)
    concept_labels: dict[str, str] = field(default_factory=dict)


def _expand(value: str, prefixes: dict[str, str], where: str) -> str:
    """A prefixed name as an N-Triples IRI term."""
    prefix, sep, local = value.partition(":")
    if sep and prefix in prefixes:
        return f"<{prefixes[prefix]}{local}>"
    raise ConfigError(f"{where}: {value!r} is not a known prefixed name")


def _str(row: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = row.get(key, default)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key!r} must be a string")
    return value


def _element(row: dict[str, Any], prefixes: dict[str, str], where: str) -> ElementRule:
    name = _str(row, "name", where)
    where = f"{where} ({name})"
    kind = _str(row, "kind", where)
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind must be one of {', '.join(KINDS)}")
    context = _str(row, "context", where)
    if context not in ("metadata", "identification"):
        raise ConfigError(f"{where}: context must be metadata or identification")
    path = _str(row, "path", where)
    try:
        compiled = compile_xpath(path)
    except etree.XPathSyntaxError as err:
        raise ConfigError(f"{where}: bad XPath {path!r}: {err}") from err
    preds = row.get("predicate")
    pred_list = [preds] if isinstance(preds, str) else preds
    if not isinstance(pred_list, list) or not pred_list:
        raise ConfigError(f"{where}: predicate must be a prefixed name or a list of them")
    on = row.get("on", list(RESOURCE_KINDS))
    if not isinstance(on, list) or not set(on) <= set(RESOURCE_KINDS):
        raise ConfigError(f"{where}: on must list some of {', '.join(RESOURCE_KINDS)}")
    subject = _str(row, "subject", where, "resource")
    if subject not in ("resource", "record"):
        raise ConfigError(f"{where}: subject must be resource or record")
    rule = ElementRule(
        name=name,
        context=context,
        path=path,
        xpath=compiled,
        predicates=tuple(_expand(p, prefixes, where) for p in pred_list),
        kind=kind,
        on=frozenset(on),
        subject=subject,
        table=_str(row, "table", where, ""),
        base=_str(row, "base", where, ""),
        max=int(row.get("max", 0)),
    )
    if kind == "codelist" and not rule.table:
        raise ConfigError(f"{where}: a codelist row needs 'table'")
    if kind == "codeiri" and not rule.base:
        raise ConfigError(f"{where}: a codeiri row needs 'base'")
    return rule


def _codes(doc: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    table = doc.get(name)
    if not isinstance(table, dict) or not isinstance(table.get("codes"), dict):
        raise ConfigError(f"{path}: [{name}] with a [{name}.codes] table is required")
    return table


def _norm_format(name: str) -> str:
    return "".join(ch for ch in name.casefold() if ch.isalnum())


@lru_cache(maxsize=1024)
def format_key(name: str) -> str:
    """How a format name is looked up in the ``[format]`` table."""
    return _norm_format(name)


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"cannot read the ISO 19139 mapping table {path}: {err}") from err


def load_table(path: Path | None = None, themes: Path | None = None) -> IsoTable:
    return _load(path or DEFAULT_TABLE, themes or DEFAULT_THEMES)


@lru_cache(maxsize=4)
def _load(path: Path, themes_path: Path) -> IsoTable:
    doc = _read(path)
    prefixes = doc.get("namespaces", {})
    elements = tuple(
        _element(row, prefixes, f"{path} [[element]] {i}")
        for i, row in enumerate(doc.get("element", []), 1)
    )
    hierarchy = {
        code: (_expand(v["class"], prefixes, f"{path} [hierarchy]"), str(v["resource-type"]))
        for code, v in doc.get("hierarchy", {}).items()
    }
    roles = {
        code: Role(
            code=code,
            property=_expand(v["property"], prefixes, f"{path} [roles.{code}]"),
            vcard=bool(v.get("vcard", False)),
            max=int(v.get("max", 0)),
            attribution=bool(v.get("attribution", False)),
        )
        for code, v in doc.get("roles", {}).items()
    }
    freq = _codes(doc, "frequency", path)
    lang = _codes(doc, "language", path)
    charset = _codes(doc, "character-set", path)
    codelists = {
        "frequency": {k: freq["base"] + v for k, v in freq["codes"].items()},
        "language": {k: lang["base"] + v[1] for k, v in lang["codes"].items()},
        "character-set": {k: str(v) for k, v in charset["codes"].items()},
    }
    for rule in elements:
        if rule.kind == "codelist" and rule.table not in codelists:
            raise ConfigError(f"{path}: element {rule.name!r} names unknown table {rule.table!r}")
    fmt = _codes(doc, "format", path)
    thesauri = tuple(
        Thesaurus(
            name=str(t["name"]),
            titles=tuple(
                " ".join(str(x).split()).casefold() for x in [t["title"], *t.get("also-titles", [])]
            ),
            anchor=str(t.get("anchor", "")),
            scheme=str(t["scheme"]),
            code_base=str(t.get("code-base", "")),
            labels={k.casefold(): str(v) for k, v in t.get("labels", {}).items()},
            property=_expand(t["property"], prefixes, f"{path} [[thesaurus]]")
            if "property" in t
            else None,
            codes_are_labels=bool(t.get("codes-are-labels", False)),
            legislation=str(t.get("legislation", "")),
            theme=bool(t.get("theme", False)),
        )
        for t in doc.get("thesaurus", [])
    )
    themes = _read(themes_path)
    base = str(themes.get("base", ""))
    return IsoTable(
        elements=elements,
        hierarchy=hierarchy,
        roles=roles,
        codelists=codelists,
        language_tags={k: str(v[0]) for k, v in lang["codes"].items()},
        online_function={k: str(v) for k, v in doc.get("online-function", {}).items()},
        protocols=tuple(
            Protocol(
                str(p["prefix"]).casefold(),
                fmt["base"] + p["file-type"],
                bool(p["service"]),
                str(p.get("standard", "")),
            )
            for p in doc.get("protocol", [])
        ),
        formats={_norm_format(k): fmt["base"] + v for k, v in fmt["codes"].items()},
        thesauri=thesauri,
        specifications=tuple(
            (str(s["title"]).casefold(), str(s["iri"])) for s in doc.get("specification", [])
        ),
        licences=tuple((str(x["match"]).casefold(), str(x["iri"])) for x in doc.get("licence", [])),
        inspire_eu_themes={
            k: tuple(base + c for c in v) for k, v in themes.get("inspire-theme", {}).items()
        },
        topic_eu_themes={
            k: tuple(base + c for c in v) for k, v in themes.get("topic-category", {}).items()
        },
        source=path,
        concept_labels=_concept_labels(doc, prefixes, path),
    )


def _concept_labels(doc: dict[str, Any], prefixes: dict[str, str], path: Path) -> dict[str, str]:
    """``[concept-labels.<base prefix>]`` tables: code -> English label, plus the labels of
    the INSPIRE themes (``[[thesaurus]]`` labels, inverted) and of the EU data themes."""
    out: dict[str, str] = {}
    for prefix, codes in doc.get("concept-labels", {}).items():
        base = prefixes.get(prefix)
        if base is None or not isinstance(codes, dict):
            raise ConfigError(f"{path}: [concept-labels.{prefix}]: unknown prefix")
        for code, label in codes.items():
            out[f"<{base}{code}>"] = lit(str(label), "en")
    for t in doc.get("thesaurus", []):
        base = str(t.get("code-base", ""))
        for label, code in t.get("labels", {}).items():
            out.setdefault(f"<{base}{code}>", lit(str(label).capitalize(), "en"))
    for code, label in EU_THEME_LABELS.items():
        out[f"<{EU_DATA_THEME}{code}>"] = lit(label, "en")
    return out
