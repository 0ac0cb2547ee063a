"""OaiPmhHarvester against the real fixture peer on 127.0.0.1 (and a few static pages)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest
from pyoxigraph import RdfFormat, parse

from aggregator.config import HttpSettings, SourceConfig
from aggregator.core.errors import (
    ConfigError,
    HarvestError,
    ParseError,
    TransportError,
    UnsafeInputError,
)
from aggregator.core.models import RawRecord
from aggregator.core.xml import parse_xml
from aggregator.demo.peers.oaipmh import DAY, OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem, generated_items
from aggregator.demo.peers.server import PeerServer, respond
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.oaipmh import OaiPmhHarvester, parse_datestamp
from aggregator.net.client import HttpClient

DATA = Path(__file__).parent / "data" / "oaipmh"
T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)
NOW = datetime(2024, 6, 1, 9, 30, 15, tzinfo=UTC)


def rdf(i: int) -> bytes:
    return (
        '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
        'xmlns:dct="http://purl.org/dc/terms/">'
        f'<rdf:Description rdf:about="https://data.example.org/dataset/{i}">'
        f"<dct:title>Dataset {i}</dct:title></rdf:Description></rdf:RDF>"
    ).encode()


def make_items(n: int = 25) -> MemoryItems:
    return MemoryItems(
        OaiItem(
            f"oai:example.org:{i}",
            T0 + timedelta(hours=i),
            (("even",) if i % 2 == 0 else ("odd",)),
            metadata=rdf(i),
        )
        for i in range(n)
    )


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def peer(clock: Clock) -> OaiPmhPeer:
    return OaiPmhPeer(make_items(), page_size=10, clock=clock)


@pytest.fixture
def server(peer: OaiPmhPeer) -> Iterator[PeerServer]:
    with PeerServer(peer) as srv:
        yield srv


def client(sleep: Callable[[float], None] | None = None, **settings: Any) -> HttpClient:
    values: dict[str, Any] = {
        "allow_private": True,
        "backoff": 0.01,
        "max_backoff": 0.1,
        "timeout": 5.0,
    }
    values.update(settings)
    return HttpClient(HttpSettings(**values), sleep=sleep or (lambda _: None))


def harvester(
    url: str, http: HttpClient | None = None, fmt: str = "dcat", **options: Any
) -> OaiPmhHarvester:
    source = SourceConfig(name="portal", type="oai-pmh", url=url, format=fmt, options=options)
    OaiPmhHarvester.check_config(source)
    return OaiPmhHarvester(source, http or client())


def run(
    h: OaiPmhHarvester, checkpoint: str | None = None, full: bool = True
) -> tuple[list[RawRecord], Listing]:
    request = HarvestRequest(full=full, checkpoint=checkpoint)
    listing = Listing(incremental=checkpoint is not None and not full)
    return list(h.list_records(request, listing)), listing


def verbs(peer: OaiPmhPeer) -> list[str]:
    return [args.get("verb", "") for _, args in peer.requests]


def test_full_harvest_over_pages(server: PeerServer, peer: OaiPmhPeer) -> None:
    records, listing = run(harvester(server.url))
    assert [r.local_id for r in records] == [f"oai:example.org:{i}" for i in range(25)]
    assert listing.complete
    assert listing.allows_withdrawal
    assert listing.truncated_reason is None
    assert (listing.pages, listing.expected_total, listing.seen) == (3, 25, 25)
    assert listing.next_checkpoint == "2024-06-01T09:30:15Z"  # the first responseDate
    first = records[0]
    assert first.source == "portal"
    assert first.format == "dcat"
    assert first.media_type == "application/rdf+xml"
    assert first.payload == rdf(0)  # the metadata child exactly as the provider embedded it
    assert first.datestamp == T0
    assert first.datestamp.tzinfo is not None
    assert not first.deleted
    assert (
        first.url
        == f"{server.url}?verb=GetRecord&identifier=oai%3Aexample.org%3A0&metadataPrefix=dcat_ap"
    )
    assert verbs(peer) == ["Identify", "ListRecords", "ListRecords", "ListRecords"]


def test_payload_of_a_real_record_is_kept_byte_for_byte(
    server: PeerServer, peer: OaiPmhPeer
) -> None:
    body = (DATA / "dataset-air-quality.rdf").read_bytes().strip()
    peer.items = MemoryItems([OaiItem("oai:example.org:air", T0, metadata=body)])
    records, listing = run(harvester(server.url))
    assert listing.complete
    assert records[0].payload == body
    quads = list(parse(records[0].payload, format=RdfFormat.RDF_XML))
    assert len(quads) == 25


def test_namespaces_declared_on_the_envelope_come_along() -> None:
    with static_server(
        {"Identify": "Identify-day.xml", "ListRecords": "ListRecords-inherited-ns.xml"}
    ) as srv:
        records, listing = run(harvester(srv.url))
    assert listing.complete
    live, gone = records
    root = parse_xml(live.payload)
    assert root.tag == "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}RDF"
    assert b"http://www.openarchives.org/OAI/2.0/" not in live.payload  # unused: left behind
    assert len(list(parse(live.payload, format=RdfFormat.RDF_XML))) == 2
    assert gone.deleted
    assert gone.payload == b""
    assert gone.datestamp == datetime(2024, 5, 2, tzinfo=UTC)
    assert listing.next_checkpoint == "2024-05-06"  # day granularity


def test_incremental_harvest_with_checkpoint(
    server: PeerServer, peer: OaiPmhPeer, clock: Clock
) -> None:
    _, first = run(harvester(server.url))
    checkpoint = first.next_checkpoint
    assert checkpoint == "2024-06-01T09:30:15Z"
    items = peer.items
    assert isinstance(items, MemoryItems)
    items.put(OaiItem("oai:example.org:3", NOW + timedelta(minutes=5), ("odd",), metadata=rdf(333)))
    items.put(OaiItem("oai:example.org:new", NOW + timedelta(minutes=6), metadata=rdf(99)))
    items.delete("oai:example.org:4", when=NOW + timedelta(minutes=7))
    clock.now = NOW + timedelta(hours=1)
    records, listing = run(harvester(server.url), checkpoint=checkpoint, full=False)
    assert [(r.local_id, r.deleted) for r in records] == [
        ("oai:example.org:3", False),
        ("oai:example.org:new", False),
        ("oai:example.org:4", True),
    ]
    assert records[0].payload == rdf(333)
    assert listing.complete
    assert listing.incremental
    assert not listing.allows_withdrawal
    assert listing.next_checkpoint == "2024-06-01T10:30:15Z"
    assert peer.requests[-1][1] == {
        "verb": "ListRecords",
        "metadataPrefix": "dcat_ap",
        "from": checkpoint,
    }


def test_incremental_with_nothing_new_is_complete_and_empty(
    server: PeerServer, clock: Clock
) -> None:
    clock.now = NOW + timedelta(days=1)
    records, listing = run(harvester(server.url), checkpoint="2024-06-01T09:30:15Z", full=False)
    assert records == []
    assert listing.complete
    assert listing.expected_total == 0
    assert listing.next_checkpoint == "2024-06-02T09:30:15Z"


def test_full_request_ignores_the_checkpoint(server: PeerServer, peer: OaiPmhPeer) -> None:
    records, listing = run(harvester(server.url), checkpoint="2030-01-01T00:00:00Z", full=True)
    assert len(records) == 25
    assert listing.allows_withdrawal
    assert "from" not in peer.requests[-1][1]


def test_checkpoint_follows_day_granularity(clock: Clock) -> None:
    peer = OaiPmhPeer(make_items(), page_size=10, granularity=DAY, clock=clock)
    with PeerServer(peer) as srv:
        _, first = run(harvester(srv.url))
        assert first.next_checkpoint == "2024-06-01"
        records, listing = run(harvester(srv.url), checkpoint="2024-03-02T07:00:00Z", full=False)
    froms = [args["from"] for _, args in peer.requests if "from" in args]
    assert froms == ["2024-03-02"]  # cut to what the repository accepts
    assert [r.local_id for r in records] == [f"oai:example.org:{i}" for i in range(12, 25)]
    assert listing.complete


def test_set_option_and_post(server: PeerServer, peer: OaiPmhPeer) -> None:
    records, listing = run(harvester(server.url, set="odd", method="POST"))
    assert [r.local_id for r in records] == [f"oai:example.org:{i}" for i in range(1, 25, 2)]
    assert listing.complete
    assert (listing.pages, listing.expected_total) == (2, 12)
    assert {m for m, _ in peer.requests} == {"POST"}


def test_deleted_headers(server: PeerServer, peer: OaiPmhPeer) -> None:
    items = peer.items
    assert isinstance(items, MemoryItems)
    items.delete("oai:example.org:0", when=T0 - timedelta(days=1))
    records, listing = run(harvester(server.url))
    assert records[0].local_id == "oai:example.org:0"
    assert records[0].deleted
    assert records[0].payload == b""
    assert records[0].datestamp == T0 - timedelta(days=1)
    assert listing.complete
    assert listing.seen == 25


def test_retry_after_is_honoured(server: PeerServer, peer: OaiPmhPeer) -> None:
    slept: list[float] = []
    peer.faults.unavailable, peer.faults.retry_after = 2, 7
    records, listing = run(harvester(server.url, client(slept.append, max_backoff=30.0)))
    assert slept == [7.0, 7.0]
    assert len(records) == 25
    assert listing.complete


def test_unavailable_for_good_is_a_transport_error(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.unavailable = 100
    with pytest.raises(TransportError) as err:
        run(harvester(server.url, client(retries=2)))
    assert err.value.status == 503


def test_oai_error_on_a_later_page(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.error_on_page = 2
    h = harvester(server.url)
    listing = Listing(incremental=False)
    got: list[RawRecord] = []
    with pytest.raises(HarvestError) as err:
        got.extend(h.list_records(HarvestRequest(full=True, checkpoint=None), listing))
    assert err.value.code == "badResumptionToken"
    assert "page 2" in err.value.message
    assert len(got) == 10
    assert not listing.complete


@pytest.mark.parametrize(
    "code", ["badArgument", "cannotDisseminateFormat", "noSetHierarchy", "customError"]
)
def test_oai_error_codes_are_kept(server: PeerServer, peer: OaiPmhPeer, code: str) -> None:
    peer.faults.error_on_page, peer.faults.error_code = 1, code
    with pytest.raises(HarvestError) as err:
        run(harvester(server.url))
    assert err.value.code == code


def test_unsupported_prefix(server: PeerServer) -> None:
    with pytest.raises(HarvestError) as err:
        run(harvester(server.url, metadata_prefix="oai_dc"))
    assert err.value.code == "cannotDisseminateFormat"


def test_no_records_match_is_an_empty_complete_listing(server: PeerServer) -> None:
    records, listing = run(harvester(server.url, set="none"))
    assert records == []
    assert listing.complete
    assert listing.allows_withdrawal
    assert (listing.pages, listing.expected_total, listing.seen) == (1, 0, 0)
    assert listing.next_checkpoint == "2024-06-01T09:30:15Z"


def test_server_cap_is_a_truncated_listing(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.cap = 15
    records, listing = run(harvester(server.url))
    assert len(records) == 20
    assert not listing.complete
    assert not listing.allows_withdrawal
    assert listing.truncated_reason is not None
    assert "completeListSize was 25" in listing.truncated_reason


def test_count_mismatch_when_items_vanish_mid_listing(server: PeerServer, peer: OaiPmhPeer) -> None:
    items = peer.items
    assert isinstance(items, MemoryItems)
    h = harvester(server.url)
    listing = Listing(incremental=False)
    walk = h.list_records(HarvestRequest(full=True, checkpoint=None), listing)
    got = [next(walk)]
    items.remove("oai:example.org:20")  # the provider forgets an item between pages
    got.extend(walk)
    assert len(got) == 24
    assert not listing.complete
    assert "24 records" in (listing.truncated_reason or "")


def test_token_loop(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.repeat_token_on_page = 2
    records, listing = run(harvester(server.url))
    assert len(records) == 20
    assert not listing.complete
    assert "loop" in (listing.truncated_reason or "")
    assert verbs(peer).count("ListRecords") == 2


def test_malformed_page_stops_the_listing(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.malformed_page = 2
    listing = Listing(incremental=False)
    got: list[RawRecord] = []
    with pytest.raises(HarvestError) as err:
        got.extend(
            harvester(server.url).list_records(HarvestRequest(full=True, checkpoint=None), listing)
        )
    assert err.value.code == "malformedResponse"
    assert len(got) == 10
    assert not listing.complete


def test_malformed_record_breaks_its_page(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.hostile_identifier, peer.faults.hostile_kind = "oai:example.org:12", "malformed"
    with pytest.raises(HarvestError) as err:
        run(harvester(server.url))
    assert err.value.code == "malformedResponse"


def test_hostile_entity_is_not_expanded(
    server: PeerServer, peer: OaiPmhPeer, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE")
    peer.faults.hostile_identifier = "oai:example.org:1"
    peer.faults.hostile_entity_url = secret.as_uri()
    records, listing = run(harvester(server.url))
    assert len(records) == 25
    assert listing.complete
    hostile = records[1]
    assert b"&xxe;" in hostile.payload
    assert b"TOP-SECRET" not in hostile.payload
    assert all(b"TOP-SECRET" not in r.payload for r in records)
    with pytest.raises(ParseError):  # the mapper's parser reports it, for this record alone
        parse_xml(hostile.payload)
    assert records[2].payload == rdf(2)
    assert any("DOCTYPE" in note for note in listing.notes)


def test_escaped_hostile_metadata_is_passed_on_as_bytes(
    server: PeerServer, peer: OaiPmhPeer
) -> None:
    peer.faults.hostile_identifier, peer.faults.hostile_kind = "oai:example.org:1", "escaped"
    records, listing = run(harvester(server.url))
    assert listing.complete
    payload = records[1].payload
    assert payload.startswith(b'<?xml version="1.0"?><!DOCTYPE rdf:RDF [<!ENTITY xxe SYSTEM')
    with pytest.raises(UnsafeInputError):
        parse_xml(payload)


def test_billion_laughs_page_is_refused() -> None:
    """Entities are never expanded, and libxml2's amplification guard refuses the page."""
    levels = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
    page = (
        f'<?xml version="1.0"?><!DOCTYPE OAI-PMH [<!ENTITY l0 "lol">{levels}]>'
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>2024-05-06T07:08:09Z'
        '</responseDate><request verb="ListRecords">http://x/</request><ListRecords><record><header>'
        "<identifier>oai:x:1</identifier><datestamp>2024-05-01</datestamp></header><metadata>"
        '<r xmlns="urn:x">&l9;</r></metadata></record></ListRecords></OAI-PMH>'
    ).encode()
    pages = {"Identify": "Identify-day.xml", "ListRecords": page}
    with static_server(pages) as srv, pytest.raises(HarvestError) as err:
        run(harvester(srv.url))
    assert err.value.code == "malformedResponse"
    assert "amplification" in err.value.message


