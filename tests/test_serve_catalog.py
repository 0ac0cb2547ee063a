"""The DCAT catalogue and dereferenceable IRIs, served by uvicorn on 127.0.0.1.

The store is filled by the real pipeline from the local peers (an OAI-PMH peer with generated,
bundled and hostile records; the bundled RDF dump with blank-node datasets), one record is
withdrawn, and clients (requests + rdflib/pyoxigraph, and our own rdf-dump harvester) read
what we serve.
"""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import pyoxigraph
import pytest
import rdflib
import requests
import uvicorn
from rdflib.compare import isomorphic
from starlette.applications import Starlette

from aggregator.config import HarvestSettings, HttpSettings, ServeSettings, Settings, SourceConfig
from aggregator.core.models import JobStatus
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.rdf_files import RdfFilesApp
from aggregator.demo.peers.sample_data import (
    bundled_dump_path,
    generate_dataset,
    generate_identifier,
    load_bundled_oai_records,
)
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.serve.catalog import routes
from aggregator.serve.catalog_data import (
    FIRST,
    Counter,
    Cursor,
    PageRequest,
    decode_cursor,
    load_page,
    parse_since,
)
from aggregator.serve.context import ServeContext
from aggregator.serve.pages import Links, dataset_page
from aggregator.serve.rdf_formats import (
    HTML,
    JSONLD,
    NTRIPLES,
    RDFXML,
    TURTLE,
    BadRequestError,
    negotiate,
)
from aggregator.store.packing import unpack_graph
from aggregator.store.records import RecordStore
from aggregator.store.state import RECORD_COLUMNS, RecordRow

T0 = datetime(2024, 3, 1, tzinfo=UTC)
DCAT = rdflib.Namespace("http://www.w3.org/ns/dcat#")
DCT = rdflib.Namespace("http://purl.org/dc/terms/")
HYDRA = rdflib.Namespace("http://www.w3.org/ns/hydra/core#")
XSD_NNI = "http://www.w3.org/2001/XMLSchema#nonNegativeInteger"
HOSTILE_ID = "oai:data.example.org:hostile"
RDF_SYNTAX = {"text/turtle": "turtle", "application/ld+json": "json-ld",
              "application/rdf+xml": "xml", "application/n-triples": "nt"}  # fmt: skip


def hostile_dataset() -> bytes:
    body = generate_dataset(900).decode()
    body = re.sub(
        r'<dct:title xml:lang="en">[^<]*</dct:title>',
        '<dct:title xml:lang="en">&lt;script&gt;alert(1)&lt;/script&gt;</dct:title>',
        body,
        count=1,
    )
    body = re.sub(
        r'<dct:description xml:lang="en">[^<]*</dct:description>',
        '<dct:description xml:lang="en">&lt;img src=x onerror="alert(2)"&gt; ok</dct:description>',
        body,
        count=1,
    )
    body = re.sub(
        r'<dcat:accessURL rdf:resource="[^"]*"/>',
        '<dcat:accessURL rdf:resource="javascript:alert(3)"/>',
        body,
        count=1,
    )
    return body.encode()


def item(i: int, revision: int = 0, when: datetime | None = None) -> OaiItem:
    stamp = when or T0 + timedelta(hours=i + 100 * revision)
    return OaiItem(generate_identifier(i), stamp, (), False, generate_dataset(i, revision=revision))


