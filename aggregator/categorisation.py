"""EU data-theme categorisation: a step after the format mapping, for every source type.

data.europa.eu sorts datasets into the 13 EU data themes (``dcat:theme`` concepts of
http://publications.europa.eu/resource/authority/data-theme). Sources categorise in their own
ways: CKAN groups, a portal's own theme vocabulary, ISO 19115 topic categories, INSPIRE themes,
keywords. After a record is mapped (whatever its format), this step reads its dataset's
``dcat:theme``, ``dct:subject`` and ``geodcat:topicCategory`` values (IRIs by scheme, and the
``skos:prefLabel``/``skos:notation``/``rdfs:label`` of the concepts), and its ``dcat:keyword``
values when the source says so, looks them up in the source's categorisation table (the
defaults of ``mappings/categorisation.toml`` with the source's own entries laid over them),
and adds each EU theme found that the dataset does not have yet, labelled and typed
``skos:Concept`` as DCAT-AP 3 requires. Each addition is an INFO finding
``eu-theme-assigned`` naming what it came from. Nothing is removed.

Configuration (``aggregator.toml``)::

    [sources.portal.categorisation]
    defaults = true            # the shipped table (default true)
    keywords = true            # match dcat:keyword values too (default true)
    file = "themes.toml"       # more entries, laid over the defaults (same layout)
    labels = { "urban-traffic" = "TRAN", "Wirtschaft" = ["ECON"] }
    iris = { "https://portal.example.org/cat/7" = ["GOVE"] }
    # enabled = false          # switch the step off for this source

The added triples hold no blank node, so they are merged into the canonical N-Triples lines
without canonicalising again.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from pyoxigraph import BlankNode, Literal, NamedNode, RdfFormat, Triple, parse, serialize

from aggregator.core.errors import ConfigError
from aggregator.core.models import Finding, MappedDataset, Severity, Stage, content_hash
from aggregator.core.resources import bundled
from aggregator.core.vocab import DCAT, DCT, EU_DATA_THEME, EU_THEME_LABELS, RDF_TYPE, RDFS, SKOS

DEFAULT_TABLE_PATH = bundled("mappings", "categorisation.toml")
GEODCAT_TOPIC = "http://data.europa.eu/930/topicCategory"
CATEGORY_PROPERTIES = frozenset({DCAT + "theme", DCT + "subject", GEODCAT_TOPIC})
KEYWORD = DCAT + "keyword"
NAME_PROPERTIES = frozenset(
    {SKOS + "prefLabel", SKOS + "notation", SKOS + "altLabel", RDFS + "label"}
)
IN_SCHEME = SKOS + "inScheme"
_SEPARATORS = re.compile(r"[\s_,-]+")
_NEEDLES = (b"#theme>", b"/subject>", b"/topicCategory>", b"#keyword>")
# the statements categorisation reads, found by their predicate (" <IRI> ": mappers write
# N-Triples with single spaces); parsing only these few instead of the whole graph and
# looking at every triple in Python took ~235 -> ~70 us a record. A literal that happens to
# hold such text brings its statement along, which the predicate checks below then ignore.
_READ = tuple(
    b" <" + p.encode() + b"> "
    for p in sorted({*CATEGORY_PROPERTIES, KEYWORD, *NAME_PROPERTIES, IN_SCHEME})
)


def _statements_read(data: bytes) -> bytes:
    """The lines of ``data`` that may state one of the predicates categorisation reads."""
    starts: dict[int, int] = {}
    for needle in _READ:
        at = data.find(needle)
        while at != -1:
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            end = len(data) if end == -1 else end
            starts[start] = end
            at = data.find(needle, end)
    return b"\n".join(data[start:end] for start, end in sorted(starts.items()))


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


def _line(triple: Triple) -> bytes:
    data = serialize([triple], format=RdfFormat.N_TRIPLES)
    assert data is not None
    return data.rstrip(b"\n")


def categorise(dataset: MappedDataset, config: CategorisationConfig) -> MappedDataset:
    """``dataset`` with the EU themes its categories stand for added (itself when none)."""
    data = dataset.ntriples
    if not config.enabled or not any(n in data for n in _NEEDLES):
        return dataset
    table = compile_table(config)
    subject = NamedNode(dataset.dataset_iri)
    read = _statements_read(data)
    triples = list(parse(read, RdfFormat.N_TRIPLES)) if read else []
    found = _Themes(_Categories(triples, subject), table).found
    if not found:
        return dataset
    return _with_themes(dataset, subject, found)


class _Categories:
    """What the dataset's statements say about its categories."""

    def __init__(self, triples: list[Triple], subject: NamedNode) -> None:
        self.names: dict[NamedNode | BlankNode, list[Triple]] = {}
        self.categories: list[NamedNode | BlankNode | Literal] = []
        self.keywords: list[Literal] = []
        self.have: set[str] = set()  # EU themes the dataset has already
        for t in triples:  # one pass, no call per triple
            if t.subject == subject:
                predicate = t.predicate.value
                if predicate in CATEGORY_PROPERTIES:
                    self._category(predicate, t.object)
                elif predicate == KEYWORD and isinstance(t.object, Literal):
                    self.keywords.append(t.object)
            named = t.predicate.value in NAME_PROPERTIES or t.predicate.value == IN_SCHEME
            if named and isinstance(t.subject, NamedNode | BlankNode):
                self.names.setdefault(t.subject, []).append(t)

    def _category(self, predicate: str, obj: NamedNode | BlankNode | Literal | Triple) -> None:
        if isinstance(obj, NamedNode) and obj.value.startswith(EU_DATA_THEME):
            if predicate == DCAT + "theme":
                self.have.add(obj.value[len(EU_DATA_THEME) :])
            else:  # an EU theme given as a subject: made a dcat:theme
                self.categories.append(obj)
        elif isinstance(obj, NamedNode | BlankNode | Literal):
            self.categories.append(obj)