def test_endless_empty_pages_are_a_truncated_listing() -> None:
    counter = iter(range(1_000_000))

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if "Identify" in environ.get("QUERY_STRING", ""):
            return respond(
                start_response, 200, (DATA / "Identify-day.xml").read_bytes(), "text/xml"
            )
        body = (
            '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>'
            '2024-05-06T07:08:09Z</responseDate><request verb="ListRecords">http://x/</request>'
            f"<ListRecords><resumptionToken>t{next(counter)}</resumptionToken></ListRecords>"
            "</OAI-PMH>"
        )
        return respond(start_response, 200, body.encode(), "text/xml")

    with PeerServer(app) as srv:
        records, listing = run(harvester(srv.url))
    assert records == []
    assert listing.pages == 50
    assert "empty pages" in (listing.truncated_reason or "")
    assert next(counter) == 50  # the page that tripped the guard was the last one requested


def test_repository_without_deletions_is_noted(clock: Clock) -> None:
    with PeerServer(OaiPmhPeer(make_items(3), deleted_record="no", clock=clock)) as srv:
        _, listing = run(harvester(srv.url))
    assert listing.complete
    assert any("deleted" in note for note in listing.notes)


def test_cancel_stops_and_truncates_without_requesting_further_pages(
    server: PeerServer, peer: OaiPmhPeer
) -> None:
    request = HarvestRequest(full=True, checkpoint=None, cancel=threading.Event())
    listing = Listing(incremental=False)
    got = []
    for record in harvester(server.url).list_records(request, listing):
        got.append(record)
        if len(got) == 12:
            request.cancel.set()
    assert len(got) == 12
    assert listing.truncated_reason == "cancelled"
    assert not listing.complete
    wait_for(fetching_threads_ended)  # the request sent ahead has been answered by now
    assert verbs(peer).count("ListRecords") == 3  # page 3 went out while page 2 was read ...
    assert listing.pages == 2  # ... and was dropped unread