class Uvicorn:
    """uvicorn on a socket bound before the app exists, so the base IRI can name its port."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    def start(self, app: Starlette) -> None:
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(10)
        self.sock.close()


@dataclass
class Served:
    url: str
    store: RecordStore
    settings: Settings
    http: HttpClient
    dump_url: str
    first_wave_end: str  # every record harvested later has a greater 'modified'

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.store.path / "state.sqlite3")

    def rows(self, where: str = "status = 'active'") -> list[tuple[RecordRow, bytes]]:
        with self.db() as db:
            cur = db.execute(f"SELECT {RECORD_COLUMNS}, ntriples FROM records WHERE {where}")
            return [(RecordRow.from_row(r[:-1]), unpack_graph(r[-1])) for r in cur]

    def row(self, local_id: str) -> tuple[RecordRow, bytes]:
        found = [r for r in self.rows("1") if r[0].local_id == local_id]
        assert found, local_id
        return found[0]

    def deref(self, iri: str) -> str:
        """Where we serve a dataset: its own IRI when minted here, else the lookup route."""
        return iri if iri.startswith(self.url) else f"{self.url}dataset?iri={quote(iri, safe='')}"

    def get(self, path: str, accept: str | None = None, **headers: str) -> requests.Response:
        if accept is not None:
            headers["Accept"] = accept
        url = path if path.startswith("http") else self.url + path.lstrip("/")
        return requests.get(url, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("catalog")
    web = Uvicorn()
    items = MemoryItems(item(i) for i in range(20))
    for identifier, datestamp, payload in load_bundled_oai_records():
        items.put(OaiItem(identifier, datestamp, (), False, payload))
    items.put(OaiItem(HOSTILE_ID, T0, (), False, hostile_dataset()))
    files = RdfFilesApp()
    files.put_file("/catalog.ttl", bundled_dump_path(), "text/turtle")
    with PeerServer(OaiPmhPeer(items, page_size=10)) as oai, PeerServer(files) as dump:
        settings = Settings(
            config_path=None,
            store_path=tmp / "store",
            base_iri=web.url,
            http=HttpSettings(allow_private=True, backoff=0.01, max_backoff=0.05, retries=1),
            harvest=HarvestSettings(workers=0),
            sources={
                "oai": SourceConfig(name="oai", type="oai-pmh", url=f"{oai.url}oai"),
                # strict: the bundled dump's dataset with a bad dcat:byteSize is rejected
                "dump": SourceConfig(
                    name="dump", type="rdf-dump", url=f"{dump.url}catalog.ttl", strict=True
                ),
            },
            serve=ServeSettings(catalog_page_size=7),
        )
        http = HttpClient(settings.http, sleep=lambda s: None)
        store = RecordStore(settings.store_path, web.url)
        try:
            for name in ("oai", "dump"):
                job = run_source(settings, store, name, RunOptions(), http=http)
                assert job.status == JobStatus.SUCCEEDED.value, job.message
            store.sync()
            first_end = max(r.modified for r in store.db.iter_records())
            # a second wave: one record withdrawn, one updated, five added
            items.delete(generate_identifier(3), T0 + timedelta(days=30))
            items.put(item(5, revision=1), *(item(i) for i in range(20, 25)))
            job = run_source(settings, store, "oai", RunOptions(full=True), http=http)
            assert job.counters["withdrawn"] == 1 and job.counters["added"] == 5
            store.sync()
            web.start(Starlette(routes=routes(ServeContext(store, settings))))
            yield Served(web.url, store, settings, http, f"{dump.url}catalog.ttl", first_end)
        finally:
            web.stop()
            store.close()


def parse(resp: requests.Response) -> rdflib.Graph:
    assert resp.status_code == 200, resp.text
    media = resp.headers["content-type"].split(";")[0]
    with warnings.catch_warnings():  # rdflib's JSON-LD parser uses its deprecated ConjunctiveGraph
        warnings.simplefilter("ignore", DeprecationWarning)
        return rdflib.Graph().parse(data=resp.content, format=RDF_SYNTAX[media], publicID=resp.url)


def without_paging(graph: rdflib.Graph) -> rdflib.Graph:
    """The graph without the page's own IRI (which carries the format suffix of the URL)."""
    views = set(graph.subjects(rdflib.RDF.type, HYDRA.PartialCollectionView))
    out = rdflib.Graph()
    for s, p, o in graph:
        if s not in views and p != HYDRA.view:
            out.add((s, p, o))
    return out


def one(graph: rdflib.Graph, s: object, p: rdflib.URIRef) -> rdflib.term.Node | None:
    return next(iter(graph.objects(s, p)), None)  # type: ignore[arg-type]


