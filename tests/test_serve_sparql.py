"""The /sparql endpoint against a running uvicorn server on 127.0.0.1, over a store filled by
the real pipeline (OAI-PMH peer -> harvester -> dcat mapper -> SHACL -> record store), with
real clients: SPARQLWrapper, rdflib's SPARQLStore and plain requests."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import uvicorn
from pyoxigraph import QueryResultsFormat, RdfFormat, parse, parse_query_results, serialize
from rdflib import Graph, URIRef
from rdflib.plugins.stores.sparqlstore import SPARQLStore
from SPARQLWrapper import CSV, JSON, TURTLE, XML, SPARQLWrapper
from starlette.applications import Starlette

from aggregator.config import HarvestSettings, HttpSettings, ServeSettings, Settings, SourceConfig
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.serve.context import ServeContext
from aggregator.serve.sparql import SparqlEndpoint, routes
from aggregator.serve.sparql_guard import mentions_service, neutralised, service_tokens
from aggregator.store.records import RecordStore

T0 = datetime(2024, 3, 1, tzinfo=UTC)
BASE = "http://127.0.0.1:8000/"
DCAT = "http://www.w3.org/ns/dcat#"
N_RECORDS = 12
COUNT_DATASETS = (
    "PREFIX dcat: <http://www.w3.org/ns/dcat#> SELECT (COUNT(?d) AS ?n) WHERE { ?d a dcat:Dataset }"
)
TITLES = (
    "PREFIX dcat: <http://www.w3.org/ns/dcat#> PREFIX dct: <http://purl.org/dc/terms/>"
    " SELECT ?d ?t WHERE { ?d a dcat:Dataset ; dct:title ?t } ORDER BY ?d ?t"
)
EXPLOSIVE = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }"
# finite but slow: 300^3 rows counted (about a second or more)
SLOW = (
    "SELECT (COUNT(*) AS ?n) WHERE { { SELECT ?a WHERE { ?a ?b ?c } LIMIT 300 }"
    " { SELECT ?d WHERE { ?d ?e ?f } LIMIT 300 } { SELECT ?g WHERE { ?g ?h ?i } LIMIT 300 } }"
)
SLOW_SECONDS = 0.5  # at least, on any machine that runs the suite


def item(i: int) -> OaiItem:
    return OaiItem(generate_identifier(i), T0 + timedelta(hours=i), (), False, generate_dataset(i))


class Harvested:
    """A store filled through the pipeline from a local OAI-PMH peer."""

    def __init__(self, tmp: Path, count: int) -> None:
        self.items = MemoryItems(item(i) for i in range(count))
        self.peer_server = PeerServer(OaiPmhPeer(self.items, page_size=50))
        source = SourceConfig(name="portal", type="oai-pmh", url=f"{self.peer_server.url}oai")
        self.settings = Settings(
            config_path=None,
            store_path=tmp / "store",
            base_iri=BASE,
            http=HttpSettings(allow_private=True, backoff=0.01, max_backoff=0.05, retries=2),
            harvest=HarvestSettings(workers=0),
            sources={"portal": source},
        )
        self.store = RecordStore(self.settings.store_path, BASE)
        self.run()

    def run(self) -> None:
        http = HttpClient(self.settings.http, sleep=lambda s: None)
        run_source(self.settings, self.store, "portal", RunOptions(full=True), http=http)
        self.store.sync()

    def context(self, **serve: Any) -> ServeContext:
        settings = replace(self.settings, serve=replace(ServeSettings(), **serve))
        return ServeContext(self.store, settings)

    def close(self) -> None:
        self.store.close()
        self.peer_server.stop()


class Served:
    """A Starlette app under uvicorn on 127.0.0.1 (a free port), in a thread."""

    def __init__(self, app: Starlette) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/sparql"
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            assert self.thread.is_alive(), "uvicorn stopped"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


@pytest.fixture(scope="module")
def harvested(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harvested]:
    h = Harvested(tmp_path_factory.mktemp("sparql"), N_RECORDS)
    yield h
    h.close()


@pytest.fixture(scope="module")
def server(harvested: Harvested) -> Iterator[Served]:
    """The endpoint as the lead wires it: Starlette(routes=routes(ctx)) with its lifespan."""
    sparql_routes = routes(harvested.context())
    app = Starlette(routes=sparql_routes, lifespan=sparql_routes.endpoint.lifespan)
    served = Served(app)
    served.endpoint = sparql_routes.endpoint  # type: ignore[attr-defined]
    yield served
    served.stop()


def serve_endpoint(endpoint: SparqlEndpoint) -> Served:
    endpoint.start()
    return Served(Starlette(routes=endpoint.routes()))


def get(server: Served, query: str, accept: str = "*/*", **params: str) -> requests.Response:
    return requests.get(server.url, params={"query": query, **params}, headers={"Accept": accept})


def rdflib_graph(data: bytes, fmt: RdfFormat) -> Graph:
    """Parse with pyoxigraph (rdflib's JSON-LD parser warns), compare with rdflib."""
    ntriples = serialize(parse(data, format=fmt), format=RdfFormat.N_TRIPLES) or b""
    return Graph().parse(data=ntriples.decode(), format="nt")


def quad_count(store: RecordStore) -> int:
    return len(store.graphs.store)  # type: ignore[attr-defined]


# -- real clients -------------------------------------------------------------------------------
def test_sparqlwrapper_json_xml_csv(server: Served) -> None:
    client = SPARQLWrapper(server.url)
    client.setQuery(COUNT_DATASETS)
    client.setReturnFormat(JSON)
    data = client.query().convert()
    assert data["results"]["bindings"][0]["n"]["value"] == str(N_RECORDS)

    client.setReturnFormat(XML)
    doc = client.query().convert()  # a DOM document
    values = [n.firstChild.data for n in doc.getElementsByTagName("literal")]
    assert values == [str(N_RECORDS)]

    client.setQuery(TITLES)
    client.setReturnFormat(CSV)
    csv_text = client.query().convert().decode()
    lines = csv_text.strip().splitlines()
    assert lines[0] == "d,t"
    assert len(lines) > N_RECORDS  # every dataset has titles in two languages


def test_sparqlwrapper_post_and_construct_turtle(server: Served) -> None:
    client = SPARQLWrapper(server.url)
    client.setMethod("POST")  # form-encoded
    client.setQuery(
        "PREFIX dcat: <http://www.w3.org/ns/dcat#> PREFIX dct: <http://purl.org/dc/terms/>"
        " CONSTRUCT { ?d dct:title ?t } WHERE { ?d a dcat:Dataset ; dct:title ?t }"
    )
    client.setReturnFormat(TURTLE)
    result = client.query()
    assert result.response.headers["Content-Type"].startswith("text/turtle")
    graph = Graph().parse(data=result.convert(), format="turtle")
    assert len(set(graph.subjects())) == N_RECORDS


def test_rdflib_sparqlstore(server: Served) -> None:
    store = SPARQLStore(server.url)  # asks for SPARQL XML results
    graph = Graph(store=store)
    rows = list(graph.query(TITLES))
    assert len({str(r[0]) for r in rows}) == N_RECORDS  # type: ignore[index]
    assert bool(graph.query("ASK { ?s ?p ?o }").askAnswer)


# -- protocol -------------------------------------------------------------------------------------
def test_get_post_form_and_direct_post_agree(server: Served) -> None:
    accept = {"Accept": "text/tab-separated-values"}
    by_get = requests.get(server.url, params={"query": TITLES}, headers=accept)
    by_form = requests.post(server.url, data={"query": TITLES, "format": "json"}, headers=accept)
    direct = requests.post(
        server.url,
        data=TITLES.encode(),
        headers={**accept, "Content-Type": "application/sparql-query; charset=utf-8"},
    )
    assert by_get.status_code == by_form.status_code == direct.status_code == 200
    assert by_get.content == by_form.content == direct.content
    assert by_get.headers["Content-Type"] == "text/tab-separated-values; charset=utf-8"


def test_result_formats_by_accept(server: Served) -> None:
    cases = {
        "application/sparql-results+json": ("application/sparql-results+json", "json"),
        "application/json": ("application/sparql-results+json", "json"),
        "*/*": ("application/sparql-results+json", "json"),
        "application/sparql-results+xml": ("application/sparql-results+xml", "xml"),
        "text/csv": ("text/csv", "csv"),
        "text/tab-separated-values;q=0.9, text/csv;q=0.5": ("text/tab-separated-values", "tsv"),
    }
    formats = {
        "json": QueryResultsFormat.JSON,
        "xml": QueryResultsFormat.XML,
        "csv": QueryResultsFormat.CSV,
        "tsv": QueryResultsFormat.TSV,
    }
    for accept, (media, fmt) in cases.items():
        r = get(server, COUNT_DATASETS, accept)
        assert r.status_code == 200, (accept, r.text)
        assert r.headers["Content-Type"].split(";")[0] == media
        assert r.headers["Access-Control-Allow-Origin"] == "*"
        if fmt == "csv":
            assert r.text.splitlines() == ["n", str(N_RECORDS)]
            continue
        rows = list(parse_query_results(r.content, format=formats[fmt]))  # type: ignore[arg-type]
        assert rows[0]["n"].value == str(N_RECORDS)
    ask = get(server, "ASK { ?s a <http://www.w3.org/ns/dcat#Dataset> }", "application/json")
    assert ask.json() == {"head": {}, "boolean": True}


def test_graph_formats_by_accept(server: Served) -> None:
    query = "DESCRIBE ?d WHERE { ?d a <http://www.w3.org/ns/dcat#Dataset> } LIMIT 1"
    graphs = {}
    for media, fmt in {
        "text/turtle": RdfFormat.TURTLE,
        "application/n-triples": RdfFormat.N_TRIPLES,
        "application/rdf+xml": RdfFormat.RDF_XML,
        "application/ld+json": RdfFormat.JSON_LD,
    }.items():
        r = get(server, query, media)
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].split(";")[0] == media
        graphs[media] = {str(t) for t in parse(r.content, format=fmt)}
        if media == "application/ld+json":  # and it is plain JSON-LD for any JSON-LD tool
            assert isinstance(json.loads(r.content), list)
    assert len(graphs["text/turtle"]) > 10
    sizes = {len(g) for g in graphs.values()}
    assert len(sizes) == 1  # the same number of triples in every format
    g1 = rdflib_graph(get(server, query, "text/turtle").content, RdfFormat.TURTLE)
    g2 = rdflib_graph(get(server, query, "application/ld+json").content, RdfFormat.JSON_LD)
    assert len(g1) > 10
    assert g1.isomorphic(g2)