def test_the_next_page_is_requested_while_the_current_one_is_read(
    server: PeerServer, peer: OaiPmhPeer
) -> None:
    walk = harvester(server.url).list_records(
        HarvestRequest(full=True, checkpoint=None), Listing(incremental=False)
    )
    first = next(walk)
    assert first.local_id == "oai:example.org:0"
    wait_for(lambda: verbs(peer).count("ListRecords") == 2)  # page 2, one page ahead
    page_one = [first] + [next(walk) for _ in range(9)]
    assert page_one[-1].local_id == "oai:example.org:9"
    # page 1 read, the walk suspended: nothing but page 2 can have been requested
    assert verbs(peer).count("ListRecords") == 2
    assert next(walk).local_id == "oai:example.org:10"
    wait_for(lambda: verbs(peer).count("ListRecords") == 3)  # now on page 2: page 3 ahead
    rest = list(walk)
    assert len(rest) == 14
    assert verbs(peer) == ["Identify", "ListRecords", "ListRecords", "ListRecords"]
    tokens = [args.get("resumptionToken") for _, args in peer.requests]
    assert tokens[:2] == [None, None] and len(set(tokens[2:])) == 2  # each page asked once


def test_page_fetched_ahead_is_not_requested_beyond_the_last_page(
    server: PeerServer, peer: OaiPmhPeer
) -> None:
    peer.faults.cap = 15  # page 2 comes without a token: the listing ends there
    records, listing = run(harvester(server.url))
    assert len(records) == 20
    assert verbs(peer).count("ListRecords") == 2
    peer.requests.clear()
    records, listing = run(harvester(server.url, set="odd"))  # 12 records, 2 pages of 10
    assert listing.complete
    assert verbs(peer).count("ListRecords") == 2


