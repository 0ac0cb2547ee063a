"""The dcat mapper: parsing, splitting, identity, DCAT-AP 2 -> 3 rules, hostile input.

Graphs are compared by isomorphism (rdflib, tests only), never as strings.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pyoxigraph as ox
import pytest
import rdflib
from rdflib.compare import isomorphic

from aggregator.core.errors import MappingError, ParseError, UnsafeInputError
from aggregator.core.models import MappedDataset, RawRecord, Severity, Stage
from aggregator.demo.peers.sample_data import (
    bundled_dump_path,
    generate_dataset,
    generate_identifier,
    load_bundled_oai_records,
)
from aggregator.mapping.base import MappingContext, canonical_ntriples
from aggregator.mapping.dcat import DcatMapper, canonical_quads
from aggregator.mapping.dcat.rule_table import load_rules
from aggregator.mapping.dcat.rules import RDF_TYPE

DATA = Path(__file__).parent / "data" / "dcat"
CTX = MappingContext(base_iri="https://agg.example.org/", source="test-source")
XSD = "http://www.w3.org/2001/XMLSchema#"
MEDIA = {
    "ttl": "text/turtle",
    "rdf": "application/rdf+xml",
    "jsonld": "application/ld+json",
    "nt": "application/n-triples",
}


@pytest.fixture(scope="module")
def mapper() -> DcatMapper:
    return DcatMapper()


def raw(
    name: str,
    *,
    media_type: str | None = None,
    url: str | None = None,
    collection: bool = False,
    payload: bytes | None = None,
    local_id: str = "rec-1",
) -> RawRecord:
    ext = name.rsplit(".", 1)[-1]
    return RawRecord(
        source="test-source",
        local_id=local_id,
        format="dcat",
        payload=payload if payload is not None else (DATA / name).read_bytes(),
        media_type=media_type if media_type is not None else MEDIA.get(ext, ""),
        url=url,
        is_collection=collection,
    )


def graph(ntriples: bytes) -> rdflib.Graph:
    return rdflib.Graph().parse(data=ntriples.decode(), format="nt")


def rules_of(mapped: MappedDataset) -> set[str]:
    return {f.rule for f in mapped.findings}


# --- single record, every serialisation ----------------------------------------------------


@pytest.mark.parametrize("name", ["single.ttl", "single.rdf", "single.jsonld", "single.nt"])
def test_single_record_golden_in_every_serialisation(mapper: DcatMapper, name: str) -> None:
    [mapped] = mapper.map(raw(name), CTX)
    expected = rdflib.Graph().parse(DATA / "single.expected.nt", format="nt")
    assert isomorphic(graph(mapped.ntriples), expected)
    assert mapped.local_id == "rec-1"  # single-record payload with one dataset
    assert mapped.dataset_iri == "https://data.example.org/dataset/noise"
    assert mapped.themes == ("http://publications.europa.eu/resource/authority/data-theme/ENVI",)
    assert mapped.catalog_ntriples == b""
    assert {
        "version-info",
        "period-start",
        "period-end",
        "vcard-kind",
        "status-completed",
        "byte-size-datatype",
        "format-literal",
        "media-type-literal",
    } <= rules_of(mapped)
    assert all(f.stage is Stage.MAP and f.severity is Severity.INFO for f in mapped.findings)


def test_format_sniffed_without_media_type(mapper: DcatMapper) -> None:
    for name in ["single.ttl", "single.rdf", "single.jsonld", "single.nt"]:
        [mapped] = mapper.map(raw(name, media_type=""), CTX)
        assert mapped.dataset_iri == "https://data.example.org/dataset/noise"


def test_format_from_url_extension(mapper: DcatMapper) -> None:
    record = raw("single.rdf", media_type="", url="https://data.example.org/records/noise.rdf")
    assert mapper.map(record, CTX)[0].dataset_iri == "https://data.example.org/dataset/noise"


@pytest.mark.parametrize("name", ["single.ttl", "relative.ttl"])  # with / without blank nodes
def test_output_is_canonical_and_byte_equal_to_base_helper(mapper: DcatMapper, name: str) -> None:
    record = raw(name, url="https://data.example.org/c/p.ttl")
    [mapped] = mapper.map(record, CTX)
    quads = list(ox.parse(record.payload, format=ox.RdfFormat.TURTLE, base_iri=record.url))
    assert canonical_quads(quads) == canonical_ntriples(q.triple for q in quads)
    reparsed = list(ox.parse(mapped.ntriples, format=ox.RdfFormat.N_TRIPLES))
    assert canonical_quads(reparsed) == mapped.ntriples
    assert canonical_ntriples(q.triple for q in reparsed) == mapped.ntriples


def test_idempotent_same_bytes_same_iris(mapper: DcatMapper) -> None:
    for name, collection in [("single.rdf", False), ("catalog.ttl", True)]:
        first = mapper.map(raw(name, collection=collection), CTX)
        second = DcatMapper().map(raw(name, collection=collection), CTX)
        assert [m.ntriples for m in first] == [m.ntriples for m in second]
        assert [m.dataset_iri for m in first] == [m.dataset_iri for m in second]
        assert [m.content_hash for m in first] == [m.content_hash for m in second]
        assert [m.catalog_ntriples for m in first] == [m.catalog_ntriples for m in second]


def test_language_tags_datatypes_and_unknown_properties_kept(mapper: DcatMapper) -> None:
    [mapped] = mapper.map(raw("single.ttl"), CTX)
    text = mapped.ntriples.decode()
    assert '"Lärmkarte"@de' in text
    assert '<https://data.example.org/customProperty> "kept as is"@fr-' in text
    assert f'"2020-01-01"^^<{XSD}date>' in text


def test_relative_iris_resolved_against_url(mapper: DcatMapper) -> None:
    record = raw("relative.ttl", url="https://data.example.org/catalogue/page1.ttl")
    [mapped] = mapper.map(record, CTX)
    assert mapped.dataset_iri == "https://data.example.org/catalogue/dataset/42"
    assert "<https://data.example.org/files/42.csv>" in mapped.ntriples.decode()


# --- catalogue: splitting, identity, catalogue facts --------------------------------------


@pytest.fixture(scope="module")
def catalog(mapper: DcatMapper) -> dict[str, MappedDataset]:
    record = raw("catalog.ttl", collection=True, url="https://cat.example.org/dump.ttl")
    return {m.dataset_iri: m for m in mapper.map(record, CTX)}


def test_catalog_split_into_datasets(catalog: dict[str, MappedDataset]) -> None:
    assert len(catalog) == 3
    roads = catalog["https://cat.example.org/roads"]
    assert roads.local_id == roads.dataset_iri  # collection: identified by the dataset IRI
    assert "https://agg.example.org/dataset/test-source/trees" in catalog
    g = graph(roads.ntriples)
    # the shared publisher and contact point are copied into each description
    assert (None, rdflib.URIRef("http://xmlns.com/foaf/0.1/name"), None) in g
    assert (None, rdflib.URIRef("http://www.w3.org/2006/vcard/ns#fn"), None) in g
    trees = graph(catalog["https://agg.example.org/dataset/test-source/trees"].ntriples)
    assert (None, rdflib.URIRef("http://xmlns.com/foaf/0.1/name"), None) in trees
    assert (None, rdflib.URIRef("http://www.w3.org/2006/vcard/ns#fn"), None) in trees


def test_link_to_other_dataset_keeps_only_the_link(catalog: dict[str, MappedDataset]) -> None:
    trees = catalog["https://agg.example.org/dataset/test-source/trees"].ntriples.decode()
    assert "<http://purl.org/dc/terms/relation> <https://cat.example.org/roads>" in trees
    assert '"Roads"@en' not in trees
    assert "Not linked from any dataset" not in trees


def test_blank_node_datasets_minted_and_identified(catalog: dict[str, MappedDataset]) -> None:
    trees = catalog["https://agg.example.org/dataset/test-source/trees"]
    assert "dataset-iri-minted" in rules_of(trees)
    [benches_iri] = [
        iri
        for iri in catalog
        if iri.startswith("https://agg.example.org/dataset/test-source/")
        and not iri.endswith("/trees")
    ]
    benches = catalog[benches_iri]
    # no dct:identifier: the IRI comes from a hash of its description, and one is added
    assert f'<http://purl.org/dc/terms/identifier> "{benches_iri}"' in benches.ntriples.decode()
    assert "_:" not in benches.ntriples.decode()  # the dataset itself is no blank node


def test_catalogue_facts_go_to_catalog_ntriples(catalog: dict[str, MappedDataset]) -> None:
    roads = catalog["https://cat.example.org/roads"]
    facts = graph(roads.catalog_ntriples)
    cat = rdflib.URIRef("https://cat.example.org/catalog")
    dcat = rdflib.Namespace("http://www.w3.org/ns/dcat#")
    assert (cat, rdflib.RDF.type, dcat.Catalog) in facts
    assert (cat, rdflib.URIRef("http://purl.org/dc/terms/license"), None) in facts
    assert (cat, dcat.version, rdflib.Literal("7")) in facts  # rules apply to catalogue facts
    # of the catalogue's member lists, only the triples naming this dataset
    assert set(facts.objects(cat, dcat.dataset)) == {rdflib.URIRef("https://cat.example.org/roads")}
    assert set(facts.objects(cat, dcat.record)) == {
        record := rdflib.URIRef("https://cat.example.org/record-roads")
    }
    # the source's catalogue record about this dataset, with its blank node
    assert (record, rdflib.URIRef("http://purl.org/dc/terms/conformsTo"), None) in facts
    assert (
        b"record-roads"
        not in catalog["https://agg.example.org/dataset/test-source/trees"].catalog_ntriples
    )
    # and none of it in the dataset graph
    assert b"https://cat.example.org/catalog" not in roads.ntriples
    assert b"record-roads" not in roads.ntriples


def test_single_payload_blank_dataset_uses_local_id(mapper: DcatMapper) -> None:
    payload = b"""@prefix dcat: <http://www.w3.org/ns/dcat#> .
        [] a dcat:Dataset ; <http://purl.org/dc/terms/title> "No IRI"@en ."""
    [mapped] = mapper.map(raw("x.ttl", payload=payload, local_id="oai:x:1"), CTX)
    assert mapped.local_id == "oai:x:1"
    digest = hashlib.sha256(b"oai:x:1").hexdigest()[:32]
    assert mapped.dataset_iri == f"https://agg.example.org/dataset/test-source/{digest}"
    assert '<http://purl.org/dc/terms/identifier> "oai:x:1"' in mapped.ntriples.decode()


