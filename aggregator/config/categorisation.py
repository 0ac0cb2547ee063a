"""A source's EU data-theme categorisation settings and the lookup tables they compile to.

``[sources.NAME.categorisation]`` in ``aggregator.toml`` (the step itself, which adds the
themes to a mapped dataset, is :mod:`aggregator.mapping.categorisation`)::

    [sources.portal.categorisation]
    defaults = true            # the shipped table (default true)
    keywords = true            # match dcat:keyword values too (default true)
    file = "themes.toml"       # more entries, laid over the defaults (same layout)
    labels = { "urban-traffic" = "TRAN", "Wirtschaft" = ["ECON"] }
    iris = { "https://portal.example.org/cat/7" = ["GOVE"] }
    # enabled = false          # switch the step off for this source

The tables (``mappings/categorisation.toml`` and the source's own file) are compiled when the
configuration is loaded, so a broken file fails ``aggregator config check``, not a harvest.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from aggregator.core.errors import ConfigError
from aggregator.core.resources import bundled
from aggregator.core.vocab import EU_DATA_THEME, EU_THEME_LABELS

DEFAULT_TABLE_PATH = bundled("mappings", "categorisation.toml")
_SEPARATORS = re.compile(r"[\s_,-]+")


def label_key(text: str) -> str:
    """A label as it is matched: case-folded, runs of spaces, '-', '_' and ',' as one space."""
    return _SEPARATORS.sub(" ", text.strip().casefold()).strip()


@dataclass(frozen=True, slots=True)
class CategorisationConfig:
    """A source's categorisation settings (hashable and picklable: it travels to workers)."""

    enabled: bool = True
    defaults: bool = True
    keywords: bool = True
    file: str | None = None
    labels: tuple[tuple[str, tuple[str, ...]], ...] = ()
    iris: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _codes(value: Any, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ConfigError(f"{where}: expected an EU theme code or a list of them")
    codes = []
    for item in items:
        code = str(item).strip().upper().removeprefix(EU_DATA_THEME)
        if code not in EU_THEME_LABELS:
            raise ConfigError(
                f"{where}: {item!r} is not an EU data theme (one of {', '.join(EU_THEME_LABELS)})"
            )
        codes.append(code)
    return tuple(codes)


def _pairs(table: Any, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table")
    return tuple(sorted((str(k), _codes(v, f"{where}.{k}")) for k, v in table.items()))


def parse_categorisation(table: Any, where: str, root: Path | None) -> CategorisationConfig:
    """A source's ``categorisation`` table (ConfigError naming the key when it is wrong)."""
    where = f"{where}.categorisation"
    if table is False:
        return CategorisationConfig(enabled=False)
    if not isinstance(table, Mapping):
        raise ConfigError(f"[{where}]: expected a table (or false)")
    unknown = set(table) - {"enabled", "defaults", "keywords", "file", "labels", "iris"}
    if unknown:
        raise ConfigError(f"[{where}]: unknown key(s) {', '.join(sorted(unknown))}")
    for key in ("enabled", "defaults", "keywords"):
        if key in table and not isinstance(table[key], bool):
            raise ConfigError(f"[{where}]: {key} must be true or false")
    file = table.get("file")
    if file is not None:
        if not isinstance(file, str) or not file:
            raise ConfigError(f"[{where}]: file must be a path")
        path = (root / file) if root is not None else Path(file)
        if not path.is_file():
            raise ConfigError(f"[{where}]: no such file {path}")
        file = str(path.resolve())
    config = CategorisationConfig(
        enabled=table.get("enabled", True),
        defaults=table.get("defaults", True),
        keywords=table.get("keywords", True),
        file=file,
        labels=_pairs(table.get("labels", {}), f"[{where}].labels"),
        iris=_pairs(table.get("iris", {}), f"[{where}].iris"),
    )
    compile_table(config)  # a broken file fails the configuration, not a harvest
    return config


@dataclass(slots=True)
class CategoryTable:
    """The compiled lookups: IRI -> codes, scheme base -> key -> codes, label key -> codes."""

    iris: dict[str, frozenset[str]] = field(default_factory=dict)
    schemes: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    labels: dict[str, frozenset[str]] = field(default_factory=dict)
    keywords: bool = True

    def add_file(self, path: Path) -> None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise ConfigError(f"cannot read categorisation table {path}: {err}") from err
        for name, scheme in data.get("schemes", {}).items():
            where = f"{path}: [schemes.{name}]"
            base = scheme.get("base") if isinstance(scheme, Mapping) else None
            if not isinstance(base, str) or not base:
                raise ConfigError(f"{where}: 'base' must be an IRI")
            terms = self.schemes.setdefault(base, {})
            for key, codes in _pairs(scheme.get("terms", {}), f"{where}.terms"):
                terms[key] = frozenset(codes)
        self.add_labels(_pairs(data.get("labels", {}), f"{path}: [labels]"))
        self.add_iris(_pairs(data.get("iris", {}), f"{path}: [iris]"))

    def add_labels(self, pairs: Iterable[tuple[str, tuple[str, ...]]]) -> None:
        for label, codes in pairs:
            self.labels[label_key(label)] = frozenset(codes)

    def add_iris(self, pairs: Iterable[tuple[str, tuple[str, ...]]]) -> None:
        for iri, codes in pairs:
            self.iris[iri] = frozenset(codes)

    def by_iri(self, iri: str) -> frozenset[str]:
        found = self.iris.get(iri)
        if found is not None:
            return found
        for base, terms in self.schemes.items():
            if iri.startswith(base):
                return terms.get(iri[len(base) :].strip("/"), frozenset())
        return frozenset()

    def by_notation(self, scheme: str, notation: str) -> frozenset[str]:
        terms = self.schemes.get(scheme) or self.schemes.get(scheme.rstrip("/") + "/")
        return terms.get(notation, frozenset()) if terms else frozenset()

    def by_label(self, text: str) -> frozenset[str]:
        return self.labels.get(label_key(text), frozenset())


@lru_cache(maxsize=64)
def compile_table(config: CategorisationConfig) -> CategoryTable:
    table = CategoryTable(keywords=config.keywords)
    if config.defaults:
        table.add_file(DEFAULT_TABLE_PATH)
    if config.file:
        table.add_file(Path(config.file))
    table.add_labels(config.labels)
    table.add_iris(config.iris)
    return table