def test_runaway_guard_stops_requests_at_the_page_that_trips_it() -> None:
    """completeListSize says 1, yet every page brings 100 records and a fresh token."""
    served: list[int] = []

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if "Identify" in environ.get("QUERY_STRING", ""):
            return respond(
                start_response, 200, (DATA / "Identify-day.xml").read_bytes(), "text/xml"
            )
        n = len(served)
        served.append(n)
        records = "".join(
            f"<record><header><identifier>oai:x:{n}-{i}</identifier>"
            "<datestamp>2024-05-01</datestamp></header><metadata>"
            f'<r xmlns="urn:x">{i}</r></metadata></record>'
            for i in range(100)
        )
        body = (
            '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>'
            '2024-05-06T07:08:09Z</responseDate><request verb="ListRecords">http://x/</request>'
            f'<ListRecords>{records}<resumptionToken completeListSize="1">t{n}</resumptionToken>'
            "</ListRecords></OAI-PMH>"
        )
        return respond(start_response, 200, body.encode(), "text/xml")

    with PeerServer(app) as srv:
        records, listing = run(harvester(srv.url))
        wait_for(fetching_threads_ended)
    assert len(records) == 1100
    assert "far beyond completeListSize 1" in (listing.truncated_reason or "")
    assert len(served) == 11  # the eleventh page tripped the guard: no twelfth was asked for