# --- rules ----------------------------------------------------------------------------------


def _rule_input() -> tuple[bytes, set[str]]:
    """A Turtle document that triggers every rule of the table once, built from the table."""
    rules = load_rules()
    lines = [
        "<https://data.example.org/d> a <http://www.w3.org/ns/dcat#Dataset> ; "
        '<http://purl.org/dc/terms/title> "t" .'
    ]
    ids = set()
    for n, rule in enumerate(rules.rules):
        s = f"<https://data.example.org/r{n}>"
        lines.append(f"<https://data.example.org/d> <https://data.example.org/p> {s} .")
        if rule.kind == "rename-property":
            lines.append(f'{s} <{rule.source}> "v" .')
        elif rule.kind == "rename-class":
            lines.append(f"{s} a <{rule.source}> .")
        elif rule.kind == "map-value":
            lines.append(f"{s} <{rule.property}> <{rule.source}> .")
        elif rule.kind == "literal-datatype":
            value = {"non-negative-integer": "0042", "hex-binary": "0aff", "decimal": "12.5"}.get(
                rule.check, {"temporal": "2020-01-02", "duration": "P1D"}.get(rule.check, "")
            )
            lines.append(f'{s} <{rule.property}> "{value}" .')
        elif rule.kind == "literal-url":
            value = "data@example.org" if rule.email else "https://example.org/x"
            lines.append(f'{s} <{rule.property}> "{value}" .')
        elif rule.kind == "range-class":
            lines.append(f"{s} <{rule.property}> <https://example.org/untyped> .")
            lines.append(
                f"{s} <http://purl.org/dc/terms/publisher> <https://example.org/nameless> ."
            )
            ids.add("range-class-not-typed")
        else:
            known = {
                "file-type": "CSV", "media-type": "CSV", "language": "de", "licence": "CC-BY 4.0",
                "frequency": "monthly", "data-theme": "ENVI", "access-right": "public",
                "distribution-status": "completed", "planned-availability": "stable",
                "checksum-algorithm": "SHA-256",
            }  # fmt: skip
            if rule.lookup:
                lines.append(f'{s} <{rule.property}> "{known[rule.lookup]}" .')
                ids.add(rule.id)
            lines.append(f'{s} <{rule.property}> "zzz unknown value" .')
            ids.add(rule.fallback_id)
            continue
        ids.add(rule.id)
    return "\n".join(lines).encode(), ids


