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

The source's settings and the tables they compile to are
:mod:`aggregator.config.categorisation` (``[sources.NAME.categorisation]``).

The added triples hold no blank node, so they are merged into the canonical N-Triples lines
without canonicalising again.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache

from pyoxigraph import BlankNode, Literal, NamedNode, RdfFormat, Triple, parse, serialize

from aggregator.config.categorisation import CategorisationConfig, CategoryTable, compile_table
from aggregator.core.models import Finding, MappedDataset, Severity, Stage, content_hash
from aggregator.core.vocab import DCAT, DCT, EU_DATA_THEME, EU_THEME_LABELS, RDF_TYPE, RDFS, SKOS
from aggregator.mapping.base import merge_lines

GEODCAT_TOPIC = "http://data.europa.eu/930/topicCategory"
CATEGORY_PROPERTIES = frozenset({DCAT + "theme", DCT + "subject", GEODCAT_TOPIC})
KEYWORD = DCAT + "keyword"
NAME_PROPERTIES = frozenset(
    {SKOS + "prefLabel", SKOS + "notation", SKOS + "altLabel", RDFS + "label"}
)
IN_SCHEME = SKOS + "inScheme"
_NEEDLES = (b"#theme>", b"/subject>", b"/topicCategory>", b"#keyword>")
# the statements categorisation reads, found by their predicate (" <IRI> ": mappers write
# N-Triples with single spaces); parsing only these few is much cheaper than parsing the
# whole graph and looking at every triple in Python (docs/benchmarks.md#mapping). A literal
# that happens to hold such text brings its statement along, which the predicate checks
# below then ignore.
_READ = re.compile(
    b" <(?:"
    + b"|".join(
        re.escape(p.encode())
        for p in sorted({*CATEGORY_PROPERTIES, KEYWORD, *NAME_PROPERTIES, IN_SCHEME})
    )
    + b")> "
)


def _statements_read(data: bytes) -> bytes:
    """The lines of ``data`` that may state one of the predicates categorisation reads, in
    their order. One scan with one pattern (its literal prefix ``" <http://"`` is searched in
    C): half the cost of one ``find`` loop per predicate (docs/benchmarks.md#issue-30)."""
    lines = []
    last = -1  # the end of the last line taken: a line is taken once
    for match in _READ.finditer(data):
        start = data.rfind(b"\n", 0, match.start()) + 1
        if start <= last:
            continue
        end = data.find(b"\n", match.end())
        last = end = len(data) if end == -1 else end
        lines.append(data[start:end])
    return b"\n".join(lines)


def _line(triple: Triple) -> bytes:
    data = serialize([triple], format=RdfFormat.N_TRIPLES)
    assert data is not None
    return data.rstrip(b"\n")


def categorise(
    dataset: MappedDataset, config: CategorisationConfig, *, hash_content: bool = True
) -> MappedDataset:
    """``dataset`` with the EU themes its categories stand for added (itself when none).
    ``hash_content=False``: its ``content_hash`` is left as it was, for a caller that sets it
    after a later step (:func:`aggregator.mapping.finish.finish_mapped`)."""
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
    return _with_themes(dataset, subject, found, hash_content)


class _Categories:
    """What the dataset's statements say about its categories."""

    def __init__(self, triples: list[Triple], subject: NamedNode) -> None:
        self.names: dict[NamedNode | BlankNode, list[Triple]] = {}
        self.categories: list[NamedNode | BlankNode | Literal] = []
        self.keywords: list[Literal] = []
        self.have: set[str] = set()  # EU themes the dataset has already
        for t in triples:  # one pass, no call per triple; each term read once
            node, predicate = t.subject, t.predicate.value
            if node == subject:
                if predicate in CATEGORY_PROPERTIES:
                    self._category(predicate, t.object)
                elif predicate == KEYWORD and isinstance(t.object, Literal):
                    self.keywords.append(t.object)
            named = predicate in NAME_PROPERTIES or predicate == IN_SCHEME
            if named and isinstance(node, NamedNode | BlankNode):
                self.names.setdefault(node, []).append(t)

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


@lru_cache(maxsize=64)
def _theme_lines(code: str) -> tuple[bytes, bytes]:
    """The type and label statements of an EU theme (the same in every record)."""
    term = NamedNode(EU_DATA_THEME + code)
    label = Literal(EU_THEME_LABELS[code], language="en")
    return (
        _line(Triple(term, NamedNode(RDF_TYPE), NamedNode(SKOS + "Concept"))),
        _line(Triple(term, NamedNode(SKOS + "prefLabel"), label)),
    )


def _with_themes(
    dataset: MappedDataset, subject: NamedNode, found: dict[str, str], hash_content: bool
) -> MappedDataset:
    """``dataset`` with the themes ``found`` added, and a finding saying why."""
    theme = NamedNode(DCAT + "theme")
    added = []
    for code in found:
        term = NamedNode(EU_DATA_THEME + code)
        added.append(_line(Triple(subject, theme, term)))
        added.extend(_theme_lines(code))
    ntriples = merge_lines(dataset.ntriples, set(), added)

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
        content_hash=content_hash(ntriples) if hash_content else dataset.content_hash,
        findings=(*dataset.findings, finding),
        themes=themes,
    )