@pytest.mark.parametrize("prefixed", [False, True])
def test_pages_written_with_an_oai_prefix_are_walked_alike(prefixed: bool) -> None:
    """With ``oai:`` prefixes the token cannot be read from the raw page: the next page is
    asked for once the page is parsed. Either way every page is asked for exactly once."""
    asked: list[str] = []
    p = "oai:" if prefixed else ""
    ns = (
        'xmlns:oai="http://www.openarchives.org/OAI/2.0/"'
        if prefixed
        else ('xmlns="http://www.openarchives.org/OAI/2.0/"')
    )

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        query = environ.get("QUERY_STRING", "")
        if "Identify" in query:
            return respond(
                start_response, 200, (DATA / "Identify-day.xml").read_bytes(), "text/xml"
            )
        asked.append(query)
        n = int(parse_qs(query).get("resumptionToken", ["t0"])[0][1:])
        token = f"t{n + 1}" if n < 2 else ""
        records = "".join(
            f"<{p}record><{p}header><{p}identifier>oai:x:{n}-{i}</{p}identifier>"
            f"<{p}datestamp>2024-05-01</{p}datestamp></{p}header><{p}metadata>"
            f'<r xmlns="urn:x">{i}</r></{p}metadata></{p}record>'
            for i in range(3)
        )
        body = (
            f"<{p}OAI-PMH {ns}><{p}responseDate>2024-05-06T07:08:09Z</{p}responseDate>"
            f'<{p}request verb="ListRecords">http://x/</{p}request><{p}ListRecords>{records}'
            f'<{p}resumptionToken completeListSize="9">{token}</{p}resumptionToken>'
            f"</{p}ListRecords></{p}OAI-PMH>\n"
        )
        return respond(start_response, 200, body.encode(), "text/xml")

    with PeerServer(app) as srv:
        records, listing = run(harvester(srv.url))
        wait_for(fetching_threads_ended)
    assert [r.local_id for r in records] == [f"oai:x:{n}-{i}" for n in range(3) for i in range(3)]
    assert records[0].payload == b'<r xmlns="urn:x">0</r>'
    assert listing.complete
    assert len(asked) == 3