def test_every_rule_of_the_table_is_exercised(mapper: DcatMapper) -> None:
    payload, ids = _rule_input()
    [mapped] = mapper.map(raw("x.ttl", payload=payload), CTX)
    assert rules_of(mapped) == ids
    assert set(load_rules().rule_ids) == ids
    g = graph(mapped.ntriples)
    for rule in load_rules().rules:
        if rule.kind in ("rename-property",):
            assert (None, rdflib.URIRef(rule.source), None) not in g
            assert (None, rdflib.URIRef(rule.target), None) in g
        elif rule.kind == "rename-class":
            assert (None, rdflib.RDF.type, rdflib.URIRef(rule.target)) in g
        elif rule.kind == "map-value":
            assert (None, rdflib.URIRef(rule.property), rdflib.URIRef(rule.target)) in g
            assert (None, None, rdflib.URIRef(rule.source)) not in g


def test_byte_size_lexical_forms(mapper: DcatMapper) -> None:
    cases = {
        f'"12"^^<{XSD}integer>': '"12"',
        f'"12.0"^^<{XSD}decimal>': '"12"',
        '"0012"': '"12"',
        f'"1.2E3"^^<{XSD}double>': '"1200"',
    }
    for source, lexical in cases.items():
        payload = (
            "<https://data.example.org/d> a <http://www.w3.org/ns/dcat#Dataset> ; "
            '<http://purl.org/dc/terms/title> "t" ; '
            f"<http://www.w3.org/ns/dcat#byteSize> {source} ."
        ).encode()
        [mapped] = mapper.map(raw("x.ttl", payload=payload), CTX)
        assert f"{lexical}^^<{XSD}nonNegativeInteger>" in mapped.ntriples.decode(), source


