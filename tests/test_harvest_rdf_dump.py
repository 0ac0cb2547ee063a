"""The rdf-dump harvester against a real local server of RDF documents (aggregator.demo.peers)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyoxigraph
import pytest
import rdflib
from rdflib.compare import isomorphic

from aggregator.config import HttpSettings, SourceConfig
from aggregator.core.errors import ConfigError, HarvestError, TransportError
from aggregator.core.models import RawRecord
from aggregator.demo.peers.rdf_files import Fault, RdfFilesApp
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.rdf_dump import RdfDumpHarvester, detect_syntax
from aggregator.net.client import HttpClient
from aggregator.plugin import harvesters

DATA = Path(__file__).parent / "data" / "rdf_dump"
FILES = {
    "turtle": ("catalogue.ttl", "text/turtle; charset=utf-8", "text/turtle"),
    "rdfxml": ("catalogue.rdf", "application/rdf+xml", "application/rdf+xml"),
    "jsonld": ("catalogue.jsonld", "application/ld+json", "application/ld+json"),
    "ntriples": ("catalogue.nt", "application/n-triples", "application/n-triples"),
}


@pytest.fixture
def app() -> RdfFilesApp:
    return RdfFilesApp()


@pytest.fixture
def server(app: RdfFilesApp) -> Iterator[PeerServer]:
    with PeerServer(app) as running:
        yield running


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def http(sleeps: list[float]) -> HttpClient:
    settings = HttpSettings(allow_private=True, retries=2, backoff=0.01, timeout=5.0)
    return HttpClient(settings, sleep=sleeps.append)


def harvest(
    http: HttpClient,
    url: str,
    cancel: threading.Event | None = None,
    **options: Any,
) -> tuple[list[RawRecord], Listing]:
    source = SourceConfig(name="dump", type="rdf-dump", url=url, options=options)
    harvester = RdfDumpHarvester(source, http)
    listing = Listing(incremental=False)
    request = HarvestRequest(full=True, checkpoint=None, cancel=cancel or threading.Event())
    return list(harvester.list_records(request, listing)), listing


def graph_of(record: RawRecord) -> rdflib.Graph:
    """Parse with pyoxigraph, compare with rdflib (tests only)."""
    fmt = pyoxigraph.RdfFormat.from_media_type(record.media_type)
    assert fmt is not None
    graph = rdflib.Graph()
    for quad in pyoxigraph.parse(record.payload, fmt, base_iri=record.url):
        graph.parse(data=f"{quad.triple} .", format="nt")
    return graph


def reference_graph() -> rdflib.Graph:
    graph = rdflib.Graph()
    for quad in pyoxigraph.parse(path=DATA / "catalogue.ttl"):
        graph.parse(data=f"{quad.triple} .", format="nt")
    return graph


def test_registered_under_its_name() -> None:
    assert harvesters.get("rdf-dump") is RdfDumpHarvester


@pytest.mark.parametrize("syntax", sorted(FILES))
def test_each_serialisation_is_one_collection_record_byte_for_byte(
    app: RdfFilesApp, server: PeerServer, http: HttpClient, syntax: str
) -> None:
    name, served_as, canonical = FILES[syntax]
    body = (DATA / name).read_bytes()
    app.put("/export", body, served_as)  # no extension: the Content-Type decides
    records, listing = harvest(http, server.url + "export")
    assert len(records) == 1
    record = records[0]
    assert record.payload == body
    assert record.media_type == canonical
    assert record.is_collection
    assert record.local_id == server.url + "export"
    assert record.format == "dcat"
    assert record.source == "dump"
    assert isomorphic(graph_of(record), reference_graph())
    assert listing.complete
    assert listing.allows_withdrawal
    assert (listing.pages, listing.seen, listing.expected_total) == (1, 1, None)


@pytest.mark.parametrize(
    ("path", "name", "canonical"),
    [
        ("/dump.ttl", "catalogue.ttl", "text/turtle"),
        ("/dump.rdf", "catalogue.rdf", "application/rdf+xml"),
        ("/dump.owl", "catalogue.rdf", "application/rdf+xml"),
        ("/dump.jsonld", "catalogue.jsonld", "application/ld+json"),
        ("/dump.nt", "catalogue.nt", "application/n-triples"),
    ],
)
def test_extension_decides_when_content_type_is_generic(
    app: RdfFilesApp,
    server: PeerServer,
    http: HttpClient,
    path: str,
    name: str,
    canonical: str,
) -> None:
    app.put(path, (DATA / name).read_bytes(), "application/octet-stream")
    records, listing = harvest(http, server.url + path.lstrip("/"))
    assert records[0].media_type == canonical
    assert listing.complete


def test_wrong_content_type_switch_falls_back_to_extension(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    app.put_file("/dump.ttl", DATA / "catalogue.ttl", "text/turtle")
    app.fail("/dump.ttl", Fault(content_type="text/html; charset=utf-8"))
    records, listing = harvest(http, server.url + "dump.ttl")
    assert records[0].media_type == "text/turtle"
    assert listing.complete


def test_content_type_wins_over_extension(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    app.put_file("/dump.rdf", DATA / "catalogue.ttl", "text/turtle")
    records, _ = harvest(http, server.url + "dump.rdf")
    assert records[0].media_type == "text/turtle"


def test_format_option_when_nothing_else_says(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    app.put_file("/export", DATA / "catalogue.jsonld", "application/octet-stream")
    with pytest.raises(HarvestError) as caught:
        harvest(http, server.url + "export")
    assert caught.value.code == "unknownFormat"
    records, listing = harvest(http, server.url + "export", format="jsonld")
    assert records[0].media_type == "application/ld+json"
    assert listing.complete


def test_lying_content_type_is_a_parse_error_unless_format_is_forced(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    app.put_file("/dump", DATA / "catalogue.ttl", "application/rdf+xml")
    with pytest.raises(HarvestError) as caught:
        harvest(http, server.url + "dump")
    assert caught.value.code == "parseError"
    records, _ = harvest(http, server.url + "dump", format="turtle", force_format=True)
    assert records[0].media_type == "text/turtle"


def test_detect_syntax_order() -> None:
    assert detect_syntax("text/turtle", "http://x/a.rdf").key == "turtle"
    assert detect_syntax("text/plain", "http://x/a.nt?download=1").key == "ntriples"
    assert detect_syntax("application/json", "http://x/a").key == "jsonld"
    assert detect_syntax("", "http://x/a.nq").key == "nquads"
    assert detect_syntax("text/html", "http://x/a", "rdfxml").key == "rdfxml"
    assert detect_syntax("text/turtle", "http://x/a.ttl", "rdfxml", force=True).key == "rdfxml"


@pytest.mark.parametrize("syntax", ["turtle", "jsonld", "rdfxml", "ntriples"])
def test_hydra_next_pages_followed_in_any_serialisation(
    app: RdfFilesApp, server: PeerServer, http: HttpClient, syntax: str
) -> None:
    first = app.add_hydra_catalogue("/paged", datasets=7, page_size=3, syntax=syntax)
    records, listing = harvest(http, server.url + first.lstrip("/"))
    assert [r.local_id for r in records] == [f"{server.url}paged?page={n}" for n in (1, 2, 3)]
    assert all(r.is_collection for r in records)
    assert listing.expected_total == 7
    assert (listing.pages, listing.seen) == (3, 3)
    assert listing.complete, listing.truncated_reason


def test_deprecated_hydra_next_page_followed(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    first = app.add_hydra_catalogue("/legacy", datasets=5, page_size=2, variant="nextPage")
    records, listing = harvest(http, server.url + first.lstrip("/"))
    assert len(records) == 3
    assert listing.expected_total == 5
    assert listing.complete, listing.truncated_reason


def test_paging_loop_is_a_truncated_listing(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    first = app.add_hydra_catalogue("/loop", datasets=9, page_size=3, variant="loop")
    records, listing = harvest(http, server.url + first.lstrip("/"))
    assert len(records) == 3
    assert not listing.complete
    assert listing.truncated_reason is not None
    assert listing.truncated_reason.startswith("hydra paging loop at ")
    assert app.hits("/loop?page=1") == 1


def test_redirect_back_to_a_seen_page_is_a_loop(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    first = app.add_hydra_catalogue("/paged", datasets=9, page_size=3)
    app.fail("/paged?page=3", Fault(status=302, location="/paged?page=1", times=-1))
    records, listing = harvest(http, server.url + first.lstrip("/"))
    assert len(records) == 2
    assert "hydra paging loop at" in (listing.truncated_reason or "")
    assert "redirected" in (listing.truncated_reason or "")


def test_total_items_mismatch_is_a_truncated_listing(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    first = app.add_hydra_catalogue("/short", datasets=7, page_size=3, total_items=9)
    records, listing = harvest(http, server.url + first.lstrip("/"))
    assert len(records) == 3
    assert listing.expected_total == 9
    assert not listing.complete
    assert "9" in (listing.truncated_reason or "")
    _, unchecked = harvest(http, server.url + first.lstrip("/"), check_total=False)
    assert unchecked.complete


def test_max_pages_stops_with_a_truncated_listing(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    first = app.add_hydra_catalogue("/big", datasets=10, page_size=2)
    records, listing = harvest(http, server.url + first.lstrip("/"), max_pages=2)
    assert len(records) == 2
    assert not listing.complete
    assert "max_pages" in (listing.truncated_reason or "")


def test_next_link_outside_a_view_is_ignored(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    body = (DATA / "catalogue.ttl").read_bytes() + (
        b"\n<https://data.example.org/dataset/noise-map>"
        b" <http://www.w3.org/ns/hydra/core#next> <elsewhere.ttl> .\n"
    )
    app.put("/dump.ttl", body, "text/turtle")
    records, listing = harvest(http, server.url + "dump.ttl")
    assert len(records) == 1
    assert listing.complete
    assert any("ignored 1 hydra next" in note for note in listing.notes)
    assert app.hits("/elsewhere.ttl") == 0


def test_503_with_retry_after_is_retried(
    app: RdfFilesApp, server: PeerServer, http: HttpClient, sleeps: list[float]
) -> None:
    app.put_file("/dump.ttl", DATA / "catalogue.ttl", "text/turtle")
    app.fail("/dump.ttl", Fault(status=503, retry_after="3", times=2))
    records, listing = harvest(http, server.url + "dump.ttl")
    assert len(records) == 1
    assert listing.complete
    assert sleeps == [3.0, 3.0]
    assert app.hits("/dump.ttl") == 3


def test_persistent_500_is_a_transport_error(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    first = app.add_hydra_catalogue("/paged", datasets=6, page_size=3)
    app.fail("/paged?page=2", Fault(status=500, times=-1))
    listing = Listing(incremental=False)
    source = SourceConfig(name="dump", type="rdf-dump", url=server.url + first.lstrip("/"))
    records: list[RawRecord] = []
    with pytest.raises(TransportError) as caught:
        records.extend(
            RdfDumpHarvester(source, http).list_records(
                HarvestRequest(full=True, checkpoint=None), listing
            )
        )
    assert caught.value.status == 500
    assert len(records) == 1
    assert not listing.complete


def test_unparseable_page_raises_and_leaves_the_listing_incomplete(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    first = app.add_hydra_catalogue("/paged", datasets=6, page_size=3)
    app.put(
        "/paged?page=2", b"@prefix dcat: <http://www.w3.org/ns/dcat#> .\n<a> dcat:", "text/turtle"
    )
    source = SourceConfig(name="dump", type="rdf-dump", url=server.url + first.lstrip("/"))
    listing = Listing(incremental=False)
    records: list[RawRecord] = []
    with pytest.raises(HarvestError) as caught:
        records.extend(
            RdfDumpHarvester(source, http).list_records(
                HarvestRequest(full=True, checkpoint=None), listing
            )
        )
    assert caught.value.code == "parseError"
    # the broken page is still handed on, bytes as received, for the dead-letter store
    assert len(records) == 2
    assert records[1].payload.endswith(b"<a> dcat:")
    assert not listing.complete
    assert not listing.allows_withdrawal


def test_body_longer_than_declared_is_cut_at_the_declared_length(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    body = (DATA / "catalogue.nt").read_bytes()
    app.put("/dump.nt", body, "application/n-triples")
    app.fail("/dump.nt", Fault(extra_bytes=b"<http://x/y> <http://x/p> GARBAGE"))
    records, listing = harvest(http, server.url + "dump.nt")
    assert records[0].payload == body
    assert listing.complete


def test_body_shorter_than_declared_is_a_transport_error(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    app.put_file("/dump.ttl", DATA / "catalogue.ttl", "text/turtle")
    app.fail("/dump.ttl", Fault(truncate=100, times=-1))
    with pytest.raises(TransportError):
        harvest(http, server.url + "dump.ttl")


def test_slow_server_hits_the_read_timeout(app: RdfFilesApp, server: PeerServer) -> None:
    app.put_file("/dump.ttl", DATA / "catalogue.ttl", "text/turtle")
    app.fail("/dump.ttl", Fault(delay=1.5))
    impatient = HttpClient(HttpSettings(allow_private=True, retries=0, timeout=0.3))
    with pytest.raises(TransportError):
        harvest(impatient, server.url + "dump.ttl")


def test_cancel_stops_between_pages(app: RdfFilesApp, server: PeerServer, http: HttpClient) -> None:
    first = app.add_hydra_catalogue("/paged", datasets=9, page_size=3)
    cancel = threading.Event()
    source = SourceConfig(name="dump", type="rdf-dump", url=server.url + first.lstrip("/"))
    listing = Listing(incremental=False)
    request = HarvestRequest(full=True, checkpoint=None, cancel=cancel)
    records = []
    for record in RdfDumpHarvester(source, http).list_records(request, listing):
        records.append(record)
        cancel.set()
    assert len(records) == 1
    assert listing.truncated_reason == "cancelled"
    assert app.hits("/paged?page=2") == 0


def test_json_ld_remote_context_is_never_fetched(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    app.put(
        "/context.jsonld",
        b'{"@context": {"dct": "http://purl.org/dc/terms/"}}',
        "application/ld+json",
    )
    doc = (
        f'{{"@context": "{server.url}context.jsonld", "@id": "https://data.example.org/d/1",'
        ' "@type": "http://www.w3.org/ns/dcat#Dataset", "dct:title": "x"}'
    )
    app.put("/remote-context.jsonld", doc.encode(), "application/ld+json")
    with pytest.raises(HarvestError) as caught:
        harvest(http, server.url + "remote-context.jsonld")
    assert caught.value.code == "parseError"
    assert app.hits("/context.jsonld") == 0


def test_rdf_xml_entity_bomb_is_refused(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    levels = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
    bomb = (
        f'<?xml version="1.0"?>\n<!DOCTYPE rdf:RDF [ <!ENTITY l0 "lol">{levels} ]>\n'
        '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
        ' xmlns:dct="http://purl.org/dc/terms/">'
        '<rdf:Description rdf:about="http://ex/a"><dct:title>&l9;</dct:title>'
        "</rdf:Description></rdf:RDF>"
    ).encode()
    app.put("/bomb.rdf", bomb, "application/rdf+xml")
    with pytest.raises(HarvestError) as caught:
        harvest(http, server.url + "bomb.rdf")
    assert caught.value.code == "unsafeInput"
    assert "expansion bomb" in caught.value.message


def test_rdf_xml_internal_string_entities_are_read(
    app: RdfFilesApp, server: PeerServer, http: HttpClient
) -> None:
    doc = (
        b'<?xml version="1.0"?>\n<!DOCTYPE rdf:RDF [\n'
        b'  <!ENTITY dcat "http://www.w3.org/ns/dcat#">\n]>\n'
        b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
        b'<rdf:Description rdf:about="http://ex/a"><rdf:type rdf:resource="&dcat;Dataset"/>'
        b"</rdf:Description></rdf:RDF>"
    )
    app.put("/entities.rdf", doc, "application/rdf+xml")
    records, listing = harvest(http, server.url + "entities.rdf")
    assert len(records) == 1 and listing.complete


def test_ssrf_guard_applies(app: RdfFilesApp, server: PeerServer) -> None:
    app.put_file("/dump.ttl", DATA / "catalogue.ttl", "text/turtle")
    guarded = HttpClient(HttpSettings(allow_private=False, retries=0))
    with pytest.raises(TransportError) as caught:
        harvest(guarded, server.url + "dump.ttl")
    assert caught.value.code == "blockedAddress"
    assert app.hits("/dump.ttl") == 0


@pytest.mark.parametrize(
    "options",
    [
        {"format": "n3"},
        {"force_format": True},
        {"max_pages": 0},
        {"check_total": "yes"},
        {"page_size": 10},
    ],
)
def test_invalid_options_are_config_errors(options: dict[str, Any]) -> None:
    source = SourceConfig(name="dump", type="rdf-dump", url="https://x.org/d.ttl", options=options)
    with pytest.raises(ConfigError):
        RdfDumpHarvester.check_config(source)