def test_transport_error_of_the_page_fetched_ahead_comes_after_the_current_page(
    peer: OaiPmhPeer,
) -> None:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if "resumptionToken" in environ.get("QUERY_STRING", ""):
            return respond(start_response, 500, b"broken")
        return peer(environ, start_response)

    listing = Listing(incremental=False)
    got: list[RawRecord] = []
    with PeerServer(app) as srv:
        walk = harvester(srv.url, client(retries=0)).list_records(
            HarvestRequest(full=True, checkpoint=None), listing
        )
        with pytest.raises(TransportError) as err:
            got.extend(walk)
    assert err.value.status == 500
    assert len(got) == 10  # all of page 1, then the error of page 2
    assert listing.pages == 1
    assert not listing.complete


def test_cancel_while_waiting_for_the_next_page(peer: OaiPmhPeer) -> None:
    """The walk does not sit out a slow page once cancelled: it stops waiting for it."""
    release = threading.Event()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if "resumptionToken" in environ.get("QUERY_STRING", ""):
            release.wait(timeout=30)
        return peer(environ, start_response)

    request = HarvestRequest(full=True, checkpoint=None, cancel=threading.Event())
    listing = Listing(incremental=False)
    with PeerServer(app) as srv:
        got = []
        for record in harvester(srv.url).list_records(request, listing):
            got.append(record)
            if len(got) == 10:  # the end of page 1: page 2 is held by the server
                threading.Timer(0.05, request.cancel.set).start()
        returned_while_held = not release.is_set()
        release.set()
    assert returned_while_held
    assert len(got) == 10
    assert listing.truncated_reason == "cancelled"
    assert not listing.complete


def test_abandoned_walk_ends_its_fetching_thread(server: PeerServer) -> None:
    walk = harvester(server.url).list_records(
        HarvestRequest(full=True, checkpoint=None), Listing(incremental=False)
    )
    next(walk)
    walk.close()
    wait_for(fetching_threads_ended)


@pytest.mark.parametrize(
    "identifier",
    ["oai:example.org:0", "a b/c?d=e&f#g%h+i~j_k.l-m", "oai:exämple.org:ü/ß", "\t\x7f"],
)
def test_record_url_is_urlencoded(identifier: str) -> None:
    h = harvester("https://oai.example.org/oai", metadata_prefix="dcat_ap")
    query = urlencode({"verb": "GetRecord", "identifier": identifier, "metadataPrefix": "dcat_ap"})
    assert h.record_url(identifier) == f"https://oai.example.org/oai?{query}"


