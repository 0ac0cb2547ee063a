"""The ckan mapper on packages as real portals publish them (tests/data/ckan/, written for this
project in the way data.gov.uk, catalog.data.gov, GovData and ckanext-dcat portals write them):
the exact triples of the ``spatial`` locations and of the dates, the input shapes of
``aggregator map --from ckan``, and conformance to the official DCAT-AP 3.0.1 shapes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from official_shapes import official_violations
from pyoxigraph import BlankNode, Literal, NamedNode, RdfFormat, Triple, parse

from aggregator.cli import main
from aggregator.core.errors import MappingError
from aggregator.core.models import MappedDataset, RawRecord, Severity
from aggregator.mapping.base import MappingContext
from aggregator.mapping.ckan import CkanMapper

DATA = Path(__file__).parent / "data" / "ckan"
CTX = MappingContext(base_iri="http://example.org/", source="src")
DCAT = "http://www.w3.org/ns/dcat#"
DCT = "http://purl.org/dc/terms/"
XSD = "http://www.w3.org/2001/XMLSchema#"
SKOS = "http://www.w3.org/2004/02/skos/core#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
GEOMETRY = "http://www.w3.org/ns/locn#geometry"
WKT = NamedNode("http://www.opengis.net/ont/geosparql#wktLiteral")
GEOJSON = NamedNode("http://www.opengis.net/ont/geosparql#geoJSONLiteral")
DATE_TIME = NamedNode(XSD + "dateTime")


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def map_json(value: Any, local_id: str = "p", url: str | None = None) -> list[MappedDataset]:
    raw = RawRecord("src", local_id, "ckan", json.dumps(value).encode(), "application/json", url)
    return CkanMapper().map(raw, CTX)


def one(value: Any) -> MappedDataset:
    (mapped,) = map_json(value)
    return mapped


def triples(mapped: MappedDataset) -> list[Triple]:
    return list(parse(mapped.ntriples, format=RdfFormat.N_TRIPLES))


def objects(mapped: MappedDataset, subject: Any, predicate: str) -> list[Any]:
    return [
        t.object for t in triples(mapped) if t.subject == subject and t.predicate.value == predicate
    ]


def location(mapped: MappedDataset) -> dict[str, Any]:
    """The one dct:spatial location of the dataset: {predicate IRI: object}."""
    (node,) = objects(mapped, NamedNode(mapped.dataset_iri), DCT + "spatial")
    assert isinstance(node, BlankNode)
    found: dict[str, Any] = {}
    for t in triples(mapped):
        if t.subject == node:
            assert t.predicate.value not in found, f"two values of {t.predicate.value}"
            found[t.predicate.value] = t.object
    return found


def package(**fields: Any) -> dict[str, Any]:
    return {"id": "pkg-1", "name": "pkg-1", "title": "A package", "notes": "Text.", **fields}


def spatial_extra(value: str, **fields: Any) -> dict[str, Any]:
    return package(extras=[{"key": "spatial", "value": value}], **fields)


# --- spatial ------------------------------------------------------------------------------------


def test_a_spatial_polygon_extra_is_a_location_with_geometry_and_bbox() -> None:
    mapped = one(load("dgu-package-show.json"))
    assert location(mapped) == {
        RDF_TYPE: NamedNode(DCT + "Location"),
        GEOMETRY: Literal(
            '{"type":"Polygon","coordinates":[[[-6.418,49.864],[1.768,49.864],[1.768,55.812],'
            "[-6.418,55.812],[-6.418,49.864]]]}",
            datatype=GEOJSON,
        ),
        DCAT + "bbox": Literal(
            "POLYGON((-6.418 49.864,1.768 49.864,1.768 55.812,-6.418 55.812,-6.418 49.864))",
            datatype=WKT,
        ),
    }
    assert '"Polygon"' not in mapped.ntriples.decode().replace('"type":"Polygon"', "")


def test_a_multipolygon_gets_the_envelope_of_all_its_parts() -> None:
    first, _second = map_json(load("datagov-package-search.json"))
    found = location(first)
    assert found[DCAT + "bbox"] == Literal(
        "POLYGON((-179.15 24.52,-66.95 24.52,-66.95 71.39,-179.15 71.39,-179.15 24.52))",
        datatype=WKT,
    )
    assert json.loads(found[GEOMETRY].value)["type"] == "MultiPolygon"
    assert found[GEOMETRY].datatype == GEOJSON


def test_a_point_is_its_own_bbox_and_centroid() -> None:
    _first, second = map_json(load("datagov-package-search.json"))
    point = Literal("POINT(-77.0365 38.8977)", datatype=WKT)
    assert location(second) == {
        RDF_TYPE: NamedNode(DCT + "Location"),
        GEOMETRY: Literal('{"type":"Point","coordinates":[-77.0365,38.8977]}', datatype=GEOJSON),
        DCAT + "bbox": point,
        DCAT + "centroid": point,
    }


def test_a_top_level_spatial_field_and_a_line() -> None:
    found = location(one(load("ckanext-dcat-spatial-field.json")))
    assert found[DCAT + "bbox"] == Literal(
        "POLYGON((4.3517 50.8449,4.3712 50.8449,4.3712 50.8503,4.3517 50.8503,4.3517 50.8449))",
        datatype=WKT,
    )
    assert DCAT + "centroid" not in found


def test_a_bounding_box_text_and_a_feature_and_a_collection() -> None:
    box = location(one(spatial_extra("-10.5,35,30,71.2")))
    assert box[DCAT + "bbox"] == Literal(
        "POLYGON((-10.5 35,30 35,30 71.2,-10.5 71.2,-10.5 35))", datatype=WKT
    )
    feature = {
        "type": "Feature",
        "properties": {},
        "geometry": {"type": "Point", "coordinates": [1, 2]},
    }
    found = location(one(spatial_extra(json.dumps(feature))))
    assert found[GEOMETRY].value == '{"type":"Point","coordinates":[1,2]}'
    collection = {
        "type": "GeometryCollection",
        "geometries": [
            {"type": "Point", "coordinates": [5, 45]},
            {"type": "LineString", "coordinates": [[6, 46], [7.5, 47]]},
        ],
    }
    found = location(one(spatial_extra(json.dumps(collection))))
    assert found[DCAT + "bbox"].value == "POLYGON((5 45,7.5 45,7.5 47,5 47,5 45))"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ('{"type": "Polygon", "coordinates": [[[11.36, 48.06], [11.72', "not JSON"),
        ('{"type": "Circle", "coordinates": [1, 2], "radius": 3}', '"Circle" is not a GeoJSON'),
        ('{"type": "Point", "coordinates": [200, 95]}', "is not a longitude/latitude"),
        ('{"type": "Point", "coordinates": ["1", "2"]}', 'coordinate "1" is not a number'),
        ('{"type": "Polygon", "coordinates": []}', "an empty array"),
        ('{"type": "Point"}', "not an array"),
        ("[1, 2, 3]", "not a GeoJSON object"),
    ],
)
def test_invalid_geojson_is_a_finding_quoting_it_and_the_package_is_mapped(
    value: str, reason: str
) -> None:
    mapped = one(spatial_extra(value))
    (finding,) = [f for f in mapped.findings if f.rule == "ckan-spatial-invalid"]
    assert finding.severity is Severity.WARNING
    assert reason in finding.message
    assert value[:40] in finding.message  # the value is kept in the finding
    assert finding.location == mapped.dataset_iri
    assert objects(mapped, NamedNode(mapped.dataset_iri), DCT + "spatial") == []
    assert objects(mapped, NamedNode(mapped.dataset_iri), DCT + "title")  # mapped as usual


def test_a_long_invalid_value_is_quoted_in_part() -> None:
    value = '{"type": "Polygon", "coordinates": [' + "[1, 2], " * 500
    (finding,) = [f for f in one(spatial_extra(value)).findings if f.rule == "ckan-spatial-invalid"]
    assert f"({len(value):,} characters)" in finding.message and len(finding.message) < 500


def test_a_place_name_or_iri_stays_a_place() -> None:
    named = one(spatial_extra("Bavaria"))
    (node,) = objects(named, NamedNode(named.dataset_iri), DCT + "spatial")
    assert objects(named, node, "http://www.w3.org/2000/01/rdf-schema#label") == [
        Literal("Bavaria")
    ]
    iri = "http://publications.europa.eu/resource/authority/country/DEU"
    linked = one(spatial_extra(iri))
    assert objects(linked, NamedNode(linked.dataset_iri), DCT + "spatial") == [NamedNode(iri)]


# --- dates --------------------------------------------------------------------------------------


def test_ckan_record_dates_are_issued_and_modified_in_utc() -> None:
    mapped = one(load("dgu-package-show.json"))
    dataset = NamedNode(mapped.dataset_iri)
    assert objects(mapped, dataset, DCT + "issued") == [
        Literal("2019-03-04T10:21:13.482913Z", datatype=DATE_TIME)
    ]
    assert objects(mapped, dataset, DCT + "modified") == [
        Literal("2024-06-18T07:55:02.113480Z", datatype=DATE_TIME)
    ]


def test_the_publishers_dates_win_over_the_record_dates() -> None:
    _first, second = map_json(load("datagov-package-search.json"))  # issued/modified extras
    dataset = NamedNode(second.dataset_iri)
    assert objects(second, dataset, DCT + "issued") == [
        Literal("2021-12-01", datatype=NamedNode(XSD + "date"))
    ]
    assert objects(second, dataset, DCT + "modified") == [
        Literal("2022-04-30T12:00:00Z", datatype=DATE_TIME)
    ]
    own = package(
        issued="2020-01-01",
        metadata_created="2021-01-01T00:00:00",
        metadata_modified="2021-06-01T00:00:00+02:00",
        extras=[{"key": "issued", "value": "2019-05-05"}],
    )
    mapped = one(own)
    dataset = NamedNode(mapped.dataset_iri)
    assert objects(mapped, dataset, DCT + "issued") == [
        Literal("2020-01-01", datatype=NamedNode(XSD + "date"))
    ]  # the field, then the extra, then CKAN's date
    assert objects(mapped, dataset, DCT + "modified") == [
        Literal("2021-06-01T00:00:00+02:00", datatype=DATE_TIME)
    ]  # a zone given is kept


def test_a_record_date_that_is_no_timestamp_is_kept_as_text() -> None:
    mapped = one(package(metadata_created="yesterday"))
    (issued,) = objects(mapped, NamedNode(mapped.dataset_iri), DCT + "issued")
    assert issued.value == "yesterday"


# --- groups, themes and samples -----------------------------------------------------------------


def test_groups_are_eu_themes_or_concepts_of_the_portal() -> None:
    mapped = one(
        package(
            groups=[
                {"name": "tran", "title": "Verkehr"},
                {"name": "geospatial", "title": "Geospatial"},
            ]
        )
    )
    themes = objects(mapped, NamedNode(mapped.dataset_iri), DCAT + "theme")
    group = NamedNode("http://example.org/group/src/geospatial")
    assert set(themes) == {
        NamedNode("http://publications.europa.eu/resource/authority/data-theme/TRAN"),
        group,
    }
    assert objects(mapped, group, RDF_TYPE) == [NamedNode(SKOS + "Concept")]
    assert objects(mapped, group, SKOS + "prefLabel") == [Literal("Geospatial")]
    assert objects(mapped, group, SKOS + "notation") == [Literal("geospatial")]


def test_a_free_text_theme_is_a_keyword_with_a_finding() -> None:
    mapped = one(package(extras=[{"key": "theme", "value": '["Water quality"]'}]))
    dataset = NamedNode(mapped.dataset_iri)
    assert objects(mapped, dataset, DCAT + "theme") == []
    assert objects(mapped, dataset, DCAT + "keyword") == [Literal("Water quality")]
    assert [f.rule for f in mapped.findings if f.rule.startswith("ckan-theme")] == [
        "ckan-theme-as-keyword"
    ]


def test_a_sample_url_is_a_distribution() -> None:
    url = NamedNode("https://data.example.org/sample.csv")
    mapped = one(package(sample=[url.value]))
    assert objects(mapped, NamedNode(mapped.dataset_iri), "http://www.w3.org/ns/adms#sample") == [
        url
    ]
    assert objects(mapped, url, RDF_TYPE) == [NamedNode(DCAT + "Distribution")]
    assert objects(mapped, url, DCAT + "accessURL") == [url]


def distribution_values(mapped: MappedDataset, predicate: str) -> set[Any]:
    dataset = NamedNode(mapped.dataset_iri)
    return {
        o
        for d in objects(mapped, dataset, DCAT + "distribution")
        for o in objects(mapped, d, predicate)
    }


def test_resource_urls_that_are_no_iris_as_written() -> None:
    resources = [
        {"id": "r1", "url": "http://example.org/my file.csv"},
        {"id": "r2", "url": "/dataset/p/resource/r2/download/data.csv"},
    ]
    search = "https://portal.example.org/api/3/action/package_search?rows=100"
    (mapped,) = map_json(package(resources=resources), url=search)
    assert distribution_values(mapped, DCAT + "accessURL") == {
        NamedNode("http://example.org/my%20file.csv"),
        NamedNode("https://portal.example.org/dataset/p/resource/r2/download/data.csv"),
    }
    assert [f.rule for f in mapped.findings].count("ckan-url-repaired") == 2
    (from_file,) = map_json(package(resources=resources[1:]), url="file:///tmp/p.json")
    assert distribution_values(from_file, DCAT + "accessURL") == {
        Literal("/dataset/p/resource/r2/download/data.csv")
    }  # nothing to resolve against: kept as text, with a warning
    (warning,) = [f for f in from_file.findings if f.rule == "ckan-url-not-iri"]
    assert warning.severity is Severity.WARNING


def test_plain_ckan_hashes() -> None:
    digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    resources = [
        {"id": "r1", "url": "https://x.example/1", "hash": f"sha256:{digest.upper()}"},
        {"id": "r2", "url": "https://x.example/2", "hash": "d41d8cd98f00b204e9800998ecf8427e"},
        {"id": "r3", "url": "https://x.example/3", "hash": "not a hash"},
    ]
    mapped = one(package(resources=resources))
    values = {
        (o.value, o.datatype.value)
        for c in distribution_values(mapped, "http://spdx.org/rdf/terms#checksum")
        for o in objects(mapped, c, "http://spdx.org/rdf/terms#checksumValue")
    }
    hex_binary = XSD + "hexBinary"
    assert values == {(digest, hex_binary), ("d41d8cd98f00b204e9800998ecf8427e", hex_binary)}
    (finding,) = [f for f in mapped.findings if f.rule == "ckan-hash-not-checksum"]
    assert "'not a hash'" in finding.message and finding.severity is Severity.WARNING
    assert official_violations(mapped.ntriples) == []


def test_an_author_known_by_email_alone_is_named_by_it() -> None:
    mapped = one(package(author_email="someone@example.org"))
    (creator,) = objects(mapped, NamedNode(mapped.dataset_iri), DCT + "creator")
    assert objects(mapped, creator, "http://xmlns.com/foaf/0.1/name") == [
        Literal("someone@example.org")
    ]
    assert "ckan-agent-named-by-email" in {f.rule for f in mapped.findings}


# --- input shapes -------------------------------------------------------------------------------


def test_every_input_shape_gives_one_dataset_per_package() -> None:
    show = load("dgu-package-show.json")
    bare = show["result"]
    search = load("datagov-package-search.json")
    listed = load("govdata-packages.json")
    assert map_json(show)[0].ntriples == map_json(bare)[0].ntriples
    from_search = map_json(search, "search.json")
    assert [m.local_id for m in from_search] == [p["id"] for p in search["result"]["results"]]
    from_list = map_json(listed, "list.json")
    assert [m.local_id for m in from_list] == [p["id"] for p in listed]
    assert map_json(bare, "one.json")[0].local_id == "one.json"  # one package: the record


def test_a_failed_answer_quotes_ckans_error() -> None:
    answer = {
        "help": "https://portal.example.org/api/3/action/help_show?name=package_show",
        "success": False,
        "error": {"message": "Not found", "__type": "Not Found Error"},
    }
    with pytest.raises(MappingError, match=r"CKAN API error answer.*Not Found Error: Not found"):
        map_json(answer)
    answer["error"] = {"__type": "Validation Error", "name": ["Missing value"]}
    with pytest.raises(MappingError, match=r'Validation Error: \{"name": \["Missing value"\]\}'):
        map_json(answer)


def test_bad_packages_in_a_list_are_named() -> None:
    listed = load("govdata-packages.json")
    untitled = copy.deepcopy(listed)
    del untitled[1]["title"]
    with pytest.raises(MappingError, match=r"package 2 of 2 in 'p': package '2d3c4b5a.*no title"):
        map_json(untitled)
    with pytest.raises(MappingError, match="package 3 of 3 in 'p' is not a CKAN package"):
        map_json([*listed, "laermkartierung"])
    with pytest.raises(MappingError, match="lists no CKAN package"):
        map_json({"success": True, "result": {"count": 0, "results": []}})
    with pytest.raises(MappingError, match="not a CKAN package, list of packages or API answer"):
        map_json("a string")


def cli_map(path: Path) -> Any:
    return CliRunner().invoke(
        main, ["map", "--from", "ckan", "--to", "ntriples", str(path)], catch_exceptions=False
    )


@pytest.mark.parametrize(
    ("name", "datasets"),
    [
        ("dgu-package-show.json", 1),
        ("datagov-package-search.json", 2),
        ("govdata-packages.json", 2),
        ("ckanext-dcat-spatial-field.json", 1),
    ],
)
def test_aggregator_map_reads_each_input_shape(name: str, datasets: int) -> None:
    result = cli_map(DATA / name)
    assert result.exit_code == 0, result.output
    graph = list(parse(result.stdout.encode(), format=RdfFormat.N_TRIPLES))
    found = {t.subject.value for t in graph if t.object == NamedNode(DCAT + "Dataset")}
    assert len(found) == datasets
    assert sum(1 for t in graph if t.predicate.value == GEOMETRY) == datasets - (
        name == "govdata-packages.json"  # the second one's geometry is broken: a finding
    )


def test_aggregator_map_on_a_failed_answer_says_what_ckan_said(tmp_path: Path) -> None:
    path = tmp_path / "answer.json"
    path.write_text(
        json.dumps(
            {
                "success": False,
                "error": {"message": "Access denied", "__type": "Authorization Error"},
            }
        )
    )
    result = CliRunner().invoke(main, ["map", "--from", "ckan", str(path)])
    assert result.exit_code != 0
    assert "Authorization Error: Access denied" in result.output
    assert "has no id" not in result.output


# --- the official shapes ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json")))
def test_golden_packages_conform_to_the_official_shapes(name: str) -> None:
    for mapped in map_json(load(name), name):
        assert official_violations(mapped.ntriples) == [], mapped.local_id


# --- source -------------------------------------------------------------------------------------

PROV_DERIVED = "http://www.w3.org/ns/prov#wasDerivedFrom"


def test_a_source_url_is_a_derivation_and_a_related_resource() -> None:
    """ckanext-dcat's ``source`` (a URL no record describes) is not dct:source, whose DCAT-AP
    3.0.1 range is a described dcat:Dataset: prov:wasDerivedFrom and dct:relation keep it."""
    from aggregator.mapping.ranges import complete_ranges

    url = NamedNode("https://water.example.eu/data/wfd-reports")
    mapped = complete_ranges(one(package(source=[url.value])))
    dataset = NamedNode(mapped.dataset_iri)
    assert objects(mapped, dataset, PROV_DERIVED) == [url]
    assert objects(mapped, dataset, DCT + "relation") == [url]
    assert objects(mapped, dataset, DCT + "source") == []
    assert [t for t in triples(mapped) if t.subject == url] == []  # nothing said about it
    (finding,) = [f for f in mapped.findings if f.rule == "ckan-source-as-derivation"]
    assert f"<{url.value}>" in finding.message and finding.severity is Severity.INFO
    assert official_violations(mapped.ntriples) == []


def test_a_source_text_is_a_provenance_statement() -> None:
    from aggregator.mapping.ranges import complete_ranges

    text = "Water Framework Directive reporting, 3rd cycle"
    mapped = complete_ranges(one(package(extras=[{"key": "source", "value": text}])))
    dataset = NamedNode(mapped.dataset_iri)
    assert objects(mapped, dataset, PROV_DERIVED) == []
    (statement,) = objects(mapped, dataset, DCT + "provenance")
    assert objects(mapped, statement, RDF_TYPE) == [NamedNode(DCT + "ProvenanceStatement")]
    assert objects(mapped, statement, "http://www.w3.org/2000/01/rdf-schema#label") == [
        Literal(text)
    ]
    (finding,) = [f for f in mapped.findings if f.rule == "ckan-source-as-derivation"]
    assert repr(text) in finding.message
    assert official_violations(mapped.ntriples) == []
