"""The sparql harvester against a real ``oxigraph serve`` and, for faults, our SPARQL peer."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyoxigraph
import pytest
import requests

from aggregator.config import HttpSettings, SourceConfig
from aggregator.core.errors import ConfigError, HarvestError, TransportError
from aggregator.core.models import RawRecord
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.sparql import SparqlApp, SparqlFault, uses_service
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.sparql import (
    SparqlHarvester,
    SparqlOptions,
    page_query,
    safe_iri,
    string_literal,
)
from aggregator.harvest.sparql._closure import ClosureShape, closure_query
from aggregator.net.client import HttpClient
from aggregator.plugin import harvesters

DATA = Path(__file__).parent / "data" / "rdf_dump" / "sparql-endpoint.trig"
PORTAL = "https://data.example.org/graph/portal"
OTHER = "https://other.example.net/graph/traffic"
DS = "https://data.example.org/dataset/"
PORTAL_DATASETS = sorted(
    DS + slug
    for slug in (
        "air-quality-2024",
        "river-levels",
        "noise-map",
        "bathing-water",
        "groundwater-wells",
        "pollen-counts",
        "soil-samples",
        "weather-stations",
    )
)
OXIGRAPH = Path(sys.executable).parent / "oxigraph"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``oxigraph serve`` on 127.0.0.1, loaded with the test data; yields its base URL."""
    assert OXIGRAPH.exists(), f"the oxigraph binary is missing at {OXIGRAPH} (pip install oxigraph)"
    location = tmp_path_factory.mktemp("oxigraph")
    subprocess.run(
        [str(OXIGRAPH), "load", "--location", str(location), "--file", str(DATA)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    port = _free_port()
    proc = subprocess.Popen(
        [str(OXIGRAPH), "serve", "--location", str(location), "--bind", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (
                f"oxigraph serve exited: {proc.stderr.read() if proc.stderr else ''!r}"
            )
            try:
                if requests.get(base + "query", params={"query": "ASK {}"}, timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "oxigraph serve did not become ready"
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def http(sleeps: list[float]) -> HttpClient:
    settings = HttpSettings(allow_private=True, retries=2, backoff=0.01, timeout=10.0)
    return HttpClient(settings, sleep=sleeps.append)


def harvester(http: HttpClient, url: str, **options: Any) -> SparqlHarvester:
    return SparqlHarvester(SourceConfig(name="sp", type="sparql", url=url, options=options), http)


def harvest(http: HttpClient, url: str, **options: Any) -> tuple[list[RawRecord], Listing]:
    listing = Listing(incremental=False)
    records = list(
        harvester(http, url, **options).list_records(
            HarvestRequest(full=True, checkpoint=None), listing
        )
    )
    return records, listing


def triples(record: RawRecord) -> set[tuple[str, str, str]]:
    fmt = pyoxigraph.RdfFormat.from_media_type(record.media_type)
    assert fmt is not None
    out = set()
    for quad in pyoxigraph.parse(record.payload, fmt):
        s, p, o = quad.triple.subject, quad.triple.predicate, quad.triple.object
        subject = "_:" if isinstance(s, pyoxigraph.BlankNode) else s.value
        obj = "_:" if isinstance(o, pyoxigraph.BlankNode) else str(o.value)
        out.add((subject, p.value, obj))
    return out


def test_registered_under_its_name() -> None:
    assert harvesters.get("sparql") is SparqlHarvester


# -- against a real oxigraph serve ----------------------------------------------------------
@pytest.mark.parametrize(("page_size", "pages"), [(3, 3), (4, 3), (100, 1), (1, 9)])
def test_keyset_paging_lists_every_dataset_once(
    endpoint: str, http: HttpClient, page_size: int, pages: int
) -> None:
    records, listing = harvest(http, endpoint + "query", graph=PORTAL, page_size=page_size)
    assert [r.local_id for r in records] == PORTAL_DATASETS
    assert listing.expected_total == 8
    assert (listing.pages, listing.seen) == (pages, 8)
    assert listing.complete, listing.truncated_reason
    assert any("blank node" in note for note in listing.notes)
    for record in records:
        assert not record.is_collection
        assert record.media_type == "application/n-triples"
        assert record.format == "dcat"
        assert record.url is not None
        assert record.url.startswith(endpoint + "query")


def test_construct_closure_includes_distributions_and_blank_nodes(
    endpoint: str, http: HttpClient
) -> None:
    records, _ = harvest(http, endpoint + "query", graph=PORTAL, page_size=3)
    by_id = {r.local_id: triples(r) for r in records}
    air = by_id[DS + "air-quality-2024"]
    dist = DS + "air-quality-2024/csv"
    dcat = "http://www.w3.org/ns/dcat#"
    assert (DS + "air-quality-2024", dcat + "distribution", dist) in air
    assert (dist, dcat + "downloadURL", "https://data.example.org/files/aq-2024.csv") in air
    # blank nodes: period of time, contact point, identifier, checksum (two hops)
    assert ("_:", dcat + "startDate", "2024-01-01") in air
    assert ("_:", "http://www.w3.org/2006/vcard/ns#fn", "Air Quality Unit") in air
    assert ("_:", "http://www.w3.org/2004/02/skos/core#notation", "DE-ENV-AQ-2024") in air
    checksum = "9f2c3a1d6c0b7e4f8a5d2e1c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a"
    assert ("_:", "http://spdx.org/rdf/terms#checksumValue", checksum) in air
    publisher = "https://data.example.org/org/env-agency"
    assert (publisher, "http://xmlns.com/foaf/0.1/name", "Example Region Environment Agency") in air
    # a blank-node distribution
    noise = by_id[DS + "noise-map"]
    assert ("_:", dcat + "accessURL", "https://data.example.org/files/noise-2022.zip") in noise
    # nothing of other datasets, services or the catalogue: one described resource per payload
    subjects = {s for s, _, _ in air}
    assert DS + "river-levels" not in subjects
    assert "https://data.example.org/catalogue" not in subjects
    service = "https://api.data.example.org/aq/v1#service"
    assert (DS + "air-quality-2024/api", dcat + "accessService", service) in air
    assert service not in subjects
    rdf_type = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
    typed = {o for _, p, o in air if p == rdf_type and o.startswith(dcat)}
    assert typed == {dcat + "Dataset", dcat + "Distribution"}


def test_depth_limits_the_closure(endpoint: str, http: HttpClient) -> None:
    records, _ = harvest(http, endpoint + "query", graph=PORTAL, depth=1, page_size=100)
    air = triples(next(r for r in records if r.local_id == DS + "air-quality-2024"))
    dcat = "http://www.w3.org/ns/dcat#"
    assert (
        DS + "air-quality-2024/csv",
        dcat + "accessURL",
        "https://data.example.org/files/aq-2024.csv",
    ) in air
    assert not any(p == "http://spdx.org/rdf/terms#checksumValue" for _, p, _ in air)


def test_types_option_adds_services_and_series(endpoint: str, http: HttpClient) -> None:
    records, listing = harvest(
        http,
        endpoint + "query",
        graph=PORTAL,
        types=["Dataset", "dcat:DataService", "DatasetSeries"],
        page_size=4,
    )
    ids = [r.local_id for r in records]
    assert "https://api.data.example.org/aq/v1#service" in ids
    assert "https://data.example.org/series/noise-maps" in ids
    assert len(ids) == 10 == listing.expected_total
    assert listing.complete


def test_turtle_by_post(endpoint: str, http: HttpClient) -> None:
    records, listing = harvest(
        http, endpoint + "query", graph=OTHER, construct_format="turtle", method="POST"
    )
    assert [r.local_id for r in records] == ["https://other.example.net/dataset/traffic-counts"]
    assert records[0].media_type == "text/turtle"
    assert records[0].url == endpoint + "query"
    assert b"Traffic counts" in records[0].payload
    assert listing.complete


def test_empty_default_graph_is_a_complete_empty_listing(endpoint: str, http: HttpClient) -> None:
    records, listing = harvest(http, endpoint + "query")
    assert records == []
    assert listing.expected_total == 0
    assert listing.complete


def test_dataset_removed_during_the_walk_truncates(endpoint: str, http: HttpClient) -> None:
    graph = "https://data.example.org/graph/mutable"
    update = endpoint + "update"
    headers = {"Content-Type": "application/sparql-update"}
    copy = (
        f"INSERT {{ GRAPH <{graph}> {{ ?s ?p ?o }} }} WHERE {{ GRAPH <{PORTAL}> {{ ?s ?p ?o }} }}"
    )
    requests.post(update, data=copy, headers=headers, timeout=10).raise_for_status()
    try:
        listing = Listing(incremental=False)
        walk = harvester(http, endpoint + "query", graph=graph, page_size=3).list_records(
            HarvestRequest(full=True, checkpoint=None), listing
        )
        first = next(walk)
        assert first.local_id == PORTAL_DATASETS[0]
        gone = PORTAL_DATASETS[-1]
        drop = f"DELETE WHERE {{ GRAPH <{graph}> {{ <{gone}> ?p ?o }} }}"
        requests.post(update, data=drop, headers=headers, timeout=10).raise_for_status()
        rest = list(walk)
        assert len(rest) == 6
        assert listing.expected_total == 8
        assert not listing.complete
        assert "COUNT gave 8" in (listing.truncated_reason or "")
    finally:
        requests.post(update, data=f"DROP SILENT GRAPH <{graph}>", headers=headers, timeout=10)


def test_endpoint_refusing_the_query_is_a_harvest_error(endpoint: str, http: HttpClient) -> None:
    with pytest.raises(HarvestError) as caught:
        harvest(http, endpoint + "no-such-endpoint", graph=PORTAL)
    assert caught.value.code == "sparqlQueryError"


def test_ssrf_guard_applies_to_sparql_requests(endpoint: str) -> None:
    guarded = HttpClient(HttpSettings(allow_private=False, retries=0))
    with pytest.raises(TransportError) as caught:
        harvest(guarded, endpoint + "query", graph=PORTAL)
    assert caught.value.code == "blockedAddress"


# -- fault injection with our own peer ------------------------------------------------------
@pytest.fixture
def app() -> SparqlApp:
    peer = SparqlApp()
    peer.load(DATA.read_bytes(), pyoxigraph.RdfFormat.TRIG)
    return peer


@pytest.fixture
def peer(app: SparqlApp) -> Iterator[str]:
    with PeerServer(app) as server:
        yield server.url + "sparql"


def test_peer_sees_keyset_queries_never_offset(app: SparqlApp, peer: str, http: HttpClient) -> None:
    records, listing = harvest(http, peer, graph=PORTAL, page_size=3)
    assert [r.local_id for r in records] == PORTAL_DATASETS
    assert listing.complete
    selects = [q for q in app.queries if q.startswith("SELECT DISTINCT")]
    assert len(selects) == 3
    assert not any("OFFSET" in q.upper() for q in app.queries)
    assert f"FILTER(STR(?d) > {string_literal(PORTAL_DATASETS[2])})" in selects[1]


def test_503_with_retry_after_is_retried(
    app: SparqlApp, peer: str, http: HttpClient, sleeps: list[float]
) -> None:
    app.fail("closure", SparqlFault(status=503, retry_after="2", times=1))
    records, listing = harvest(http, peer, graph=OTHER)
    assert len(records) == 1
    assert listing.complete
    assert sleeps == [2.0]


def test_persistent_500_is_a_transport_error(app: SparqlApp, peer: str, http: HttpClient) -> None:
    app.fail("closure", SparqlFault(status=500, times=-1))
    with pytest.raises(TransportError) as caught:
        harvest(http, peer, graph=PORTAL)
    assert caught.value.status == 500


def test_malformed_results_are_a_harvest_error(app: SparqlApp, peer: str, http: HttpClient) -> None:
    app.fail("select", SparqlFault(body=b'{"head": {"vars": ["d"]}, "results": '))
    with pytest.raises(HarvestError) as caught:
        harvest(http, peer, graph=PORTAL)
    assert caught.value.code == "malformedResults"


def test_lying_count_truncates(app: SparqlApp, peer: str, http: HttpClient) -> None:
    count = (
        b'{"head":{"vars":["iri","n"]},"results":{"bindings":[{"iri":{"type":"literal",'
        b'"value":"true","datatype":"http://www.w3.org/2001/XMLSchema#boolean"},'
        b'"n":{"type":"literal","value":"99"}}]}}'
    )
    app.fail("count", SparqlFault(body=count))
    records, listing = harvest(http, peer, graph=PORTAL)
    assert len(records) == 8
    assert listing.expected_total == 99
    assert not listing.complete


def test_closure_answer_that_is_not_sparql_results_is_a_harvest_error(
    app: SparqlApp, peer: str, http: HttpClient
) -> None:
    app.fail("closure", SparqlFault(body=b"<html>busy</html>", content_type="text/html"))
    with pytest.raises(HarvestError) as caught:
        harvest(http, peer, graph=PORTAL)
    assert caught.value.code == "malformedResults"


def test_slow_endpoint_hits_the_read_timeout(app: SparqlApp, peer: str) -> None:
    app.fail("count", SparqlFault(delay=1.5))
    impatient = HttpClient(HttpSettings(allow_private=True, retries=0, timeout=0.3))
    with pytest.raises(TransportError):
        harvest(impatient, peer, graph=PORTAL)


def test_cancel_stops_the_walk(peer: str, http: HttpClient) -> None:
    cancel = threading.Event()
    listing = Listing(incremental=False)
    records = []
    walk = harvester(http, peer, graph=PORTAL, page_size=3).list_records(
        HarvestRequest(full=True, checkpoint=None, cancel=cancel), listing
    )
    for record in walk:
        records.append(record)
        cancel.set()
    assert len(records) == 1
    assert listing.truncated_reason == "cancelled"


def test_endpoint_ignoring_the_keyset_filter_is_a_harvest_error(
    app: SparqlApp, peer: str, http: HttpClient
) -> None:
    rows = ",".join(f'{{"d":{{"type":"uri","value":"{iri}"}}}}' for iri in PORTAL_DATASETS[:2])
    page = (f'{{"head":{{"vars":["d"]}},"results":{{"bindings":[{rows}]}}}}').encode()
    app.fail("select", SparqlFault(body=page, times=-1))
    with pytest.raises(HarvestError) as caught:
        harvest(http, peer, graph=PORTAL, page_size=2)
    assert caught.value.code == "badPaging"


# -- queries and options --------------------------------------------------------------------
def test_query_text_is_injection_safe() -> None:
    assert string_literal('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert safe_iri("https://data.example.org/d/1")
    assert not safe_iri("https://x.org/> } ; DROP ALL ; <x:")
    assert not safe_iri("https://x.org/a b")
    opts = SparqlOptions(page_size=5, graph=PORTAL)
    query = page_query(opts, 'x" ) } DROP ALL #')
    pyoxigraph.Store().query(query)  # still one valid SELECT
    assert "LIMIT 5" in query
    assert "ORDER BY ?d" in query
    for depth in range(7):
        shape = ClosureShape(depth, SparqlOptions().stop_types, PORTAL)
        pyoxigraph.Store().query(closure_query(shape, [DS + "x", DS + "y"]))
    pyoxigraph.Store().query(closure_query(ClosureShape(2, ()), [DS + "x"]))


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("https://x.org/sparql?default-graph-uri=x", {}),
        ("https://x.org/sparql", {"types": ["Catalog"]}),
        ("https://x.org/sparql", {"page_size": 0}),
        ("https://x.org/sparql", {"depth": 9}),
        ("https://x.org/sparql", {"graph": "not an iri"}),
        ("https://x.org/sparql", {"construct_format": "rdfxml"}),
        ("https://x.org/sparql", {"method": "PUT"}),
        ("https://x.org/sparql", {"pagesize": 10}),
        ("https://x.org/sparql", {"parallel": 5}),
        ("https://x.org/sparql", {"batch_size": 0}),
    ],
)
def test_invalid_options_are_config_errors(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        SparqlHarvester.check_config(
            SourceConfig(name="sp", type="sparql", url=url, options=options)
        )


def test_peer_refuses_service_clauses_only() -> None:
    assert uses_service("SELECT * { SERVICE <http://evil.example/> { ?s ?p ?o } }")
    assert uses_service("select * { service <http://evil.example/> {} }")
    assert not uses_service("SELECT * { <https://api.example.org/v1#service> ?p ?o }")
    assert not uses_service('SELECT * { ?s ?p "SERVICE" }')


def test_peer_serves_a_service_record(app: SparqlApp, peer: str, http: HttpClient) -> None:
    records, listing = harvest(http, peer, graph=PORTAL, types=["DataService"])
    assert [r.local_id for r in records] == ["https://api.data.example.org/aq/v1#service"]
    assert listing.complete


# -- batched closures == one CONSTRUCT per dataset ------------------------------------------
GENERATED = "https://data.example.org/graph/generated"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"


def reference_construct(iri: str, depth: int, stop_types: tuple[str, ...], graph: str) -> str:
    """The per-dataset CONSTRUCT the harvester sent before batching (the closure's definition):
    the dataset's triples plus those of nodes reached by up to ``depth`` links, a link not
    followed when it is rdf:type, ends at a literal, returns to the dataset or ends at a
    stop-typed node."""
    root = f"<{iri}>"
    stops = " ".join(f"<{t}>" for t in stop_types)
    template = [f"{root} ?p0 ?o0 ."]
    branches = [f"{{ {root} ?p0 ?o0 . }}"]
    path: list[str] = []
    for k in range(1, depth + 1):
        prev = root if k == 1 else f"?n{k - 1}"
        step = (
            f"{prev} ?l{k} ?n{k} . FILTER(!isLiteral(?n{k}) && ?l{k} != <{RDF_TYPE}>"
            f" && !sameTerm(?n{k}, {root}))"
        )
        if stops:
            step += f" FILTER NOT EXISTS {{ ?n{k} a ?s{k} . VALUES ?s{k} {{ {stops} }} }}"
        path.append(step)
        template.append(f"?n{k} ?p{k} ?o{k} .")
        branches.append("{ " + " ".join(path) + f" ?n{k} ?p{k} ?o{k} . }}")
    where = " UNION ".join(branches)
    return f"CONSTRUCT {{ {' '.join(template)} }} WHERE {{ GRAPH <{graph}> {{ {where} }} }}"


def canonical(triples: bytes, rdf_format: pyoxigraph.RdfFormat) -> list[str]:
    dataset = pyoxigraph.Dataset(pyoxigraph.parse(triples, rdf_format))
    dataset.canonicalize(pyoxigraph.CanonicalizationAlgorithm.UNSTABLE)
    return sorted(str(q) for q in dataset)


@pytest.fixture(scope="module")
def generated(endpoint: str) -> list[str]:
    """60 generated DCAT-AP datasets in their own graph: 2-4 distributions each, blank-node
    contact points, periods, provenance and identifiers, publishers shared between datasets."""
    from aggregator.demo.peers.sample_data import generate_dataset

    store = pyoxigraph.Store()
    for i in range(60):
        store.load(generate_dataset(i), pyoxigraph.RdfFormat.RDF_XML)
    body = store.dump(format=pyoxigraph.RdfFormat.N_TRIPLES, from_graph=pyoxigraph.DefaultGraph())
    requests.post(
        endpoint + "store",
        params={"graph": GENERATED},
        data=body,
        headers={"Content-Type": "application/n-triples"},
        timeout=30,
    ).raise_for_status()
    publishers = [
        row["n"].value
        for row in store.query(
            "SELECT (COUNT(?d) AS ?n) WHERE { ?d <http://purl.org/dc/terms/publisher> ?p }"
            " GROUP BY ?p HAVING (COUNT(?d) > 1)"
        )
    ]
    assert publishers, "the generated data must share publishers between datasets"
    return sorted(f"https://data.example.org/dataset/dataset-{i:06d}" for i in range(60))


@pytest.mark.parametrize(
    ("graph", "depth", "stop_types", "batch_size"),
    [
        (PORTAL, 3, None, 3),
        (PORTAL, 1, None, 100),
        (PORTAL, 2, [], 4),  # nothing stops: closures reach the catalogue and other datasets
        (GENERATED, 3, None, 7),
        (GENERATED, 0, None, 25),
        (GENERATED, 2, ["http://xmlns.com/foaf/0.1/Agent"], 60),  # publishers not expanded
    ],
)
def test_batched_closures_equal_one_construct_per_dataset(
    endpoint: str,
    http: HttpClient,
    generated: list[str],
    graph: str,
    depth: int,
    stop_types: list[str] | None,
    batch_size: int,
) -> None:
    options: dict[str, Any] = {"graph": graph, "depth": depth, "batch_size": batch_size}
    if stop_types is not None:
        options["stop_types"] = stop_types
    records, listing = harvest(http, endpoint + "query", page_size=50, **options)
    assert listing.complete, listing.truncated_reason
    expected_ids = generated if graph == GENERATED else PORTAL_DATASETS
    assert [r.local_id for r in records] == expected_ids
    stops = tuple(stop_types) if stop_types is not None else SparqlOptions().stop_types
    blank_closures = 0
    for record in records:
        answer = requests.post(
            endpoint + "query",
            data={"query": reference_construct(record.local_id, depth, stops, graph)},
            headers={"Accept": "application/n-triples"},
            timeout=30,
        )
        answer.raise_for_status()
        expected = canonical(answer.content, pyoxigraph.RdfFormat.N_TRIPLES)
        fmt = pyoxigraph.RdfFormat.from_media_type(record.media_type)
        assert fmt is not None
        assert canonical(record.payload, fmt) == expected, record.local_id
        blank_closures += any(t.startswith("_:") for t in expected)
    if depth:
        assert blank_closures > 0  # blank nodes were part of what was compared


def test_json_answers_give_the_same_records_as_tsv(
    endpoint: str, app: SparqlApp, peer: str, http: HttpClient
) -> None:
    """oxigraph serve answers the closure query in TSV, the peer in SPARQL JSON."""
    tsv, _ = harvest(http, endpoint + "query", graph=PORTAL, batch_size=3)
    as_json, listing = harvest(http, peer, graph=PORTAL, batch_size=5)
    assert listing.complete
    assert [r.local_id for r in as_json] == [r.local_id for r in tsv] == PORTAL_DATASETS
    nt = pyoxigraph.RdfFormat.N_TRIPLES
    for a, b in zip(tsv, as_json, strict=True):
        assert canonical(a.payload, nt) == canonical(b.payload, nt), a.local_id


@pytest.mark.parametrize(
    ("cell", "term"),
    [
        ("<https://x.org/a>", "<https://x.org/a>"),
        ("_:b0", "_:b0"),
        ('"a\\tb"@en-GB', '"a\\tb"@en-GB'),
        ('"5"^^<http://www.w3.org/2001/XMLSchema#integer>', None),
        ("12", '"12"^^<http://www.w3.org/2001/XMLSchema#integer>'),
        ("-1.5", '"-1.5"^^<http://www.w3.org/2001/XMLSchema#decimal>'),
        ("1e3", '"1e3"^^<http://www.w3.org/2001/XMLSchema#double>'),
        ("true", '"true"^^<http://www.w3.org/2001/XMLSchema#boolean>'),
        ("'it''s'", None),
        ('"""two\nlines"""', '"two\\nlines"'),
    ],
)
def test_tsv_cells_become_ntriples_terms(cell: str, term: str | None) -> None:
    from aggregator.harvest.sparql._results import tsv_term

    if cell == "'it''s'":
        with pytest.raises(ValueError):
            tsv_term(cell)
        return
    assert tsv_term(cell) == (term if term is not None else cell)
    line = f"<x:s> <x:p> {tsv_term(cell)} ."
    assert len(list(pyoxigraph.parse(line, pyoxigraph.RdfFormat.N_TRIPLES))) == 1


@pytest.mark.parametrize("cell", ["x y", "<a b>", "_:", '"open', "@en"])
def test_tsv_cells_that_are_no_term_are_refused(cell: str) -> None:
    from aggregator.harvest.sparql._results import tsv_term

    with pytest.raises(ValueError):
        tsv_term(cell)


def test_json_cells_become_ntriples_terms() -> None:
    from aggregator.harvest.sparql._results import json_term

    renamed: dict[str, str] = {}
    literal = {"type": "literal", "value": 'say "hi"\n\\', "xml:lang": "en"}
    assert json_term(literal, renamed) == '"say \\"hi\\"\\n\\\\"@en'
    typed = {"type": "literal", "value": "3", "datatype": "http://www.w3.org/2001/XMLSchema#int"}
    assert json_term(typed, renamed) == '"3"^^<http://www.w3.org/2001/XMLSchema#int>'
    odd = {"type": "bnode", "value": "node-1/x"}
    assert json_term(odd, renamed) == json_term(odd, renamed) == "_:r-0"
    assert json_term({"type": "bnode", "value": "b1"}, renamed) == "_:b1"
    for bad in ({"type": "uri", "value": "https://x.org/a> <b"}, {"type": "literal"}, "x"):
        with pytest.raises(ValueError):
            json_term(bad, renamed)
    with pytest.raises(ValueError):
        json_term({"type": "literal", "value": "x", "xml:lang": "en gb"}, renamed)


def test_parallel_batches_keep_order_and_content(
    endpoint: str, http: HttpClient, generated: list[str]
) -> None:
    one, _ = harvest(http, endpoint + "query", graph=GENERATED, batch_size=7)
    three, listing = harvest(http, endpoint + "query", graph=GENERATED, batch_size=7, parallel=3)
    assert listing.complete
    assert [r.local_id for r in three] == [r.local_id for r in one] == generated
    nt = pyoxigraph.RdfFormat.N_TRIPLES
    assert [canonical(r.payload, nt) for r in three] == [canonical(r.payload, nt) for r in one]