def fetching_threads_ended() -> bool:
    return not [t for t in threading.enumerate() if t.name == "oai-pmh-pages"]


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll until ``condition()`` holds (a guard against hanging, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_identify_once_per_harvester(server: PeerServer, peer: OaiPmhPeer) -> None:
    h = harvester(server.url)
    run(h)
    run(h, checkpoint="2024-03-01T00:00:00Z", full=False)
    assert verbs(peer).count("Identify") == 1


def test_slow_server_times_out(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.delay = 1.0
    with pytest.raises(TransportError):
        run(harvester(server.url, client(timeout=0.2, retries=0)))


def test_lazily_generated_repository() -> None:
    peer = OaiPmhPeer(generated_items(1_000), page_size=100)
    with PeerServer(peer) as srv:
        records, listing = run(harvester(srv.url, set="odd"))
    assert len(records) == 500
    assert listing.complete
    assert listing.pages == 5


def test_ssrf_guard_applies() -> None:
    h = harvester("http://127.0.0.1:9/oai", client(allow_private=False))
    with pytest.raises(TransportError) as err:
        run(h)
    assert err.value.code == "blockedAddress"


def test_oai_error_sent_with_http_400() -> None:
    pages = {
        "Identify": "Identify-day.xml",
        "ListRecords": (DATA / "badArgument-http400.xml").read_bytes(),
    }
    with static_server(pages, status=400) as srv, pytest.raises(HarvestError) as err:
        run(harvester(srv.url))
    assert err.value.code == "badArgument"


def test_identify_error_and_broken_identify() -> None:
    with static_server({"Identify": "badArgument-http400.xml"}) as srv:
        with pytest.raises(HarvestError) as err:
            run(harvester(srv.url))
        assert err.value.code == "badArgument"
    with static_server({"Identify": "ListRecords-inherited-ns.xml"}) as srv:
        with pytest.raises(HarvestError) as err:
            run(harvester(srv.url))
        assert err.value.code == "badIdentify"


def test_html_instead_of_oai() -> None:
    pages = {
        "Identify": "Identify-day.xml",
        "ListRecords": b"<html><body>Maintenance</body></html>",
    }
    with static_server(pages) as srv, pytest.raises(HarvestError) as err:
        run(harvester(srv.url))
    assert err.value.code == "notOaiPmh"


@pytest.mark.parametrize(
    ("options", "url", "message"),
    [
        ({"metadataprefix": "x"}, "https://oai.example.org/oai", "unknown option"),
        ({"metadata_prefix": "dcat ap"}, "https://oai.example.org/oai", "metadata_prefix"),
        ({"metadata_prefix": 3}, "https://oai.example.org/oai", "metadata_prefix"),
        ({"set": "a::b"}, "https://oai.example.org/oai", "set"),
        ({"method": "PUT"}, "https://oai.example.org/oai", "method"),
        ({}, "ftp://oai.example.org/oai", "http"),
        ({}, "https://oai.example.org/oai?verb=Identify", "query"),
    ],
)
def test_check_config(options: dict[str, Any], url: str, message: str) -> None:
    source = SourceConfig(name="bad", type="oai-pmh", url=url, options=options)
    with pytest.raises(ConfigError, match=message):
        OaiPmhHarvester.check_config(source)


def test_check_config_accepts_good_options() -> None:
    options = {"metadata_prefix": "dcat_ap", "set": "env:air", "method": "post"}
    OaiPmhHarvester.check_config(
        SourceConfig(name="ok", type="oai-pmh", url="https://x.org/oai", options=options)
    )


def test_registered_under_its_name() -> None:
    from aggregator.plugin import harvesters

    assert harvesters.get("oai-pmh") is OaiPmhHarvester


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01", datetime(2024, 5, 1, tzinfo=UTC)),
        ("2024-05-01T10:11:12Z", datetime(2024, 5, 1, 10, 11, 12, tzinfo=UTC)),
        ("2024-05-01T10:11:12.5Z", datetime(2024, 5, 1, 10, 11, 12, 500000, tzinfo=UTC)),
        ("2024-05-01T12:11:12+02:00", datetime(2024, 5, 1, 10, 11, 12, tzinfo=UTC)),
        ("yesterday", None),
        ("", None),
    ],
)
def test_parse_datestamp(text: str, expected: datetime | None) -> None:
    assert parse_datestamp(text) == expected


