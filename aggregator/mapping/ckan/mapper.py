"""The ``ckan`` mapper: CKAN packages (as the action API gives them) -> DCAT-AP 3.

1. **Read** the JSON parsed once (``payload.json()``): a bare package (what the harvester
   hands over: one ``package_search`` result), a ``package_show`` answer (``{"success": true,
   "result": {...}}``), a ``package_search`` answer (``result.results``) or a JSON list of
   packages (:mod:`._input`); each package is one dataset. An answer with ``success: false``
   is a ``MappingError`` quoting CKAN's error; so is a package without an ``id`` or a title.
2. **Fields** are written by the table ``mappings/ckan.toml``: field -> property and kind (the
   kinds are in :mod:`._values`). Plain CKAN's ``extras`` are read as the dataset fields
   the table's ``[extras]`` names, ``author``/``maintainer`` with their e-mail fields, the
   package licence (``license_id``/``license_title``/``license_url``) goes to every resource
   that has none, ``organization`` is the publisher when there is no ``publisher``.
3. **Normalise** with the rule table of the ``dcat`` mapper (``mappings/dcat-ap-3.toml``): the
   literals CKAN writes (formats, media types, licences, languages, frequencies, themes, ...)
   become EU vocabulary terms where recognisable, typed nodes carrying the text where not.
4. **Output** canonical N-Triples, as every mapper does. Fields that no row reads are listed
   in the INFO finding ``ckan-fields-unmapped``: reported, not silently lost.

docs/mappings/ckan.md is the table for metadata specialists.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pyoxigraph import BlankNode, Literal, NamedNode

from aggregator.core.errors import ConfigError, MappingError
from aggregator.core.models import Finding, MappedDataset, RawRecord, Severity, Stage
from aggregator.core.resources import bundled
from aggregator.core.vocab import DCAT, DCT
from aggregator.mapping.base import Mapper, MappingContext, mint_iri
from aggregator.mapping.ckan._graph import (
    A,
    Graph,
    Subject,
    is_url,
    repaired_url,
    tagged,
    text_of,
)
from aggregator.mapping.ckan._input import packages_of
from aggregator.mapping.ckan._values import (
    KINDS,
    finish,
)
from aggregator.mapping.dcat.rule_table import DEFAULT_RULES_PATH, load_rules
from aggregator.mapping.dcat.rules import RuleSet
from aggregator.mapping.dcat.vocab import load_vocabularies
from aggregator.mapping.payload import ParsedPayload

DEFAULT_TABLE_PATH = bundled("mappings", "ckan.toml")
DATASET = NamedNode(DCAT + "Dataset")
DISTRIBUTION = NamedNode(DCAT + "Distribution")
HAS_DISTRIBUTION = NamedNode(DCAT + "distribution")
ACCESS_URL = NamedNode(DCAT + "accessURL")
DOWNLOAD_URL = NamedNode(DCAT + "downloadURL")
LICENSE = NamedNode(DCT + "license")
IDENTIFIER = NamedNode(DCT + "identifier")
NO_LICENCE = frozenset({"", "notspecified", "other-closed", "none"})


@dataclass(frozen=True, slots=True)
class FieldRow:
    field: str
    property: NamedNode
    kind: str
    fallback: bool = False
    key: str = ""  # the property IRI (which properties a description has: by string)


@dataclass(frozen=True, slots=True)
class CkanTable:
    dataset: tuple[FieldRow, ...]
    distribution: tuple[FieldRow, ...]
    extras: Mapping[str, str]
    companions: Mapping[str, Mapping[str, str]]
    licences: Mapping[str, str]
    ignore_dataset: frozenset[str]
    ignore_distribution: frozenset[str]
    #: the fields a row reads or the table ignores (the others are reported as unmapped)
    known_dataset: frozenset[str] = frozenset()
    known_distribution: frozenset[str] = frozenset()


def field_rows(table: Any, prefixes: Mapping[str, str], where: str) -> tuple[FieldRow, ...]:
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{where}: expected a table of fields")
    rows = []
    for field, spec in table.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("property"), str):
            raise ConfigError(f"{where}.{field}: expected {{ property = ..., kind = ... }}")
        kind = spec.get("kind")
        if kind not in KINDS and kind != "resources":
            raise ConfigError(f"{where}.{field}: unknown kind {kind!r}")
        prefix, _, local = spec["property"].partition(":")
        if prefix not in prefixes:
            raise ConfigError(f"{where}.{field}: unknown prefix {prefix!r}")
        rows.append(
            FieldRow(
                field,
                NamedNode(prefixes[prefix] + local),
                str(kind),
                bool(spec.get("fallback")),
                prefixes[prefix] + local,
            )
        )
    return tuple(rows)


@lru_cache(maxsize=4)
def load_table(path: Path = DEFAULT_TABLE_PATH) -> CkanTable:
    """The field table of ``mappings/ckan.toml`` (ConfigError when it is broken)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"cannot read the CKAN mapping table {path}: {err}") from err
    prefixes = data.get("prefixes", {})
    ignore = data.get("ignore", {})
    dataset = field_rows(data.get("dataset"), prefixes, "[dataset]")
    distribution = field_rows(data.get("distribution"), prefixes, "[distribution]")
    ignore_dataset = frozenset(ignore.get("dataset", ()))
    ignore_distribution = frozenset(ignore.get("distribution", ()))
    return CkanTable(
        dataset=dataset,
        distribution=distribution,
        extras=MappingProxyType(dict(data.get("extras", {}))),
        companions=MappingProxyType(dict(data.get("companions", {}))),
        licences=MappingProxyType(dict(data.get("licences", {}))),
        ignore_dataset=ignore_dataset,
        ignore_distribution=ignore_distribution,
        known_dataset=frozenset(r.field for r in dataset) | ignore_dataset,
        known_distribution=frozenset(r.field for r in distribution) | ignore_distribution,
    )