@pytest.mark.parametrize("value", ['"412 kB"', f'"-5"^^<{XSD}integer>', f'"1.5"^^<{XSD}decimal>'])
def test_invalid_byte_size_kept_with_warning(mapper: DcatMapper, value: str) -> None:
    payload = (
        "<https://data.example.org/d> a <http://www.w3.org/ns/dcat#Dataset> ; "
        '<http://purl.org/dc/terms/title> "t" ; '
        f"<http://www.w3.org/ns/dcat#byteSize> {value} ."
    ).encode()
    [mapped] = mapper.map(raw("x.ttl", payload=payload), CTX)
    assert value.split("^^")[0] in mapped.ntriples.decode()
    assert "nonNegativeInteger" not in mapped.ntriples.decode()
    [finding] = [f for f in mapped.findings if f.rule == "byte-size-datatype"]
    assert finding.severity is Severity.WARNING


@pytest.mark.parametrize(
    ("prop", "literal", "expected"),
    [
        ("http://purl.org/dc/terms/format", '" .CSV "', "file-type/CSV"),
        ("http://purl.org/dc/terms/format", '"text/csv; charset=utf-8"', "file-type/CSV"),
        ("http://purl.org/dc/terms/format", '"Shapefile"', "file-type/SHP"),
        ("http://purl.org/dc/terms/format", '"GeoJSON"', "file-type/GEOJSON"),
        ("http://purl.org/dc/terms/format", '"rdf/xml"', "file-type/RDF_XML"),
        ("http://www.w3.org/ns/dcat#mediaType", '"application/JSON"', "application/json"),
        ("http://www.w3.org/ns/dcat#mediaType", '"XLSX"', "spreadsheetml.sheet"),
        ("http://www.w3.org/ns/dcat#mediaType", '"text/xml"', "media-types/text/xml"),
    ],
)
def test_literal_format_and_media_type_mapped(
    mapper: DcatMapper, prop: str, literal: str, expected: str
) -> None:
    payload = (
        "<https://data.example.org/d> a <http://www.w3.org/ns/dcat#Dataset> ; "
        '<http://purl.org/dc/terms/title> "t" ; '
        f"<http://www.w3.org/ns/dcat#distribution> <https://data.example.org/x> .\n"
        f"<https://data.example.org/x> <{prop}> {literal} ."
    ).encode()
    [mapped] = mapper.map(raw("x.ttl", payload=payload), CTX)
    [line] = [ln for ln in mapped.ntriples.decode().splitlines() if f"<{prop}>" in ln]
    assert line.split(" ", 2)[2].startswith("<")
    assert expected in line