# -- static pages, in the sickle manner: responses named after the verb ----------------------
def static_server(pages: dict[str, str | bytes], status: int = 200) -> PeerServer:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        query = environ.get("QUERY_STRING", "")
        verb = next((p.split("=", 1)[1] for p in query.split("&") if p.startswith("verb=")), "")
        page = pages.get(verb)
        if page is None:
            return respond(start_response, 404, b"no such page")
        body = (DATA / page).read_bytes() if isinstance(page, str) else page
        code = 200 if verb == "Identify" else status
        return respond(start_response, code, body, "text/xml; charset=utf-8")

    return PeerServer(app)


def test_page_parser_never_opens_an_external_dtd(tmp_path: Path) -> None:
    """A page naming a local file as its DTD: the parser must not open it (a FIFO would hang)."""
    import os
    import threading

    from lxml import etree

    from aggregator.harvest.oaipmh._client import page_parser

    fifo = tmp_path / "dtd.fifo"
    os.mkfifo(fifo)
    page = (
        f'<?xml version="1.0"?><!DOCTYPE OAI-PMH SYSTEM "{fifo}">'
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>2024-01-01T00:00:00Z'
        "</responseDate></OAI-PMH>"
    ).encode()
    done = threading.Event()

    def parse() -> None:
        etree.fromstring(page, parser=page_parser())
        done.set()

    t = threading.Thread(target=parse, daemon=True)
    t.start()
    t.join(timeout=5)
    if not done.is_set():  # unblock the reader so the thread can end, then fail
        with open(fifo, "w") as fh:
            fh.write("")
    assert done.is_set(), "the parser opened the external DTD"


# -- where a page keeps its resumption token -------------------------------------------------
def _two_pages(token_xml: str) -> dict[str, bytes]:
    """Two ListRecords pages; the first carries the token as ``token_xml`` puts it."""

    def page(ids: range, token: str) -> bytes:
        records = "".join(
            f"<record><header><identifier>oai:t:{i}</identifier>"
            f"<datestamp>2024-05-01T10:00:0{i}Z</datestamp></header><metadata>"
            '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"/>'
            "</metadata></record>"
            for i in ids
        )
        return (
            '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
            "<responseDate>2024-05-06T07:08:09Z</responseDate>"
            '<request verb="ListRecords">http://127.0.0.1/oai</request>'
            f"<ListRecords>{token.replace('RECORDS', records)}</ListRecords></OAI-PMH>"
        ).encode()

    return {
        "": page(range(3), token_xml),
        "next-page": page(range(3, 5), 'RECORDS<resumptionToken completeListSize="5"/>'),
    }


@pytest.mark.parametrize(
    "token_xml",
    [
        'RECORDS<resumptionToken completeListSize="5">next-page</resumptionToken>',
        # not where OAI-PMH puts it (the last child), still a child of the verb element
        '<resumptionToken completeListSize="5">next-page</resumptionToken>RECORDS',
        # not a child of the verb element at all: found by searching the whole page
        'RECORDS<extra><resumptionToken completeListSize="5">next-page</resumptionToken></extra>',
    ],
    ids=["last-child", "first-child", "nested"],
)
def test_the_resumption_token_is_found_wherever_the_page_puts_it(token_xml: str) -> None:
    pages = _two_pages(token_xml)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        args = parse_qs(environ.get("QUERY_STRING", ""))
        if args.get("verb") == ["Identify"]:
            return respond(start_response, 200, (DATA / "Identify-day.xml").read_bytes())
        body = pages[args.get("resumptionToken", [""])[0]]
        return respond(start_response, 200, body, "text/xml; charset=utf-8")

    with PeerServer(app) as srv:
        records, listing = run(harvester(srv.url))
    assert [r.local_id for r in records] == [f"oai:t:{i}" for i in range(5)]
    assert listing.complete and listing.pages == 2