def _row_value(fields: Mapping[str, Any], row: FieldRow, filled: set[str]) -> Any:
    """The value a table row maps from the package's (or resource's) fields: its field, or the
    ``_translated`` form of a text field; None when there is none or when the row is a fallback
    for a property another row already gave a value."""
    value = fields.get(row.field)
    if value is None and row.kind == "text":
        value = fields.get(f"{row.field}_translated")
    if row.fallback and row.key in filled:
        return None
    return value


def _extra_value(text: Any) -> Any:
    """An extra's value: JSON lists/objects (as ckanext-dcat stores them) are decoded."""
    if isinstance(text, str) and text[:1] in "[{":
        try:
            return json.loads(text)
        except (ValueError, RecursionError):  # not JSON, an over-long integer, too deep
            return text
    return text


class CkanMapper(Mapper):
    """A CKAN package dict (plain or data.europa.eu extended schema) -> a DCAT-AP 3 graph."""

    name = "ckan"
    # reads_collections stays False: a file given to ``aggregator map`` (one package, or a
    # package_search answer or list of them) is read as one record, within max_record_bytes

    def __init__(self, table_path: Path | None = None, rules_path: Path | None = None) -> None:
        self.table = load_table(table_path or DEFAULT_TABLE_PATH)
        self.rules: RuleSet = load_rules(rules_path or DEFAULT_RULES_PATH)
        self.licence_vocabulary = load_vocabularies()["licence"]

    def map_payload(self, payload: ParsedPayload, ctx: MappingContext) -> list[MappedDataset]:
        raw = payload.raw
        packages, several = packages_of(payload.json(), repr(raw.local_id))
        if not packages:
            raise MappingError(f"{raw.local_id!r} lists no CKAN package")
        results = []
        for number, package in enumerate(packages, start=1):
            where = (
                f"package {number} of {len(packages)} in {raw.local_id!r}"
                if several
                else repr(raw.local_id)
            )
            results.append(self._map_package(package, raw, ctx, where, several))
        return results

    def _map_package(
        self, package: Any, raw: RawRecord, ctx: MappingContext, where: str, several: bool
    ) -> MappedDataset:
        if not isinstance(package, dict):
            raise MappingError(f"{where} is not a CKAN package (a JSON object)")
        package_id = text_of(package.get("id")) or text_of(package.get("name"))
        if package_id is None:
            raise MappingError(f"{where}: the package has no id")
        fields, unmapped = self._fields(package)
        if not list(tagged(fields.get("title_translated") or fields.get("title"))):
            raise MappingError(
                f"{where}: package {package_id!r} has no title (dct:title is mandatory)"
            )
        uri = text_of(package.get("uri"))
        iri = (
            NamedNode(uri)
            if uri and is_url(uri)
            else NamedNode(mint_iri(ctx, "dataset", package_id))
        )
        g = Graph(lambda kind, key: mint_iri(ctx, kind, key))
        g.add(iri, A, DATASET)
        licence = self._package_licence(package)
        # relative resource URLs are resolved against the portal's URL (never a file's)
        base = raw.url if raw.url and raw.url.startswith(("http://", "https://")) else None
        findings: list[Finding] = []
        filled: set[str] = set()  # the properties a row gave a value (for the fallbacks)
        for row in self.table.dataset:
            value = _row_value(fields, row, filled)
            if value is None:
                continue
            before = len(g.quads)
            if row.kind == "resources":
                for index, resource in enumerate(value if isinstance(value, list) else []):
                    if isinstance(resource, dict):
                        self._distribution(
                            g, iri, resource, licence, index, unmapped, findings, base
                        )
                continue
            if row.kind == "text":
                value = self._translated(fields, row.field, value)
            KINDS[row.kind](g, iri, row.property, value)
            if len(g.quads) > before:
                filled.add(row.key)
        if IDENTIFIER.value not in filled:
            g.add(iri, IDENTIFIER, Literal(package_id))
        if unmapped:
            findings.append(
                Finding(
                    Stage.MAP,
                    Severity.INFO,
                    "ckan-fields-unmapped",
                    "fields no row of mappings/ckan.toml reads: " + ", ".join(sorted(unmapped)),
                    location=iri.value,
                )
            )
        # one record, several datasets: each is known by its package id
        record = replace(raw, local_id=package_id) if several else raw
        return finish(self.rules, record, iri, g, findings)

    # --- fields -------------------------------------------------------------------------------

    def _fields(self, package: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
        """The package's fields with its extras and companion fields folded in, and the
        names of those no row reads."""
        table = self.table
        fields = {k: v for k, v in package.items() if v not in (None, "", [], {})}
        unmapped = {k for k in fields if k not in table.known_dataset}
        for field, companion in table.companions.items():
            email = text_of(package.get(companion.get("email", "")))
            name = fields.get(field)
            if email or isinstance(name, str):
                fields[field] = {"name": name, "email": email}
        extras = package.get("extras")
        folded: dict[str, dict[str, Any]] = {}
        for extra in extras if isinstance(extras, list) else []:
            if not isinstance(extra, dict) or not isinstance(extra.get("key"), str):
                continue
            key, value = extra["key"], _extra_value(extra.get("value"))
            target = table.extras.get(key)
            if target is None:
                unmapped.add(f"extras.{key}")
                continue
            if value in (None, ""):
                continue
            field, _, member = target.partition(".")
            if field in package and package[field] not in (None, "", [], {}):
                continue  # the package's own field wins
            if member:
                folded.setdefault(field, {})[member] = value
            else:
                fields[field] = value
        fields.update(folded)
        publisher, organization = fields.get("publisher"), fields.get("organization")
        if (
            isinstance(publisher, dict)
            and not any(publisher.get(k) for k in ("name", "title"))
            and isinstance(organization, dict)
            and organization.get("title")
        ):  # a publisher given by IRI alone: named after the organization
            fields["publisher"] = {**publisher, "name": organization["title"]}
        return fields, unmapped

    @staticmethod
    def _translated(fields: Mapping[str, Any], field: str, value: Any) -> Any:
        """``FIELD_translated`` ({lang: text}) first; the plain value too if it says more."""
        translated = fields.get(f"{field}_translated")
        if not isinstance(translated, dict) or not translated:
            return value
        texts = {t for t in translated.values() if isinstance(t, str)}
        if isinstance(value, str) and value.strip() and value not in texts:
            return [translated, value]
        return translated

    def _package_licence(self, package: Mapping[str, Any]) -> NamedNode | Literal | None:
        """The package-level licence, as an EU licence term where recognisable."""
        license_id = text_of(package.get("license_id")) or ""
        title = text_of(package.get("license_title"))
        url = text_of(package.get("license_url"))
        if license_id.lower() in NO_LICENCE and not url:
            return None
        code = self.table.licences.get(license_id)
        if code is not None:
            return NamedNode(self.licence_vocabulary.base + code)
        for text in (license_id, url, title):
            found = self.licence_vocabulary.lookup(text) if text else None
            if found is not None:
                return found
        if url and is_url(url):
            return NamedNode(url)
        text = title or license_id
        return Literal(text) if text else None

    def _distribution(
        self,
        g: Graph,
        dataset: NamedNode,
        resource: dict[str, Any],
        licence: NamedNode | Literal | None,
        index: int,
        unmapped: set[str],
        findings: list[Finding],
        base: str | None,
    ) -> None:
        fields = {k: v for k, v in resource.items() if v not in (None, "", [], {})}
        if "url" not in fields and "access_url" not in fields:
            if "download_url" not in fields:
                findings.append(
                    Finding(
                        Stage.MAP,
                        Severity.WARNING,
                        "ckan-resource-without-url",
                        f"resource {index + 1} ({resource.get('name') or resource.get('id')})"
                        " has no url: not a distribution (dcat:accessURL is mandatory)",
                        location=dataset.value,
                    )
                )
                return
            fields["url"] = fields["download_url"]
        for key in ("url", "access_url", "download_url"):
            text = fields.get(key)
            if isinstance(text, str) and text.strip() and not is_url(text.strip()):
                repaired = repaired_url(text, base)
                if repaired is None:
                    g.note(
                        dataset,
                        "ckan-url-not-iri",
                        f"resource {index + 1} {key} {text!r} is no absolute URL (and no portal"
                        " URL is known to resolve it against): kept as text",
                        Severity.WARNING,
                    )
                    continue
                fields[key] = repaired
                g.note(
                    dataset,
                    "ckan-url-repaired",
                    f"resource {index + 1} {key} {text!r} written as <{repaired}>",
                )
        if "checksum" not in fields and isinstance(fields.get("hash"), str):
            fields["checksum"] = {
                "algorithm": resource.get("hash_algorithm"),
                "checksum_value": fields["hash"],
            }
        node: Subject = BlankNode()
        g.add(dataset, HAS_DISTRIBUTION, node)
        g.add(node, A, DISTRIBUTION)
        table = self.table
        unmapped.update(f"resources.{k}" for k in fields if k not in table.known_distribution)
        filled: set[str] = set()
        for row in table.distribution:
            value = _row_value(fields, row, filled)
            if value is None:
                continue
            before = len(g.quads)
            if row.kind == "text":
                value = self._translated(fields, row.field, value)
            KINDS[row.kind](g, node, row.property, value)
            if len(g.quads) > before:
                filled.add(row.key)
        if licence is not None and LICENSE.value not in filled:
            g.add(node, LICENSE, licence)