@pytest.mark.parametrize(
    ("prop", "cls", "rule"),
    [
        ("http://purl.org/dc/terms/format", "MediaTypeOrExtent", "format-literal-unknown"),
        ("http://www.w3.org/ns/dcat#mediaType", "MediaType", "media-type-literal-unknown"),
    ],
)
def test_unknown_literal_format_kept_as_typed_node(
    mapper: DcatMapper, prop: str, cls: str, rule: str
) -> None:
    payload = (
        "<https://data.example.org/d> a <http://www.w3.org/ns/dcat#Dataset> ; "
        '<http://purl.org/dc/terms/title> "t" ; '
        f'<{prop}> "Hand-drawn map"@en .'
    ).encode()
    [mapped] = mapper.map(raw("x.ttl", payload=payload), CTX)
    g = graph(mapped.ntriples)
    [node] = list(g.objects(rdflib.URIRef("https://data.example.org/d"), rdflib.URIRef(prop)))
    assert isinstance(node, rdflib.BNode)
    assert (node, rdflib.RDF.type, rdflib.URIRef("http://purl.org/dc/terms/" + cls)) in g
    assert (node, rdflib.RDFS.label, rdflib.Literal("Hand-drawn map", lang="en")) in g
    assert rule in rules_of(mapped)


# --- no triple lost ---------------------------------------------------------------------------


def _accounting(mapper: DcatMapper, record: RawRecord) -> None:
    """Every input triple reachable from a dataset is in the output, or rewritten by a rule."""
    mapped = mapper.map(record, CTX)
    rules = load_rules()
    watched = {r.source for r in rules.rules if r.kind == "rename-property"}
    watched |= {r.property for r in rules.rules if r.kind != "rename-property"}
    classes = {r.source for r in rules.rules if r.kind == "rename-class"}
    source = rdflib.Graph().parse(data=record.payload.decode(), format="turtle")
    for m in mapped:
        out = graph(m.ntriples) + graph(m.catalog_ntriples)
        fired = rules_of(m)
        for s, p, o in source:
            if isinstance(s, rdflib.BNode) or isinstance(o, rdflib.BNode):
                present = any(
                    (isinstance(s, rdflib.BNode) or s2 == s)
                    and p2 == p
                    and (isinstance(o, rdflib.BNode) or o2 == o)
                    for s2, p2, o2 in out.triples((None, p, None))
                )
            else:
                present = (s, p, o) in out
            if present:
                continue
            if str(p) in watched or (p == rdflib.RDF.type and str(o) in classes):
                assert fired - {"dataset-iri-minted"}, (s, p, o)
                continue
            # only triples not reachable from this dataset may be absent
            assert not _reachable(source, m, s), (s, p, o)


def _reachable(source: rdflib.Graph, mapped: MappedDataset, subject: rdflib.term.Node) -> bool:
    roots = [rdflib.URIRef(mapped.dataset_iri)]
    seen: set[rdflib.term.Node] = set()
    dataset_type = rdflib.URIRef("http://www.w3.org/ns/dcat#Dataset")
    datasets = set(source.subjects(rdflib.RDF.type, dataset_type))
    while roots:
        node = roots.pop()
        if node == subject:
            return True
        for o in source.objects(node, None):
            if o not in seen and o not in datasets and not isinstance(o, rdflib.Literal):
                seen.add(o)
                roots.append(o)
    return False


def test_no_triple_lost_single(mapper: DcatMapper) -> None:
    _accounting(mapper, raw("single.ttl"))