def test_not_acceptable_and_malformed(server: Served) -> None:
    assert get(server, COUNT_DATASETS, "text/html").status_code == 406
    construct = "CONSTRUCT WHERE { ?s ?p ?o } LIMIT 1"
    r = get(server, construct, "text/csv")  # CSV is for results, not graphs
    assert r.status_code == 406
    bad = get(server, "SELECT ?x WHERE { ?x ?y }")
    assert bad.status_code == 400
    assert "error at 1:" in bad.text  # the parser's message, with its position
    assert requests.post(server.url, data=b"x", headers={"Content-Type": "text/plain"}).status_code
    assert requests.put(server.url, data=b"x").status_code == 405
    two = requests.get(server.url, params=[("query", "ASK {}"), ("query", "ASK {}")])
    assert two.status_code == 400


def test_unknown_parameters_are_ignored(server: Served) -> None:
    r = get(server, COUNT_DATASETS, "application/json", format="json", output="json", results="x")
    assert r.status_code == 200


def test_dataset_parameters(server: Served, harvested: Harvested) -> None:
    row = next(iter(harvested.store.db.iter_records()))
    query = "SELECT (COUNT(DISTINCT ?s) AS ?n) WHERE { ?s a <http://www.w3.org/ns/dcat#Dataset> }"
    r = get(server, query, "application/json", **{"default-graph-uri": row.record_iri})
    assert r.json()["results"]["bindings"][0]["n"]["value"] == "1"
    named = requests.get(
        server.url,
        params={
            "query": "SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }",
            "named-graph-uri": row.record_iri,
        },
        headers={"Accept": "application/json"},
    )
    graphs = [b["g"]["value"] for b in named.json()["results"]["bindings"]]
    assert graphs == [row.record_iri]
    bad = get(server, query, **{"default-graph-uri": "not an iri"})
    assert bad.status_code == 400


