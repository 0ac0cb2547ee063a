"""The declarative part of the META-SHARE mapping, read from ``mappings/meta-share.toml``."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from aggregator.core.errors import ConfigError
from aggregator.core.resources import bundled

DEFAULT_RULES_PATH = bundled("mappings", "meta-share.toml")
MS = "http://www.ilsp.gr/META-XMLSchema"
NS = {"ms": MS}

Kind = Literal["text", "string", "date", "iri"]


@dataclass(frozen=True, slots=True)
class ValueRule:
    """Copy the values at ``path`` (relative to resourceInfo) to ``property``."""

    path: str
    property: str
    kind: Kind
    klass: str | None = None  # the class an IRI value is typed with


@dataclass(frozen=True, slots=True)
class ResourceType:
    iri: str
    label: str
    service: bool = False  # a tool/service: a dcat:DataService when it has an endpoint


@dataclass(frozen=True, slots=True)
class MetaShareRules:
    dataset: tuple[ValueRule, ...]
    resource_types: dict[str, ResourceType]
    media_types: dict[str, tuple[str, str]]
    availability: dict[str, str]
    licences: dict[str, str]
    relations: dict[str, str]
    byte_units: dict[str, int]
    #: relation types written as dct:relation because DCAT-AP 3.0.1 ranges the property they
    #: stand for to a class another LR cannot carry here -> that property (for the finding)
    generalised_relations: dict[str, str]


def _table(doc: dict[str, Any], key: str, where: Path) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: [{key}] must be a table")
    return value


def compile_rules(doc: dict[str, Any], where: Path) -> MetaShareRules:
    rules = []
    for i, entry in enumerate(doc.get("dataset", [])):
        kind = entry.get("kind")
        if kind not in ("text", "string", "date", "iri") or not all(
            isinstance(entry.get(k), str) for k in ("path", "property")
        ):
            raise ConfigError(f"{where}: dataset[{i}] needs path, property and a known kind")
        rules.append(ValueRule(entry["path"], entry["property"], kind, entry.get("class")))
    types = {
        code: ResourceType(str(t["iri"]), str(t["label"]), bool(t.get("service", False)))
        for code, t in _table(doc, "resource-types", where).items()
    }
    media = {code: (str(v[0]), str(v[1])) for code, v in _table(doc, "media-types", where).items()}
    return MetaShareRules(
        dataset=tuple(rules),
        resource_types=types,
        media_types=media,
        availability={k: str(v) for k, v in _table(doc, "availability", where).items()},
        licences={k: str(v) for k, v in _table(doc, "licences", where).items()},
        relations={k: str(v) for k, v in _table(doc, "relations", where).items()},
        byte_units={k.casefold(): int(v) for k, v in _table(doc, "byte-units", where).items()},
        generalised_relations={
            k: str(v) for k, v in _table(doc, "generalised-relations", where).items()
        },
    )


@lru_cache(maxsize=4)
def load_rules(path: Path = DEFAULT_RULES_PATH) -> MetaShareRules:
    try:
        with path.open("rb") as handle:
            doc = tomllib.load(handle)
    except OSError as err:
        raise ConfigError(f"cannot read the META-SHARE mapping {path}: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"invalid TOML in the META-SHARE mapping {path}: {err}") from err
    return compile_rules(doc, path)