def walk(served: Served, url: str, accept: str, link: rdflib.URIRef) -> list[rdflib.Graph]:
    pages, seen = [], set()
    next_url: str | None = url
    while next_url:
        assert next_url not in seen, "paging loop"
        seen.add(next_url)
        graph = parse(served.get(next_url, accept))
        pages.append(graph)
        views = list(graph.subjects(rdflib.RDF.type, HYDRA.PartialCollectionView))
        assert len(views) == 1
        found = one(graph, views[0], link)
        next_url = str(found) if found is not None else None
    return pages


def dataset_iris(graph: rdflib.Graph) -> set[str]:
    catalog = next(graph.subjects(rdflib.RDF.type, DCAT.Catalog))
    return {str(o) for p in (DCAT.dataset, DCAT.service) for o in graph.objects(catalog, p)}


# -- the catalogue ------------------------------------------------------------------------------
def test_walking_next_links_gets_every_active_dataset_with_its_description(served: Served) -> None:
    active = {row.dataset_iri for row, _ in served.rows()}
    assert len(active) == 20 + 12 + 1 + 9 + 5 - 1
    pages = walk(served, "catalog", "text/turtle", HYDRA.next)
    assert len(pages) == -(-len(active) // 7)
    seen: list[str] = []
    for graph in pages:
        catalog = next(graph.subjects(rdflib.RDF.type, DCAT.Catalog))
        assert int(str(one(graph, catalog, HYDRA.totalItems))) == len(active)
        assert one(graph, catalog, DCT.title) is not None
        assert one(graph, catalog, DCT.publisher) is not None
        on_page = dataset_iris(graph)
        for iri in on_page:  # the full description, not just a link
            assert one(graph, rdflib.URIRef(iri), DCT.title) is not None
            assert one(graph, rdflib.URIRef(iri), DCT.description) is not None
        records = set(graph.objects(catalog, DCAT.record))
        assert len(records) == len(on_page)
        for rec in records:
            assert (rec, rdflib.RDF.type, DCAT.CatalogRecord) in graph
        seen += on_page
    assert len(seen) == len(set(seen))  # nothing twice
    assert set(seen) == active
    withdrawn = served.row(generate_identifier(3))[0]
    assert withdrawn.status == "withdrawn" and withdrawn.dataset_iri not in seen


def test_walking_backwards_from_last_gives_the_same_datasets(served: Served) -> None:
    forward = walk(served, "catalog.ttl?limit=4", "", HYDRA.next)
    first = forward[0]
    view = next(first.subjects(rdflib.RDF.type, HYDRA.PartialCollectionView))
    last_url = str(one(first, view, HYDRA.last))
    backward = walk(served, last_url, "", HYDRA.previous)
    assert len(backward) == len(forward)
    assert set().union(*map(dataset_iris, backward)) == set().union(*map(dataset_iris, forward))
    # the first page of the backward walk has no previous and links first like everyone else
    head = backward[-1]
    head_view = next(head.subjects(rdflib.RDF.type, HYDRA.PartialCollectionView))
    assert one(head, head_view, HYDRA.previous) is None
    assert str(one(head, head_view, HYDRA.first)) == str(view)
    assert "limit=4" in str(view) and str(view).startswith(f"{served.url}catalog.ttl")


def test_paging_is_keyset_not_offset(served: Served) -> None:
    page = served.get("catalog?limit=3", "application/n-triples")
    nxt = re.search(r"<http://www\.w3\.org/ns/hydra/core#next> <([^>]+)>", page.text)
    assert nxt is not None
    query = parse_qs(urlsplit(nxt.group(1)).query)
    token = query["page"][0]
    cursor = decode_cursor(token)
    assert cursor.direction == "after" and cursor.id > 0 and cursor.modified.endswith("Z")
    assert "offset" not in query
    assert served.get(f"catalog?page={token}x!").status_code == 400
    assert served.get("catalog?page=Zm9v").status_code == 400  # 'foo'
    assert served.get("catalog?limit=0").status_code == 400
    assert served.get("catalog?limit=ten").status_code == 400


def test_modified_since_lists_only_recent_changes(served: Served) -> None:
    recent = {row.dataset_iri for row, _ in served.rows() if row.modified > served.first_wave_end}
    assert len(recent) == 6  # five added, one updated
    since = min(row.modified for row, _ in served.rows() if row.modified > served.first_wave_end)
    pages = walk(served, f"catalog?modified_since={since}", "text/turtle", HYDRA.next)
    assert set().union(*map(dataset_iris, pages)) == recent
    view = next(pages[0].subjects(rdflib.RDF.type, HYDRA.PartialCollectionView))
    assert "modified_since=" in str(one(pages[0], view, HYDRA.last))
    catalog = next(pages[0].subjects(rdflib.RDF.type, DCAT.Catalog))
    assert int(str(one(pages[0], catalog, HYDRA.totalItems))) == 6
    # a date, a date-time with an offset, and nonsense
    day = served.get("catalog?modified_since=2000-01-01", "text/turtle")
    assert len(dataset_iris(parse(day))) == 7
    future = served.get("catalog?modified_since=2999-01-01T00:00:00%2B02:00", "text/turtle")
    assert dataset_iris(parse(future)) == set()
    assert served.get("catalog?modified_since=yesterday").status_code == 400


@pytest.mark.parametrize(
    ("path", "accept", "media"),
    [
        ("catalog", "text/turtle", "text/turtle"),
        ("catalog", "application/ld+json", "application/ld+json"),
        ("catalog", "application/rdf+xml;q=0.9, text/turtle;q=0.5", "application/rdf+xml"),
        ("catalog", "application/n-triples", "application/n-triples"),
        ("catalog", None, "text/turtle"),
        ("catalog", "*/*", "text/turtle"),
        ("catalog.jsonld", "text/html", "application/ld+json"),
        ("catalog.rdf", None, "application/rdf+xml"),
        ("catalog.nt", None, "application/n-triples"),
        ("catalog?format=jsonld", "text/turtle", "application/ld+json"),
        ("catalog?format=application/rdf%2Bxml", None, "application/rdf+xml"),
    ],
)
def test_catalogue_formats_describe_the_same_graph(
    served: Served, path: str, accept: str | None, media: str
) -> None:
    resp = served.get(path, accept)
    assert resp.headers["content-type"].split(";")[0] == media
    reference = parse(served.get("catalog.nt"))
    assert isomorphic(without_paging(parse(resp)), without_paging(reference))
    if "." in path.split("?")[0] or "format=" in path:
        assert "vary" not in resp.headers
    else:
        assert resp.headers["vary"] == "Accept"
        assert "format=" in resp.headers["content-location"]


def test_json_ld_round_trips_through_rdflib_and_pyoxigraph(served: Served) -> None:
    nt = served.get("catalog?limit=10", "application/n-triples")
    jsonld = served.get("catalog?limit=10", "application/ld+json")
    json.loads(jsonld.content)  # plain JSON
    assert isomorphic(parse(jsonld), parse(nt))

    def canonical(data: bytes, fmt: pyoxigraph.RdfFormat) -> set[str]:
        ds = pyoxigraph.Dataset(pyoxigraph.parse(data, fmt))
        ds.canonicalize(pyoxigraph.CanonicalizationAlgorithm.RDFC_1_0)
        return {str(q) for q in ds}

    assert canonical(jsonld.content, pyoxigraph.RdfFormat.JSON_LD) == canonical(
        nt.content, pyoxigraph.RdfFormat.N_TRIPLES
    )


def test_negotiation_failures(served: Served) -> None:
    assert served.get("catalog", "image/png").status_code == 406
    assert served.get("catalog?format=pdf").status_code == 400
    assert served.get("catalog.pdf").status_code == 404
    html = served.get("catalog", "text/html,application/xhtml+xml,*/*;q=0.8")
    assert html.headers["content-type"].startswith("text/html")
    assert "next</a>" in html.text


def test_a_client_walks_the_catalogue_as_ckans_dcat_harvester_does(served: Served) -> None:
    """ckanext-dcat's RDF parser looks for a hydra:PagedCollection and follows hydra:next;
    it asks for RDF/XML by default."""
    url: str | None = f"{served.url}catalog"
    found: set[str] = set()
    pages = 0
    while url:
        resp = requests.get(url, headers={"Accept": "application/rdf+xml"}, timeout=30)
        graph = rdflib.Graph().parse(data=resp.content, format="xml", publicID=url)
        found |= {str(s) for s in graph.subjects(rdflib.RDF.type, DCAT.Dataset)}
        found |= {str(s) for s in graph.subjects(rdflib.RDF.type, DCAT.DataService)}
        found |= {str(s) for s in graph.subjects(rdflib.RDF.type, DCAT.DatasetSeries)}
        url = None
        for node in graph.subjects(rdflib.RDF.type, HYDRA.PagedCollection):
            for nxt in graph.objects(node, HYDRA.next):
                url = str(nxt)
        pages += 1
    assert pages == 7  # 46 at 7 a page
    assert {row.dataset_iri for row, _ in served.rows()} <= found


def test_our_rdf_dump_harvester_harvests_the_catalogue_into_an_identical_store(
    served: Served, tmp_path: Path
) -> None:
    """Another aggregator harvests us: every dataset graph arrives exactly as we hold it."""
    source = SourceConfig(
        name="mirror",
        type="rdf-dump",
        url=f"{served.url}catalog.ttl?limit=9",  # hydra:totalItems checked against the pages
    )
    settings = Settings(
        config_path=None,
        store_path=tmp_path / "mirror",
        base_iri="http://mirror.example.org/",
        http=served.settings.http,
        harvest=HarvestSettings(workers=0),
        sources={"mirror": source},
    )
    with RecordStore(settings.store_path, settings.base_iri) as mirror:
        job = run_source(settings, mirror, "mirror", RunOptions(), http=served.http)
        assert job.status == JobStatus.SUCCEEDED.value, job.message
        assert job.listing["pages"] == 6  # 46 at 9 a page
        mirror.sync()
        theirs = {
            row.dataset_iri: mirror.dataset_ntriples(row)
            for row in mirror.db.iter_records(status="active")
        }
    ours = {row.dataset_iri: nt for row, nt in served.rows()}
    assert theirs.keys() == ours.keys()
    for iri, nt in ours.items():
        assert theirs[iri] == nt, iri


# -- datasets -----------------------------------------------------------------------------------
def test_minted_dataset_iri_dereferences_to_the_stored_graph(served: Served) -> None:
    minted = [(r, nt) for r, nt in served.rows() if r.source == "dump"]
    minted = [(r, nt) for r, nt in minted if (r.dataset_iri or "").startswith(served.url)]
    assert len(minted) == 4  # the bundled dump's blank-node datasets
    row, stored = minted[0]
    assert row.dataset_iri is not None
    iri = row.dataset_iri
    assert iri.startswith(f"{served.url}dataset/dump/")
    expected = rdflib.Graph().parse(data=stored, format="nt")
    for accept in ("text/turtle", "application/ld+json", "application/rdf+xml"):
        resp = served.get(iri, accept)
        assert resp.status_code == 200
        assert resp.headers["vary"] == "Accept"
        assert resp.headers["content-location"].startswith(iri + "?format=")
        assert isomorphic(parse(resp), expected)
        assert isomorphic(parse(served.get(resp.headers["content-location"])), expected)
    exact = served.get(iri, "application/n-triples")
    assert exact.content == stored  # the stored canonical N-Triples, byte for byte
    for suffix, media in (("ttl", TURTLE), ("jsonld", JSONLD), ("rdf", RDFXML), ("nt", NTRIPLES)):
        resp = served.get(f"{iri}.{suffix}", "text/html")
        assert resp.headers["content-type"].split(";")[0] == media.media_type
        assert isomorphic(parse(resp), expected)
    assert served.get(f"{iri}.nt").content == stored
    record = served.get(iri, "text/turtle").headers["link"]
    assert row.record_iri in record


def test_dataset_page_for_people(served: Served) -> None:
    row, _ = served.row("https://region.example.org/catalogue/roads")
    resp = served.get(f"dataset?iri={row.dataset_iri}", "text/html")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/html; charset=utf-8"
    csp = resp.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp  # the map's own files only
    text = resp.text
    for expected in (
        "Road network",
        "Straßennetz",  # every language
        "Centre lines of regional",
        "Open Data Office",  # contact
        "Example Region – Open Data Office",  # publisher
        "Transport",  # theme, in words
        "Distributions",
        row.record_iri,
        f"{served.url}payload/{row.payload_sha}",
        "2024-10-01",  # modified
        "dump",
    ):
        assert expected in text, expected
    assert 'href="https://region.example.org/' in text


def test_harvested_text_is_escaped_in_html(served: Served) -> None:
    row, _ = served.row(HOSTILE_ID)
    assert row.status == "active"
    html = served.get(f"dataset?iri={row.dataset_iri}", "text/html").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html.lower()
    assert "<img" not in html.lower() and "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in html
    assert 'href="javascript:' not in html and "javascript:alert(3)" in html
    # the catalogue page lists it as text, too
    listing = served.get("catalog?limit=1000", "text/html").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in listing and "<script" not in listing


def test_dataset_page_renderer_escapes_every_value() -> None:
    evil = '"><script>x</script>'
    triples = [
        pyoxigraph.Triple(
            pyoxigraph.NamedNode("https://x.example.org/d"),
            pyoxigraph.NamedNode(f"http://purl.org/dc/terms/{prop}"),
            pyoxigraph.Literal(evil, language="en"),
        )
        for prop in ("title", "description", "identifier", "rights")
    ]
    row = RecordRow(
        id=1,
        source=evil,
        local_id=evil,
        record_iri="https://r/" + evil,
        dataset_iri="https://x.example.org/d",
        status="active",
        content_hash=None,
        first_seen=evil,
        modified=evil,
        source_datestamp=evil,
        job_id=1,
        seen_job=1,
        format=evil,
        payload_sha="ab",
        url="javascript:alert(1)",
        themes="",
        findings="[]",
        flagged=0,
        pending=0,
    )
    links = Links("http://127.0.0.1/", lambda iri, kind: f"http://127.0.0.1/{kind}", str)
    html = dataset_page("https://x.example.org/d", row, triples, links)
    assert "<script" not in html and 'href="javascript:' not in html


def test_unknown_withdrawn_and_rejected_datasets(served: Served) -> None:
    assert served.get(f"{served.url}dataset/dump/no-such-thing").status_code == 404
    assert served.get("dataset?iri=https://nowhere.example.org/x").status_code == 404
    assert served.get("dataset").status_code == 400
    row, _ = served.row(generate_identifier(3))
    gone = served.get(f"dataset?iri={row.dataset_iri}", "text/turtle")
    assert gone.status_code == 410
    assert row.modified in gone.text and "withdrawn" in gone.text
    assert row.record_iri in gone.headers["link"]
    page = served.get(f"dataset?iri={row.dataset_iri}", "text/html")
    assert page.status_code == 410 and "withdrawn" in page.text and row.modified in page.text
    rejected = [r for r, _ in served.rows("status = 'rejected'")]
    assert rejected  # the bundled dump has an invalid dataset
    missing = served.get(f"dataset?iri={rejected[0].local_id}")
    assert missing.status_code == 404


# -- records and payloads ------------------------------------------------------------------------
def test_catalogue_record_dereferences(served: Served) -> None:
    row, _ = served.row("https://region.example.org/catalogue/roads")
    graph = parse(served.get(row.record_iri, "text/turtle"))
    rec = rdflib.URIRef(row.record_iri)
    assert (rec, rdflib.RDF.type, DCAT.CatalogRecord) in graph
    assert str(one(graph, rec, rdflib.FOAF.primaryTopic)) == row.dataset_iri
    for suffix in ("ttl", "jsonld", "rdf", "nt"):
        assert isomorphic(parse(served.get(f"{row.record_iri}.{suffix}")), graph)
    html = served.get(row.record_iri, "text/html").text
    assert row.local_id in html and f"payload/{row.payload_sha}" in html
    withdrawn, _ = served.row(generate_identifier(3))
    text = served.get(withdrawn.record_iri, "application/n-triples").text
    assert "https://w3id.org/ld-aggregator/ns#Withdrawn" in text
    assert served.get(f"{served.url}record/dump/nope").status_code == 404


def test_payload_is_served_byte_for_byte(served: Served) -> None:
    row, _ = served.row("https://region.example.org/catalogue/roads")
    original = requests.get(served.dump_url, timeout=30)
    resp = served.get(f"payload/{row.payload_sha}")
    assert resp.status_code == 200
    assert resp.content == original.content == bundled_dump_path().read_bytes()
    assert resp.headers["content-type"] == "text/turtle"
    assert resp.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in resp.headers["content-security-policy"]
    again = served.get(f"payload/{row.payload_sha}", **{"If-None-Match": resp.headers["etag"]})
    assert again.status_code == 304
    assert served.get("payload/" + "0" * 64).status_code == 404
    assert served.get("payload/../etc").status_code == 404


def test_datatypes_are_served_as_stored(served: Served) -> None:
    """Oxigraph would say xsd:integer; we serve the stored N-Triples."""
    row, stored = served.row(generate_identifier(7))
    assert XSD_NNI.encode() in stored
    assert row.dataset_iri is not None
    for fmt in (TURTLE, JSONLD, RDFXML, NTRIPLES):
        resp = served.get(served.deref(row.dataset_iri), fmt.media_type)
        rdf_format = pyoxigraph.RdfFormat.from_media_type(fmt.media_type)
        assert rdf_format is not None
        sizes = [
            q.object
            for q in pyoxigraph.parse(resp.content, rdf_format)
            if q.predicate.value == "http://www.w3.org/ns/dcat#byteSize"
        ]
        assert sizes
        assert all(isinstance(s, pyoxigraph.Literal) for s in sizes)
        assert {s.datatype.value for s in sizes if isinstance(s, pyoxigraph.Literal)} == {XSD_NNI}
    catalog = served.get("catalog.nt?limit=1000").content
    types = {
        q.object.datatype.value
        for q in pyoxigraph.parse(catalog, pyoxigraph.RdfFormat.N_TRIPLES)
        if q.predicate.value == "http://www.w3.org/ns/dcat#byteSize"
        and isinstance(q.object, pyoxigraph.Literal)
    }
    assert types == {XSD_NNI}
    # what reading the graph store back would have given
    query = (
        "SELECT (DATATYPE(?s) AS ?t) WHERE { ?d <http://www.w3.org/ns/dcat#byteSize> ?s } LIMIT 1"
    )
    solutions = served.store.graphs.query(query)
    assert isinstance(solutions, pyoxigraph.QuerySolutions)
    in_store = next(iter(solutions))
    assert (
        in_store[0] is not None and in_store[0].value == "http://www.w3.org/2001/XMLSchema#integer"
    )


def test_conditional_requests(served: Served) -> None:
    row, _ = served.row(generate_identifier(1))
    assert row.dataset_iri is not None
    url = served.deref(row.dataset_iri)
    first = served.get(url, "text/turtle")
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    assert served.get(url, "text/turtle", **{"If-None-Match": etag}).status_code == 304
    assert served.get(url, "text/turtle", **{"If-Modified-Since": modified}).status_code == 304
    other = served.get(url, "application/ld+json", **{"If-None-Match": etag})
    assert other.status_code == 200 and other.headers["etag"] != etag
    page = served.get("catalog.ttl")
    assert served.get("catalog.ttl", **{"If-None-Match": page.headers["etag"]}).status_code == 304
    assert page.headers["cache-control"] == "public, no-cache"
    old = "Mon, 01 Jan 2001 00:00:00 GMT"
    assert served.get("catalog.ttl", **{"If-Modified-Since": old}).status_code == 200


# -- framework-neutral parts ---------------------------------------------------------------------
def test_negotiate() -> None:
    offered = (TURTLE, JSONLD, RDFXML, NTRIPLES, HTML)
    assert negotiate(None, offered, TURTLE) is TURTLE
    assert negotiate("text/html,application/xhtml+xml,*/*;q=0.8", offered, TURTLE) is HTML
    assert negotiate("application/json", offered, TURTLE) is JSONLD
    assert negotiate("text/*", offered, TURTLE) is TURTLE
    assert negotiate("application/*;q=0.5, text/turtle;q=0.1", offered, TURTLE) is JSONLD
    assert negotiate("text/turtle;q=0, */*", offered, TURTLE) is JSONLD
    assert negotiate("image/png", offered, TURTLE) is None
    assert negotiate("text/turtle;q=bogus", offered, TURTLE) is None


def test_parse_since_and_cursors() -> None:
    assert parse_since("2024-05-01") == "2024-05-01T00:00:00.000000Z"
    assert parse_since("2024-05-01T12:00:00+02:00") == "2024-05-01T10:00:00.000000Z"
    assert parse_since("2024-05-01T10:00:00Z") == "2024-05-01T10:00:00.000000Z"
    assert parse_since("2024-05-01T10:00:00") == "2024-05-01T10:00:00.000000Z"
    with pytest.raises(BadRequestError):
        parse_since("May 1st")
    cursor = Cursor("before", "2024-05-01T10:00:00.123456Z", 42)
    token = cursor.token()
    assert token is not None and decode_cursor(token) == cursor
    assert decode_cursor(FIRST.token()) == FIRST and decode_cursor(None) == FIRST
    with pytest.raises(BadRequestError):
        decode_cursor("YTIwMjR8MQ")  # 'a2024|1': not a stamp


def test_keyset_walk_survives_writes_between_pages(tmp_path: Path) -> None:
    """Records changed during a walk move to the end; none is skipped."""
    items = MemoryItems(item(i) for i in range(9))
    with PeerServer(OaiPmhPeer(items, page_size=50)) as peer:
        settings = Settings(
            config_path=None,
            store_path=tmp_path / "store",
            base_iri="http://127.0.0.1:9/",
            http=HttpSettings(allow_private=True, retries=0),
            harvest=HarvestSettings(workers=0),
            sources={"p": SourceConfig(name="p", type="oai-pmh", url=f"{peer.url}oai")},
        )
        http = HttpClient(settings.http, sleep=lambda s: None)
        with RecordStore(settings.store_path, settings.base_iri) as store:
            run_source(settings, store, "p", RunOptions(), http=http)
            db = sqlite3.connect(store.path / "state.sqlite3")
            counter = Counter()
            page = load_page(db, PageRequest(FIRST, None, 3), counter)
            seen = [e.row.local_id for e in page.entries]
            assert page.total == 9 and page.previous is None and page.next is not None
            # a record of a later page and one of the first page change; one is added
            items.put(item(7, revision=1), item(0, revision=1), item(9))
            run_source(settings, store, "p", RunOptions(full=True), http=http)
            while page.next is not None:
                page = load_page(db, PageRequest(page.next, None, 3), counter)
                seen += [e.row.local_id for e in page.entries]
            assert set(seen) == {generate_identifier(i) for i in range(10)}
            assert seen[-3:] == [generate_identifier(i) for i in (0, 7, 9)] or set(seen[-3:]) == {
                generate_identifier(i) for i in (0, 7, 9)
            }
            assert page.total == 10
            # and back: previous links reach the first record
            back = load_page(db, PageRequest(Cursor("last"), None, 4), counter)
            walked = [e.row.local_id for e in back.entries]
            while back.previous is not None:
                back = load_page(db, PageRequest(back.previous, None, 4), counter)
                walked = [e.row.local_id for e in back.entries] + walked
            assert len(walked) == 10 and set(walked) == set(seen)
            db.close()