def test_service_description(server: Served) -> None:
    for media, fmt in {
        "text/turtle": RdfFormat.TURTLE,
        "application/ld+json": RdfFormat.JSON_LD,
        "application/rdf+xml": RdfFormat.RDF_XML,
        "application/n-triples": RdfFormat.N_TRIPLES,
    }.items():
        r = requests.get(server.url, headers={"Accept": media})
        assert r.status_code == 200
        assert r.headers["Content-Type"].split(";")[0] == media
        g = rdflib_graph(r.content, fmt)
        sd = "http://www.w3.org/ns/sparql-service-description#"
        rows = g.query(
            "PREFIX sd: <" + sd + "> SELECT ?e ?f ?l WHERE { ?s a sd:Service ; sd:endpoint ?e ;"
            " sd:feature ?f ; sd:supportedLanguage ?l ; sd:defaultDataset ?d }"
        )
        (endpoint, feature, language) = next(iter(rows))  # type: ignore[misc]
        assert str(endpoint) == BASE + "sparql"
        assert str(feature) == sd + "UnionDefaultGraph"
        assert str(language) == sd + "SPARQL11Query"
        formats = {str(o) for o in g.objects(None, URIRef(sd + "resultFormat"))}
        assert "http://www.w3.org/ns/formats/SPARQL_Results_JSON" in formats
        assert "http://www.w3.org/ns/formats/JSON-LD" in formats
    assert requests.get(server.url, headers={"Accept": "text/html"}).status_code == 406
    assert requests.get(server.url).headers["Content-Type"].startswith("text/turtle")