class _Themes:
    """The EU themes the categories (and keywords, when the table says so) stand for."""

    def __init__(self, read: _Categories, table: CategoryTable) -> None:
        self.table, self.have, self.names = table, read.have, read.names
        self.found: dict[str, str] = {}  # code -> what it came from
        for obj in read.categories:
            self._category(obj)
        if table.keywords:
            for keyword in read.keywords:
                self._note(table.by_label(keyword.value), f"keyword {keyword.value!r}")

    def _note(self, codes: frozenset[str], why: str) -> None:
        for code in sorted(codes):
            if code not in self.have:
                self.found.setdefault(code, why)

    def _category(self, obj: NamedNode | BlankNode | Literal) -> None:
        table = self.table
        if isinstance(obj, Literal):
            self._note(table.by_label(obj.value), f"category {obj.value!r}")
            return
        if isinstance(obj, NamedNode):
            code = obj.value[len(EU_DATA_THEME) :] if obj.value.startswith(EU_DATA_THEME) else None
            codes = frozenset({code}) if code in EU_THEME_LABELS else table.by_iri(obj.value)
            self._note(codes, f"<{obj.value}>")
        described = self.names.get(obj, [])
        schemes = [
            t.object.value
            for t in described
            if t.predicate.value == IN_SCHEME and isinstance(t.object, NamedNode)
        ]
        for t in described:
            if t.predicate.value == IN_SCHEME or not isinstance(t.object, Literal):
                continue
            value = t.object.value
            self._note(table.by_label(value), f"category {value!r}")
            if t.predicate.value == SKOS + "notation":
                for scheme in schemes:
                    self._note(table.by_notation(scheme, value), f"{value!r} in <{scheme}>")


def _with_themes(
    dataset: MappedDataset, subject: NamedNode, found: dict[str, str]
) -> MappedDataset:
    """``dataset`` with the themes ``found`` added, and a finding saying why."""
    lines = set(dataset.ntriples.splitlines())
    theme = NamedNode(DCAT + "theme")
    for code in found:
        term = NamedNode(EU_DATA_THEME + code)
        lines.add(_line(Triple(subject, theme, term)))
        lines.add(_line(Triple(term, NamedNode(RDF_TYPE), NamedNode(SKOS + "Concept"))))
        lines.add(
            _line(
                Triple(
                    term,
                    NamedNode(SKOS + "prefLabel"),
                    Literal(EU_THEME_LABELS[code], language="en"),
                )
            )
        )
    ntriples = b"\n".join(sorted(lines)) + b"\n"

    finding = Finding(
        Stage.MAP,
        Severity.INFO,
        "eu-theme-assigned",
        "EU data theme(s) added by the categorisation: "
        + "; ".join(f"{code} from {why}" for code, why in sorted(found.items())),
        location=dataset.dataset_iri,
        path=DCAT + "theme",
    )
    themes = tuple(sorted({*dataset.themes, *(EU_DATA_THEME + c for c in found)}))
    return replace(
        dataset,
        ntriples=ntriples,
        content_hash=content_hash(ntriples),
        findings=(*dataset.findings, finding),
        themes=themes,
    )
