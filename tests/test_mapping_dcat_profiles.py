"""Golden tests of the dcat mapper on realistic documents of the DCAT-AP profiles.

``tests/data/dcat/profiles/`` holds one document per profile / serialisation (see
docs/mappings/dcat.md, "Golden corpus"); ``tests/data/dcat/golden/<name>.nq`` the expected
output: each record's canonical N-Triples in the graph named after its dataset IRI, its
catalogue facts in ``<dataset IRI>#catalogue-facts``; ``<name>.findings.json`` the findings
(rule and severity) per record. Canonical N-Triples are equal exactly when graphs are
isomorphic, so comparing them is an isomorphism test. Regenerate after a deliberate change
with ``UPDATE_GOLDEN=1 pytest tests/test_mapping_dcat_profiles.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import pyoxigraph as ox
import pytest

from aggregator.core.models import MappedDataset, RawRecord, Severity
from aggregator.mapping.base import MappingContext, canonical_ntriples
from aggregator.mapping.dcat import DcatMapper, canonical_quads
from aggregator.mapping.dcat.accounting import account
from aggregator.mapping.dcat.input import parse_document
from aggregator.mapping.ranges import complete_ranges
from aggregator.validate.shacl import ShaclValidator

DATA = Path(__file__).parent / "data" / "dcat"
PROFILES = DATA / "profiles"
GOLDEN = DATA / "golden"
CTX = MappingContext(base_iri="https://agg.example.org/", source="golden")
DOCS = sorted(p.name for p in PROFILES.iterdir() if p.suffix in {".ttl", ".rdf", ".jsonld", ".nt"})
URLS = {
    "relative.rdf": "https://harbour.example.org/catalogue/records/harbour.rdf",
}
# documents that meet DCAT-AP 2.1.1 (mandatory properties and ranges) as written
VALID_211 = {  # the others are dirty on purpose (literal formats, plain dates, ...)
    "context.jsonld",
    "dcat-ap-2.1.1-catalog.ttl",
    "relative.rdf",
}


def record(name: str, payload: bytes | None = None, media_type: str = "") -> RawRecord:
    return RawRecord(
        source="golden",
        local_id=name,
        format="dcat",
        payload=(PROFILES / name).read_bytes() if payload is None else payload,
        media_type=media_type,
        url=URLS.get(name, f"https://golden.example.org/{name}"),
        is_collection=True,
    )


@pytest.fixture(scope="module")
def mapper() -> DcatMapper:
    return DcatMapper()


@cache
def mapped(name: str) -> tuple[MappedDataset, ...]:
    return tuple(DcatMapper().map(record(name), CTX))


def _golden_text(records: tuple[MappedDataset, ...]) -> tuple[str, str]:
    lines = []
    findings: dict[str, list[str]] = {}
    for m in records:
        facts = (m.dataset_iri + "#catalogue-facts", m.catalog_ntriples)
        for graph, data in [(m.dataset_iri, m.ntriples), facts]:
            for line in data.decode().splitlines():
                lines.append(f"{line[:-2]} <{graph}> .")
        findings[m.dataset_iri] = sorted({f"{f.rule} {f.severity.value}" for f in m.findings})
    return "\n".join(lines) + "\n", json.dumps(findings, indent=1, sort_keys=True) + "\n"


def _graphs(nquads: str) -> dict[str, bytes]:
    """Expected canonical N-Triples per graph name, from the golden N-Quads."""
    out: dict[str, list[str]] = {}
    for line in nquads.splitlines():
        triple, graph, _dot = line.rsplit(" ", 2)
        out.setdefault(graph[1:-1], []).append(triple + " .")
    return {g: ("\n".join(sorted(lines)) + "\n").encode() for g, lines in out.items()}


@pytest.mark.parametrize("name", DOCS)
def test_golden_output(name: str) -> None:
    records = mapped(name)
    nq, findings = _golden_text(records)
    nq_path, findings_path = GOLDEN / f"{name}.nq", GOLDEN / f"{name}.findings.json"
    if os.environ.get("UPDATE_GOLDEN"):
        nq_path.write_text(nq, encoding="utf-8")
        findings_path.write_text(findings, encoding="utf-8")
    expected = _graphs(nq_path.read_text(encoding="utf-8"))
    for m in records:
        assert m.ntriples == expected.get(m.dataset_iri, b""), m.dataset_iri
        facts = expected.get(m.dataset_iri + "#catalogue-facts", b"")
        assert m.catalog_ntriples == facts, m.dataset_iri
    assert {m.dataset_iri for m in records} == {g for g in expected if "#catalogue" not in g}
    assert json.loads(findings) == json.loads(findings_path.read_text(encoding="utf-8"))


_CONVERTIBLE = [n for n in DOCS if n not in {"illegal-iris.ttl", "context.jsonld"}]


@pytest.mark.parametrize("name", _CONVERTIBLE)
@pytest.mark.parametrize(
    ("fmt", "media_type"),
    [
        (ox.RdfFormat.TURTLE, "text/turtle"),
        (ox.RdfFormat.RDF_XML, "application/rdf+xml"),
        (ox.RdfFormat.N_TRIPLES, "application/n-triples"),
        (ox.RdfFormat.JSON_LD, "application/ld+json"),
    ],
)
def test_same_output_in_every_serialisation(
    mapper: DcatMapper, name: str, fmt: ox.RdfFormat, media_type: str
) -> None:
    """The same graph in another serialisation maps to the same records, byte for byte."""
    original = record(name)
    quads = list(ox.parse(original.payload, format=_format(name), base_iri=original.url))
    payload = ox.serialize((q.triple for q in quads), format=fmt)
    assert payload is not None
    again = mapper.map(record(name, payload=payload, media_type=media_type), CTX)
    assert [(m.dataset_iri, m.ntriples, m.catalog_ntriples) for m in again] == sorted(
        ((m.dataset_iri, m.ntriples, m.catalog_ntriples) for m in mapped(name)),
        key=lambda t: [m.dataset_iri for m in again].index(t[0]),
    )


def _format(name: str) -> ox.RdfFormat:
    fmt = ox.RdfFormat.from_extension(name.rsplit(".", 1)[1])
    assert fmt is not None
    return fmt


# --- accounting: every input triple is kept, rewritten by a named rule, or reported ----------


@pytest.mark.parametrize("name", DOCS)
def test_every_input_triple_accounted_for(mapper: DcatMapper, name: str) -> None:
    records = mapped(name)
    result = account(record(name), records, mapper.rules)
    assert result.unaccounted == 0, result.missing
    assert set(result.by_rule) <= set(mapper.rules.rule_ids)
    if result.reported:
        assert any(f.rule == "unreachable-triples" for m in records for f in m.findings)


def test_corpus_share_kept_or_rewritten(mapper: DcatMapper) -> None:
    totals = [account(record(n), mapped(n), mapper.rules) for n in DOCS]
    total = sum(a.total for a in totals)
    share = sum(a.kept + a.rewritten for a in totals) / total
    assert share > 0.99
    assert sum(a.reported for a in totals) == 6  # the hydra paging node, a merged office


# --- profile-specific expectations --------------------------------------------------------


def _lines(name: str) -> str:
    return "".join(m.ntriples.decode() for m in mapped(name))


def test_dcat_ap_211_catalogue() -> None:
    records = mapped("dcat-ap-2.1.1-catalog.ttl")
    iris = {m.dataset_iri for m in records}
    assert "https://agg.example.org/dataset/golden/region-air-quality-hourly" in iris
    assert "https://opendata.region.example.eu/api/air" in iris  # the data service
    assert len(iris) == 3
    text = _lines("dcat-ap-2.1.1-catalog.ttl")
    for gone in ("owl#versionInfo", "schema.org/startDate", "purl.org/adms/status/"):
        assert gone not in text
    assert "dcat#isVersionOf" in text and "dcat#hasVersion" in text
    facts = records[0].catalog_ntriples.decode()  # the catalogue's language and licence kept
    assert "<http://purl.org/dc/terms/language>" in facts
    assert "<http://purl.org/dc/terms/license>" in facts


def test_national_profile_properties_kept() -> None:
    de = _lines("dcat-ap-de.rdf")
    for prop in (
        "contributorID",
        "politicalGeocodingURI",
        "licenseAttributionByText",
        "maintainer",
    ):
        assert f"<http://dcat-ap.de/def/dcatde/{prop}>" in de
    assert '"\\u00a7 12 E-Government-Gesetz"@de' in de or '"§ 12 E-Government-Gesetz"@de' in de
    no = _lines("dcat-ap-no.ttl")
    assert "<https://data.norge.no/vocabulary/dcatno#accessRightsComment>" in no
    assert '"Barnehagar"@nn' in no and '"Barnehager"@nb' in no


def test_multilingual_swiss_dataset() -> None:
    text = _lines("opendata-swiss.rdf")
    for lang in ("de", "fr", "it", "en"):
        assert f"@{lang} ." in text
    assert text.count("<http://purl.org/dc/terms/title>") == 4 + 4 + 1
    # a literal language becomes the EU language IRI; a literal place a dct:Location node
    assert "<http://publications.europa.eu/resource/authority/language/ITA>" in text
    assert '<http://www.w3.org/2000/01/rdf-schema#label> "Schweiz"' in text
    # the rights statement is kept as a dct:RightsStatement node carrying the text
    assert '"NonCommercialAllowed-CommercialAllowed-ReferenceRequired"' in text


def test_ckan_export() -> None:
    records = mapped("ckan-100.nt")
    assert len(records) == 100
    text = "".join(m.ntriples.decode() for m in records)
    assert "file-type/CSV>" in text and "media-types/text/csv>" in text
    assert '"12 MB"' in text  # an invalid byte size is kept, with a warning
    assert "<mailto:opendata@city.example.org>" in text
    assert "frequency/MONTHLY>" in text and "frequency/DAILY>" in text  # "R/P1D"
    warnings = {f.rule for m in records for f in m.findings if f.severity is Severity.WARNING}
    assert warnings == {"unreachable-triples", "byte-size-datatype"}


def test_json_ld_known_context_resolved_and_undefined_key_reported() -> None:
    [m] = mapped("context.jsonld")
    assert m.dataset_iri == "https://portal.example.org/dataset/rail-punctuality"
    text = m.ntriples.decode()
    assert '"Ponctualit\\u00e9 ferroviaire"@fr' in text or '"Ponctualité ferroviaire"@fr' in text
    assert "<https://portal.example.org/ns#internalCode>" in text
    [finding] = [f for f in m.findings if f.rule == "json-ld-term-undefined"]
    assert "legacyField" in finding.message


def test_relative_iris_resolved() -> None:
    [m] = mapped("relative.rdf")
    assert m.dataset_iri == "https://harbour.example.org/catalogue/records/dataset/harbour-traffic"
    text = m.ntriples.decode()
    assert "<https://harbour.example.org/catalogue/org/port-authority>" in text
    assert "<https://harbour.example.org/catalogue/records/harbour.rdf#csv>" in text


def test_illegal_iris_encoded_and_kept_as_identifier() -> None:
    [m] = mapped("illegal-iris.ttl")
    assert m.dataset_iri == "https://data.example.org/dataset/water%20quality%202023"
    text = m.ntriples.decode()
    assert '"https://data.example.org/dataset/water quality 2023"' in text
    assert "<https://data.example.org/org/%7Bhealth%7D>" in text
    assert "(100%25).csv>" in text
    assert any(f.rule == "iri-percent-encoded" for f in m.findings)


# --- before / after: DCAT-AP 2.1.1 in, DCAT-AP 3.0.1 out --------------------------------------


@cache
def validators() -> tuple[ShaclValidator, ShaclValidator]:
    return ShaclValidator(shapes=[DATA / "dcat-ap-2.1.1.ttl"]), ShaclValidator()


def conforms_211(name: str) -> bool:
    raw = record(name)
    quads = parse_document(raw.payload, raw.media_type, raw.url).quads
    data = canonical_quads(quads)
    whole = MappedDataset(name, name, data, "")
    return validators()[0].validate_graph(whole).conforms


@pytest.mark.parametrize("name", DOCS)
def test_valid_input_stays_valid(name: str) -> None:
    """A document meeting DCAT-AP 2.1.1 gives records that all meet DCAT-AP 3.0.1."""
    before = conforms_211(name)
    assert before == (name in VALID_211)
    # as a harvest validates them: after the range step that follows every mapper
    after = [validators()[1].validate_graph(complete_ranges(m)) for m in mapped(name)]
    if before:
        found = [
            (f.location, f.path)
            for r in after
            for f in r.findings
            if f.severity is Severity.VIOLATION
        ]
        assert found == []


SERVICE_AND_BLANK_DATASET = b"""
@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct:  <http://purl.org/dc/terms/> .
<https://geo.example.eu/catalogue> a dcat:Catalog ;
    dct:title "Geodata catalogue"@en ; dct:description "Geodata of the region."@en ;
    dcat:dataset _:parcels ; dcat:service <https://geo.example.eu/ogc/features> .