def test_no_triple_lost_with_trace(mapper: DcatMapper) -> None:
    """Closure minus what the rules removed plus what they added is exactly the output."""
    rules = mapper.rules
    quads = list(ox.parse((DATA / "single.ttl").read_bytes(), format=ox.RdfFormat.TURTLE))
    rewritten, trace = rules.apply(quads)
    removed = {r.removed for r in trace if r.added != (r.removed,)}
    assert set(rewritten) == (set(quads) - removed) | {q for r in trace for q in r.added}
    assert all(r.rule in rules.rule_ids for r in trace)
    assert not any(q.predicate == RDF_TYPE and str(q.object).endswith("VCard>") for q in rewritten)


# --- hostile input ------------------------------------------------------------------------------


class _Counter(BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/ld+json")
        self.end_headers()
        self.wfile.write(b'{"@context": {"title": "http://purl.org/dc/terms/title"}}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[tuple[str, type[_Counter]]]:
    handler = type("Handler", (_Counter,), {"hits": 0})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/", handler
    server.shutdown()
    server.server_close()


def test_xxe_doctype_refused_without_network(
    mapper: DcatMapper, listener: tuple[str, type[_Counter]]
) -> None:
    url, handler = listener
    with pytest.raises(UnsafeInputError):
        mapper.map(raw("xxe.rdf"), CTX)
    payload = (DATA / "xxe.rdf").read_bytes().replace(b"file:///etc/passwd", url.encode())
    with pytest.raises(UnsafeInputError):
        mapper.map(raw("xxe.rdf", payload=payload), CTX)
    assert handler.hits == 0


def test_billion_laughs_refused(mapper: DcatMapper) -> None:
    with pytest.raises(UnsafeInputError):
        mapper.map(raw("billion-laughs.rdf"), CTX)


def test_malformed_turtle_parse_error_with_position(mapper: DcatMapper) -> None:
    with pytest.raises(ParseError, match="line"):
        mapper.map(raw("malformed.ttl"), CTX)


def test_truncated_rdf_xml_parse_error(mapper: DcatMapper) -> None:
    with pytest.raises(ParseError, match=r"truncated|syntax"):
        mapper.map(raw("truncated.rdf"), CTX)
    # a cut that pyoxigraph alone would accept (it ends between two elements)
    text = (DATA / "single.rdf").read_bytes()
    cut = text[: text.index(b"</dcat:Dataset>")]
    with pytest.raises(ParseError, match="truncated"):
        mapper.map(raw("single.rdf", payload=cut), CTX)


def test_truncated_json_ld_and_turtle(mapper: DcatMapper) -> None:
    for name in ["single.jsonld", "single.ttl"]:
        text = (DATA / name).read_bytes()
        with pytest.raises(ParseError):
            mapper.map(raw(name, payload=text[: len(text) // 2]), CTX)


def test_remote_json_ld_context_refused_without_network(
    mapper: DcatMapper, listener: tuple[str, type[_Counter]]
) -> None:
    url, handler = listener
    payload = (
        (DATA / "remote-context.jsonld")
        .read_bytes()
        .replace(b"http://127.0.0.1:9/context.jsonld", f"{url}context.jsonld".encode())
    )
    with pytest.raises(ParseError, match="remote @context"):
        mapper.map(raw("remote-context.jsonld", payload=payload), CTX)
    nested = (
        b'{"@context": [{"@import": "' + url.encode() + b'x"}], "@id": "https://a.example.org/"}'
    )
    with pytest.raises(ParseError, match="remote @context"):
        mapper.map(raw("x.jsonld", payload=nested), CTX)
    assert handler.hits == 0


def test_document_without_dataset_is_a_mapping_error(mapper: DcatMapper) -> None:
    with pytest.raises(MappingError):
        mapper.map(raw("no-dataset.ttl"), CTX)
    with pytest.raises(MappingError):
        mapper.map(raw("x.rdf", payload=b""), CTX)


def test_non_utf8_rdf_xml_is_transcoded(mapper: DcatMapper) -> None:
    text = (DATA / "single.rdf").read_text(encoding="utf-8")
    latin = text.replace('encoding="utf-8"', 'encoding="ISO-8859-1"').encode("latin-1")
    utf16 = text.replace('encoding="utf-8"', 'encoding="UTF-16"').encode("utf-16")
    expected = mapper.map(raw("single.rdf"), CTX)[0].ntriples
    assert mapper.map(raw("single.rdf", payload=latin), CTX)[0].ntriples == expected
    assert mapper.map(raw("single.rdf", payload=utf16), CTX)[0].ntriples == expected


# --- sample data --------------------------------------------------------------------------------


def test_generated_dataset_maps_cleanly(mapper: DcatMapper) -> None:
    for index in range(50):
        payload = generate_dataset(index, seed=3)
        assert payload.startswith(b"<rdf:RDF")
        assert payload == generate_dataset(index, seed=3)
        record = raw("x.rdf", payload=payload, local_id=generate_identifier(index))
        [mapped] = mapper.map(record, CTX)
        assert mapped.local_id == f"oai:data.example.org:dataset-{index:06d}"
        assert 55 <= len(mapped.ntriples.splitlines()) <= 125
        assert mapped.themes
        assert all(f.severity is Severity.INFO for f in mapped.findings)
        assert rules_of(mapped) <= {"version-info", "range-class", "range-class-not-typed"}


def test_generated_revision_changes_content(mapper: DcatMapper) -> None:
    first = mapper.map(raw("x.rdf", payload=generate_dataset(7)), CTX)[0]
    again = mapper.map(raw("x.rdf", payload=generate_dataset(7)), CTX)[0]
    changed = mapper.map(raw("x.rdf", payload=generate_dataset(7, revision=1)), CTX)[0]
    assert first.content_hash == again.content_hash != changed.content_hash
    assert first.dataset_iri == changed.dataset_iri


def test_bundled_oai_records_all_map(mapper: DcatMapper) -> None:
    records = load_bundled_oai_records()
    assert len(records) >= 12
    identifiers = set()
    for identifier, datestamp, payload in records:
        assert datestamp.tzinfo is not None
        [mapped] = mapper.map(raw("x.rdf", payload=payload, local_id=identifier), CTX)
        assert mapped.local_id == identifier
        assert not [f for f in mapped.findings if f.severity is not Severity.INFO]
        identifiers.add(mapped.dataset_iri)
    assert len(identifiers) == len(records)


def test_bundled_dump_maps(mapper: DcatMapper) -> None:
    path = bundled_dump_path()
    record = raw("catalog.ttl", payload=path.read_bytes(), collection=True)
    mapped = mapper.map(record, CTX)
    assert len(mapped) == 10
    assert len({m.dataset_iri for m in mapped}) == 10
    assert sum(m.dataset_iri.startswith(CTX.base_iri) for m in mapped) == 4  # blank nodes
    fired = set().union(*(rules_of(m) for m in mapped))
    assert {"version-info", "period-start", "format-literal", "status-completed"} <= fired
    assert all(b"dcat#Catalog" in m.catalog_ntriples for m in mapped)
    _accounting(mapper, record)


def test_every_rule_is_documented() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "mappings" / "dcat.md").read_text()
    missing = [rule_id for rule_id in load_rules().rule_ids if f"`{rule_id}`" not in doc]
    assert not missing


# --- bad input: per-record errors with the reason -------------------------------------------


def test_untitled_dataset_single_record_is_an_error(mapper: DcatMapper) -> None:
    payload = b"<https://data.example.org/d> a <http://www.w3.org/ns/dcat#Dataset> ."
    with pytest.raises(MappingError, match="no dct:title"):
        mapper.map(raw("x.ttl", payload=payload), CTX)


def test_untitled_dataset_in_a_catalogue_is_rejected_alone(mapper: DcatMapper) -> None:
    payload = (
        b"@prefix dcat: <http://www.w3.org/ns/dcat#> . @prefix dct: <http://purl.org/dc/terms/> .\n"
        b'<https://d.example.org/a> a dcat:Dataset ; dct:title "A" .\n'
        b"<https://d.example.org/b> a dcat:Dataset .\n"
    )
    out = {
        m.dataset_iri: m for m in mapper.map(raw("x.ttl", payload=payload, collection=True), CTX)
    }
    assert not [
        f for f in out["https://d.example.org/a"].findings if f.severity is Severity.VIOLATION
    ]
    [bad] = [f for f in out["https://d.example.org/b"].findings if f.severity is Severity.VIOLATION]
    assert bad.rule == "dataset-without-title"


def test_cycles_are_harmless(mapper: DcatMapper) -> None:
    payload = (
        b"@prefix dcat: <http://www.w3.org/ns/dcat#> . @prefix dct: <http://purl.org/dc/terms/> .\n"
        b'<https://d.example.org/a> a dcat:Dataset ; dct:title "A" ; dct:relation _:x .\n'
        b"_:x dct:relation _:y . _:y dct:relation _:x , <https://d.example.org/a> .\n"
    )
    [m] = mapper.map(raw("x.ttl", payload=payload), CTX)
    assert m.ntriples.count(b"\n") == 6


def test_expansion_bomb_refused(mapper: DcatMapper) -> None:
    """Many datasets sharing one big resource would multiply it: refused, not mapped."""
    lines = [
        f'<https://b.example.org/big> <https://b.example.org/p{i}> "{i}" .' for i in range(400)
    ]
    for i in range(1500):
        d = f"<https://b.example.org/d{i}>"
        lines.append(f"{d} <{RDF_TYPE.value}> <http://www.w3.org/ns/dcat#Dataset> .")
        lines.append(f'{d} <http://purl.org/dc/terms/title> "d{i}" .')
        lines.append(f"{d} <http://purl.org/dc/terms/relation> <https://b.example.org/big> .")
    payload = "\n".join(lines).encode()
    with pytest.raises(MappingError, match="expansion bomb"):
        mapper.map(raw("x.nt", payload=payload, collection=True), CTX)


def test_unknown_remote_context_is_refused_but_known_one_resolved(mapper: DcatMapper) -> None:
    doc = {
        "@context": "https://semiceu.github.io/DCAT-AP/releases/3.0.0/context/dcat-ap.jsonld",
        "@id": "https://d.example.org/x",
        "@type": "Dataset",
        "title": "Known context",
    }
    [m] = mapper.map(raw("x.jsonld", payload=json.dumps(doc).encode()), CTX)
    assert b'<http://purl.org/dc/terms/title> "Known context"' in m.ntriples
    doc["@context"] = "https://unknown.example.org/context.jsonld"
    with pytest.raises(ParseError, match="not one of the contexts we ship"):
        mapper.map(raw("x.jsonld", payload=json.dumps(doc).encode()), CTX)


def test_illegal_iri_in_rdf_xml_repaired(mapper: DcatMapper) -> None:
    payload = (
        b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
        b'xmlns:dcat="http://www.w3.org/ns/dcat#" xmlns:dct="http://purl.org/dc/terms/">'
        b'<dcat:Dataset rdf:about="https://d.example.org/a b"><dct:title>T</dct:title>'
        b"</dcat:Dataset></rdf:RDF>"
    )
    [m] = mapper.map(raw("x.rdf", payload=payload), CTX)
    assert m.dataset_iri == "https://d.example.org/a%20b"
    assert b'<http://purl.org/dc/terms/identifier> "https://d.example.org/a b"' in m.ntriples


def test_repeated_triples_of_a_shared_node_are_walked_once(mapper: DcatMapper) -> None:
    agent = "<https://b.example.org/agent>"
    lines = [f'{agent} <http://xmlns.com/foaf/0.1/name> "Agent" .'] * 20_000
    for i in range(200):
        d = f"<https://b.example.org/d{i}>"
        lines.append(f"{d} <{RDF_TYPE.value}> <http://www.w3.org/ns/dcat#Dataset> .")
        lines.append(f'{d} <http://purl.org/dc/terms/title> "d{i}" .')
        lines.append(f"{d} <http://purl.org/dc/terms/publisher> {agent} .")
    out = mapper.map(raw("x.nt", payload="\n".join(lines).encode(), collection=True), CTX)
    assert len(out) == 200
    assert all(m.ntriples.count(b"foaf/0.1/name") == 1 for m in out)


@pytest.mark.parametrize(
    ("media_type", "payload"),
    [
        ("text/html", b"<!DOCTYPE html><html><body>Not found</body></html>"),
        ("text/csv", b"title,url\nRoads,https://example.org/roads.csv\n"),
        ("application/pdf", b"%PDF-1.4 binary"),
    ],
)
def test_unknown_serialisation_is_a_parse_error_naming_it(
    mapper: DcatMapper, media_type: str, payload: bytes
) -> None:
    with pytest.raises(ParseError, match="not an RDF serialisation"):
        mapper.map(raw("x", media_type=media_type, payload=payload), CTX)
