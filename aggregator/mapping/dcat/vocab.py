"""Controlled-vocabulary tables for the dcat mapper (``mappings/dcat-ap-3-vocabularies.toml``).

A table turns a literal a source wrote where DCAT-AP 3 wants a resource (``dct:language "de"``,
``dct:license "CC-BY 4.0"``, ``dct:accrualPeriodicity "monthly"``) into the IRI of the EU
Vocabularies authority table (or IANA / SPDX) it stands for. Each table has a ``base`` IRI and
``terms``: code -> the strings that stand for it; the code itself always matches. Lookups are
on :func:`lookup_key` of the literal; ``subtags = true`` also tries the part before the first
separator (``de-CH`` -> ``de``). A table may also give ``labels``: code -> the term's English
preferred label in its authority table, which the ``range-class`` rule writes as the
``skos:prefLabel`` of a term it types ``skos:Concept`` (DCAT-AP 3.0.1 makes the label
mandatory for a concept).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pyoxigraph import NamedNode

from aggregator.core.errors import ConfigError
from aggregator.core.resources import bundled

DEFAULT_VOCABULARIES_PATH = bundled("mappings", "dcat-ap-3-vocabularies.toml")
_SEPARATORS = re.compile(r"[\s_-]+")


def lookup_key(text: str) -> str:
    """Normalise a literal for table lookup.

    Trimmed and case-folded; for media types (a '/') the ';' parameters are dropped; a leading
    dot is dropped (``.csv``); runs of spaces, '-' and '_' become one space (``CC-BY_4.0`` and
    ``cc by 4.0`` are the same key).
    """
    key = text.split(";", 1)[0] if "/" in text else text
    key = key.strip().casefold()
    key = key.removeprefix(".")
    return _SEPARATORS.sub(" ", key).strip()


@dataclass(frozen=True, slots=True)
class Vocabulary:
    name: str
    base: str
    spec: str
    table: Mapping[str, NamedNode]
    subtags: bool = False
    labels: Mapping[NamedNode, str] = field(default_factory=dict)  # term -> English label

    def lookup(self, text: str) -> NamedNode | None:
        key = lookup_key(text)
        found = self.table.get(key)
        if found is None and self.subtags and " " in key:
            found = self.table.get(key.split(" ", 1)[0])
        return found


def _str(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {key!r} must be a non-empty string")
    return value


def compile_vocabularies(data: Mapping[str, Any]) -> dict[str, Vocabulary]:
    out: dict[str, Vocabulary] = {}
    for name, entry in data.get("vocabulary", {}).items():
        where = f"[vocabulary.{name}]"
        base = _str(entry, "base", where)
        spec = _str(entry, "spec", where)
        terms = entry.get("terms")
        if not isinstance(terms, dict) or not terms:
            raise ConfigError(f"{where}: 'terms' must be a non-empty table")
        table: dict[str, NamedNode] = {}
        for code, aliases in terms.items():
            if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
                raise ConfigError(f"{where}: terms.{code} must be a list of strings")
            iri = NamedNode(base + code)
            for alias in [code, *aliases]:
                key = lookup_key(alias)
                if table.setdefault(key, iri) != iri:
                    raise ConfigError(f"{where}: {alias!r} stands for two terms")
        labels = entry.get("labels", {})
        if not isinstance(labels, dict) or not all(
            isinstance(v, str) and v and k in terms for k, v in labels.items()
        ):
            raise ConfigError(f"{where}: 'labels' must map codes of 'terms' to non-empty strings")
        out[name] = Vocabulary(
            name,
            base,
            spec,
            MappingProxyType(table),
            bool(entry.get("subtags")),
            MappingProxyType({NamedNode(base + code): text for code, text in labels.items()}),
        )
    return out


@lru_cache(maxsize=8)
def load_vocabularies(path: Path = DEFAULT_VOCABULARIES_PATH) -> Mapping[str, Vocabulary]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as err:
        raise ConfigError(f"cannot read vocabulary tables {path}: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"invalid TOML in vocabulary tables {path}: {err}") from err
    return MappingProxyType(compile_vocabularies(data))