def test_cors(server: Served) -> None:
    pre = requests.options(
        server.url,
        headers={
            "Origin": "https://comunica.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert pre.status_code == 204
    assert pre.headers["Access-Control-Allow-Origin"] == "*"
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    assert pre.headers["Access-Control-Allow-Headers"] == "content-type"
    post = requests.post(server.url, data={"query": "ASK {}"}, headers={"Origin": "https://x"})
    assert post.headers["Access-Control-Allow-Origin"] == "*"


# -- read-only -----------------------------------------------------------------------------------
def test_updates_are_refused_and_change_nothing(server: Served, harvested: Harvested) -> None:
    before = quad_count(harvested.store)
    snapshot_before = get(server, "SELECT (COUNT(*) AS ?n) { GRAPH ?g { ?s ?p ?o } }", "text/csv")
    update = "DELETE WHERE { GRAPH ?g { ?s ?p ?o } } ; INSERT DATA { <urn:a> <urn:b> <urn:c> }"
    attempts = [
        requests.post(server.url, data={"update": update}),
        requests.post(
            server.url, data=update.encode(), headers={"Content-Type": "application/sparql-update"}
        ),
        requests.get(server.url, params={"update": update}),
        requests.get(server.url, params={"query": update}),
        requests.post(server.url, data={"query": update}),
        requests.post(
            server.url, data=update.encode(), headers={"Content-Type": "application/sparql-query"}
        ),
        requests.get(server.url, params={"query": "CLEAR ALL"}),
        requests.get(server.url, params={"query": "DROP ALL"}),
        requests.get(server.url, params={"query": "LOAD <http://127.0.0.1:1/x.ttl>"}),
    ]
    for r in attempts:
        assert 400 <= r.status_code < 500, r.text
    assert quad_count(harvested.store) == before
    after = get(server, "SELECT (COUNT(*) AS ?n) { GRAPH ?g { ?s ?p ?o } }", "text/csv")
    assert after.text == snapshot_before.text


# -- SERVICE ---------------------------------------------------------------------------------------
class Listener:
    """A TCP listener on 127.0.0.1 that records every connection it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def service_queries(port: int) -> list[str]:
    url = f"http://127.0.0.1:{port}/sparql"
    return [
        f"SELECT * WHERE {{ SERVICE <{url}> {{ ?s ?p ?o }} }}",
        f"select * where {{ service <{url}> {{ ?s ?p ?o }} }}",
        f"SELECT * WHERE {{ SeRvIcE SILENT <{url}> {{ ?s ?p ?o }} }}",
        f"SELECT * WHERE {{ SERVICE#comment\n<{url}>{{ ?s ?p ?o }} }}",
        f"PREFIX x: <http://127.0.0.1:{port}/>"
        " SELECT * WHERE { SERVICE x:sparql { ?s ?p ?o } }",
        f"SELECT * WHERE {{ BIND(<{url}> AS ?e) SERVICE ?e {{ ?s ?p ?o }} }}",
        # a naive lexer reads "<?b)SERVICE?x#>" as one IRI; the engine reads an operator
        f"SELECT * WHERE {{ VALUES (?a ?b ?x) {{ (1 2 <{url}>) }} FILTER(?a<?b)SERVICE?x#>\n"
        "{ ?s ?p ?o } }",
        f'SELECT * WHERE {{ BIND("x" AS ?y) SERVICE <{url}> {{ ?s ?p "SERVICE" }} }}',
        f"SELECT * WHERE {{ \\u0053ERVICE <{url}> {{ ?s ?p ?o }} }}",
        f"ASK {{ SERVICE <{url}> {{ ?s ?p ?o }} }}",
        f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ SERVICE <{url}> {{ ?s ?p ?o }} }}",
    ]


def test_service_is_refused_and_never_connects(server: Served) -> None:
    listener = Listener()
    try:
        for query in service_queries(listener.port):
            for r in (
                requests.get(server.url, params={"query": query}),
                requests.post(server.url, data={"query": query}),
            ):
                assert r.status_code == 400, (query, r.status_code, r.text)
                assert "SERVICE" in r.text
        time.sleep(0.3)
        assert listener.connections == 0
    finally:
        listener.close()


def test_service_in_strings_iris_and_names_is_fine(server: Served) -> None:
    queries = [
        'SELECT * WHERE { BIND("SERVICE <http://127.0.0.1:1/> {}" AS ?x) }',
        "SELECT * WHERE { BIND(<http://example.org/service/SERVICE> AS ?x) }",
        "SELECT ?service WHERE { ?service a <http://www.w3.org/ns/dcat#DataService> }",
        "PREFIX service: <http://example.org/> SELECT * WHERE { ?s service:service ?o }",
        "SELECT * WHERE { ?s ?p ?o # SERVICE <http://127.0.0.1:1/> {}\n } LIMIT 1",
        "SELECT * WHERE { BIND('''\nservice\n''' AS ?x) }",
    ]
    for query in queries:
        r = get(server, query, "application/json")
        assert r.status_code == 200, (query, r.text)


def test_guard_helpers() -> None:
    assert service_tokens("SELECT * { SERVICE <x> {} }") == 1
    assert service_tokens('SELECT * { ?s ?p "SERVICE" }') == 0
    assert service_tokens("SELECT * { ?s <http://x/SERVICE> ?o }") == 0
    assert mentions_service("ſervıce") and mentions_service("SERVICE")
    assert neutralised("SERVICE service SeRvIcE") == "SERVICF servicf SeRvIcF"
    assert not mentions_service(neutralised("ſERVICE servİce"))


# -- limits ----------------------------------------------------------------------------------------
def test_deadline_in_one_process_answers_503_at_once(harvested: Harvested) -> None:
    """Without a supervisor the query runs in a thread: its client gets the 503 at the
    deadline (the thread finishes later; `aggregator serve` replaces the process instead,
    see test_serve_supervisor)."""
    endpoint = SparqlEndpoint(harvested.context(sparql_timeout=0.2, sparql_concurrency=2))
    served = serve_endpoint(endpoint)
    try:
        started = time.monotonic()
        r = get(served, SLOW, "application/json")
        assert r.status_code == 503
        assert r.headers["Retry-After"] == "1"
        assert "limit" in r.text
        assert time.monotonic() - started < SLOW_SECONDS
        assert endpoint.runner.threaded_queries == 1 and endpoint.runner.inline_queries == 0
        ok = get(served, COUNT_DATASETS, "application/json")  # the other slot
        assert ok.status_code == 200
    finally:
        served.stop()
        endpoint.close()


def test_row_cap_is_an_error_not_a_truncated_result(harvested: Harvested) -> None:
    endpoint = SparqlEndpoint(harvested.context(sparql_max_rows=10))
    served = serve_endpoint(endpoint)
    try:
        for accept in ("application/json", "application/sparql-results+xml", "text/csv"):
            r = get(served, "SELECT * WHERE { ?s ?p ?o }", accept)
            assert r.status_code == 400
            assert "more than 10 rows" in r.text
        assert get(served, "CONSTRUCT WHERE { ?s ?p ?o }", "text/turtle").status_code == 400
        exactly = get(served, "SELECT * WHERE { ?s ?p ?o } LIMIT 10", "text/csv")
        assert exactly.status_code == 200
        assert len(exactly.text.strip().splitlines()) == 11
        triples = get(served, "CONSTRUCT WHERE { ?s ?p ?o } LIMIT 10", "application/n-triples")
        assert len(triples.text.strip().splitlines()) == 10
    finally:
        served.stop()
        endpoint.close()


def test_concurrency_limit_answers_503_with_retry_after(harvested: Harvested) -> None:
    endpoint = SparqlEndpoint(
        harvested.context(sparql_timeout=30.0, sparql_concurrency=1), queue_wait=0.05
    )
    served = serve_endpoint(endpoint)
    try:
        slow: list[requests.Response] = []
        t = threading.Thread(target=lambda: slow.append(get(served, SLOW)))
        t.start()
        deadline = time.monotonic() + 5  # until the only slot is taken by the slow query
        while endpoint.runner.threaded_queries == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        busy = get(served, COUNT_DATASETS)
        t.join()
        assert busy.status_code == 503
        assert busy.headers["Retry-After"] == "1"
        assert slow[0].status_code == 200
        assert get(served, COUNT_DATASETS).status_code == 200
    finally:
        served.stop()
        endpoint.close()


def test_each_harvest_is_published_to_the_endpoint_with_its_generation(tmp_path: Path) -> None:
    h = Harvested(tmp_path, 5)
    endpoint = SparqlEndpoint(h.context())
    served = serve_endpoint(endpoint)
    try:

        def count() -> tuple[str, int]:
            r = get(served, COUNT_DATASETS, "application/json")
            n = str(r.json()["results"]["bindings"][0]["n"]["value"])
            return n, int(r.headers["aggregator-generation"])

        n, generation = count()
        assert n == "5" and generation == h.store.db.generation() > 0
        assert endpoint.snapshot is not None
        first = endpoint.shelf.root / endpoint.snapshot
        h.items.put(*(item(i) for i in range(5, 8)))
        h.run()  # the writer publishes after its batches: no refresh needed
        for _ in range(4):
            n, later = count()
            assert n == "8" and later == h.store.db.generation() > generation
        endpoint.refresh()  # nothing new to publish; collects what no reader holds
        assert not first.exists()  # nothing reads the old snapshot: it is gone
    finally:
        served.stop()
        endpoint.close()
        h.close()
    shelf = h.settings.store_path / "snapshots"
    kept = sorted(p.name for p in shelf.glob("gen-*") if p.is_dir())
    assert kept == [(shelf / "CURRENT").read_text()] == [f"gen-{later:09d}"]  # only the newest


def test_relative_iris_resolve_against_the_base_iri(server: Served) -> None:
    """SPARQL 1.1: without BASE, relative IRIs resolve against the endpoint's base IRI (the
    store's ``base_iri``, where record IRIs live); an explicit BASE wins."""
    client = SPARQLWrapper(server.url)
    client.setReturnFormat(JSON)
    client.setQuery(
        "SELECT ?r ?d WHERE { ?r <http://xmlns.com/foaf/0.1/primaryTopic> ?d } ORDER BY ?r LIMIT 1"
    )
    row = client.query().convert()["results"]["bindings"][0]
    record, dataset = row["r"]["value"], row["d"]["value"]
    assert record.startswith(BASE + "record/")
    relative = record.removeprefix(BASE)

    def rows(query: str, method: str = "GET") -> list[tuple[str, str]]:
        client.setMethod(method)
        client.setQuery(query)
        bindings = client.query().convert()["results"]["bindings"]
        return sorted((b["p"]["value"], b["o"]["value"]) for b in bindings)

    absolute = rows(f"SELECT ?p ?o WHERE {{ <{record}> ?p ?o }}")
    assert absolute
    assert rows(f"SELECT ?p ?o WHERE {{ <{relative}> ?p ?o }}") == absolute
    assert rows(
        f"SELECT ?p ?o WHERE {{ GRAPH <{relative}> {{ <{relative}> ?p ?o }} }}", "POST"
    ) == (absolute)
    # an explicit BASE wins: the dataset's IRI relative to its publisher's site
    site, _, tail = dataset.partition("/dataset/")
    in_site = f"BASE <{site}/> SELECT ?p ?o WHERE {{ <dataset/{tail}> ?p ?o }}"
    assert rows(in_site) == rows(f"SELECT ?p ?o WHERE {{ <{dataset}> ?p ?o }}") != []
    # without BASE the same relative IRI names a resource under our base IRI: none
    assert rows(f"SELECT ?p ?o WHERE {{ <dataset/{tail}> ?p ?o }}") == []
    # CONSTRUCT and ASK resolve the same way
    ask = get(server, f"ASK {{ <{relative}> ?p ?o }}", "application/sparql-results+json")
    assert ask.status_code == 200 and ask.json()["boolean"] is True
    # a query naming "service" takes the guard's parse, which resolves the same way
    assert rows("SELECT ?p ?o WHERE { <service/x> ?p ?o }") == []