_:parcels a dcat:Dataset ;
    dct:identifier "cadastral-parcels" ;
    dct:title "Cadastral parcels"@en ;
    dct:description "Parcel boundaries of the land register."@en ;
    dcat:distribution [ a dcat:Distribution ;
        dcat:accessURL <https://geo.example.eu/ogc/features/collections/parcels> ] .
<https://geo.example.eu/ogc/features> a dcat:DataService ;
    dct:title "Parcels feature service"@en ;
    dcat:endpointURL <https://geo.example.eu/ogc/features> ;
    dcat:servesDataset _:parcels .
"""
MINTED = "https://agg.example.org/dataset/golden/cadastral-parcels"
SERVICE = "https://geo.example.eu/ogc/features"


def test_a_served_blank_node_dataset_is_linked_by_its_minted_iri(mapper: DcatMapper) -> None:
    """A service's dcat:servesDataset naming a blank-node dataset names the IRI minted for that
    dataset, in the service's record as in the catalogue's list: the link no longer dangles."""
    raw = record("geo.ttl", SERVICE_AND_BLANK_DATASET, "text/turtle")
    records = {m.dataset_iri: m for m in mapper.map(raw, CTX)}
    assert set(records) == {MINTED, SERVICE}
    served = f"<{SERVICE}> <http://www.w3.org/ns/dcat#servesDataset> <{MINTED}> .\n".encode()
    assert served in records[SERVICE].ntriples
    assert b"servesDataset> _:" not in records[SERVICE].ntriples
    listed = f"<http://www.w3.org/ns/dcat#dataset> <{MINTED}> .".encode()
    assert listed in records[MINTED].catalog_ntriples
    identifier = f'<{MINTED}> <http://purl.org/dc/terms/identifier> "cadastral-parcels" .'
    assert identifier.encode() in records[MINTED].ntriples


def test_a_served_blank_node_dataset_conforms_to_the_official_shapes(mapper: DcatMapper) -> None:
    from official_shapes import official_violations

    raw = record("geo.ttl", SERVICE_AND_BLANK_DATASET, "text/turtle")
    for m in mapper.map(raw, CTX):
        # the link to a dataset another record describes is not counted (cross-record); a
        # blank node was counted: it is no IRI another record can describe
        assert official_violations(complete_ranges(m).ntriples) == [], m.dataset_iri


@pytest.mark.parametrize("name", DOCS)
def test_output_is_canonical(name: str) -> None:
    """Type lines added beside the dataset are rendered exactly as the serialiser would."""
    for m in mapped(name):
        for data in (m.ntriples, m.catalog_ntriples):
            reparsed = [q.triple for q in ox.parse(data, format=ox.RdfFormat.N_TRIPLES)]
            assert canonical_ntriples(reparsed) == data
