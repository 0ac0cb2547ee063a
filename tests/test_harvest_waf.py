"""The waf and gemini-doc harvesters against local servers (aggregator.demo.peers.waf)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

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
from aggregator.demo.peers.gemini_samples import bundled_gemini_records, generate_gemini_record
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.waf import WafApp
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.gemini import GeminiDocHarvester, record_facts
from aggregator.harvest.waf import WafHarvester
from aggregator.harvest.waf._listing import folder_url, read_listing
from aggregator.net.client import HttpClient
from aggregator.plugin import harvesters

MARCH = datetime(2026, 3, 14, 9, 30, tzinfo=UTC)
NOT_GEMINI = (
    b'<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"/>'
)
MALFORMED = (
    b"<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'><oops></gmd:MD_Metadata>"
)
XXE = (
    b'<?xml version="1.0"?><!DOCTYPE gmd:MD_Metadata [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
    b"<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'>&xxe;</gmd:MD_Metadata>"
)
BOMB = (
    b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]>'
    b"<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'>&b;</gmd:MD_Metadata>"
)


def fill(app: WafApp) -> None:
    for name, doc in bundled_gemini_records():
        app.put(name, doc, MARCH)
    app.put("README.rdf", NOT_GEMINI, MARCH)


@pytest.fixture
def app() -> WafApp:
    waf = WafApp()
    fill(waf)
    return waf


@pytest.fixture
def server(app: WafApp) -> Iterator[PeerServer]:
    with PeerServer(app) as running:
        yield running


@pytest.fixture
def http() -> Iterator[HttpClient]:
    settings = HttpSettings(allow_private=True, retries=0, timeout=5.0, max_bytes=200_000)
    with HttpClient(settings) as client:
        yield client


def harvest(
    http: HttpClient,
    url: str,
    kind: type[WafHarvester] | type[GeminiDocHarvester] = WafHarvester,
    checkpoint: str | None = None,
    up_to_date: Any = None,
    **options: Any,
) -> tuple[list[RawRecord], Listing]:
    source = SourceConfig(name="w", type=kind.name, url=url, format="iso19139", options=options)
    harvester = kind(source, http.session(source))
    listing = Listing(incremental=checkpoint is not None)
    request = HarvestRequest(
        full=False, checkpoint=checkpoint, cancel=threading.Event(), up_to_date=up_to_date
    )
    return list(harvester.list_records(request, listing)), listing


def test_registered() -> None:
    assert harvesters.get("waf") is WafHarvester
    assert harvesters.get("gemini-doc") is GeminiDocHarvester


@pytest.mark.parametrize("style", ["apache", "table", "plain"])
@pytest.mark.parametrize("path", ["waf/", "waf", "waf/index.html"])
def test_waf_lists_the_gemini_files_and_skips_the_rest(
    app: WafApp, server: PeerServer, http: HttpClient, style: Any, path: str
) -> None:
    app.style = style
    records, listing = harvest(http, server.url + path)
    samples = dict(bundled_gemini_records())
    assert [r.url for r in records] == [server.url + "waf/" + n for n in sorted(samples)]
    for record in records:
        name = (record.url or "").rsplit("/", 1)[-1]
        assert record.payload == samples[name]  # byte for byte
        assert record.local_id == record_facts(parse_xml(samples[name])).file_identifier
        assert record.format == "iso19139"
    assert listing.complete and listing.allows_withdrawal
    assert any("README.rdf: not a GEMINI document" in n for n in listing.notes)
    # nothing outside the folder was requested: no parent, subfolder, sort link, other host
    assert set(app.hits) <= {"/waf", "/waf/", "/waf/index.html", *(f"/waf/{n}" for n in app.files)}
    assert app.hits["/waf/subfolder/"] == 0


def test_listing_rules() -> None:
    body = b"""<html><body>
      <a href="a.xml">a</a> <a href="a.xml">again</a> <a href="../up.xml">up</a>
      <a href="sub/b.xml">sub</a> <a href="c.xml?x=1">q</a> <a href="d.xml#x">frag</a>
      <a href="mailto:x@example.org">mail</a> <a href="http://other/e.xml">abs</a>
      <a href="my%20record.xml">spaces</a> <a>no href</a></body></html>"""
    entries = read_listing(body, "http://h/waf/index.html")
    assert [(e.name, e.url) for e in entries] == [
        ("a.xml", "http://h/waf/a.xml"),
        ("my record.xml", "http://h/waf/my%20record.xml"),
    ]
    assert folder_url("http://h/waf") == "http://h/waf/"
    assert folder_url("http://h/waf/") == "http://h/waf/"
    assert folder_url("http://h/waf/index.html") == "http://h/waf/index.html"


def test_listing_without_locators_is_an_error(
    app: WafApp, server: PeerServer, http: HttpClient
) -> None:
    app.files.clear()
    with pytest.raises(HarvestError, match="no metadata file links"):
        harvest(http, server.url + "waf/")


def test_unreachable_waf_is_an_error(http: HttpClient) -> None:
    with PeerServer(WafApp()) as gone:
        url = gone.url + "waf/"
    with pytest.raises(TransportError):
        harvest(http, url)


def test_listing_dates_skip_unchanged_files(
    app: WafApp, server: PeerServer, http: HttpClient
) -> None:
    _, first = harvest(http, server.url + "waf/")
    held: set[str] = set()

    def up_to_date(listed: Any) -> frozenset[str]:
        return frozenset(i for i, _ in listed if i in held)

    # the store holds everything: nothing is fetched again, everything is listed
    held.update(record_facts(parse_xml(d)).file_identifier for _, d in bundled_gemini_records())
    before = dict(app.hits)
    records, listing = harvest(
        http, server.url + "waf/", checkpoint=first.next_checkpoint, up_to_date=up_to_date
    )
    assert len(records) == 3 and all(r.payload_omitted for r in records)
    assert listing.allows_withdrawal
    fetched = {p: n - before.get(p, 0) for p, n in app.hits.items() if p.endswith(".xml")}
    assert fetched == {
        "/waf/dataset-flood-zones.xml": 0,
        "/waf/series-river-levels.xml": 0,
        "/waf/service-flood-wms.xml": 0,
    }
    # one file changes its date: only it is fetched again
    name = "series-river-levels.xml"
    app.files[name].modified = datetime(2026, 4, 1, tzinfo=UTC)
    records, _ = harvest(
        http, server.url + "waf/", checkpoint=listing.next_checkpoint, up_to_date=up_to_date
    )
    assert [r.payload_omitted for r in records] == [True, False, True]
    assert app.hits["/waf/" + name] == 2


def test_plain_listing_has_no_dates_and_fetches_every_time(
    app: WafApp, server: PeerServer, http: HttpClient
) -> None:
    app.style = "plain"
    _, first = harvest(http, server.url + "waf/")
    records, _ = harvest(
        http,
        server.url + "waf/",
        checkpoint=first.next_checkpoint,
        up_to_date=lambda listed: frozenset(i for i, _ in listed),
    )
    assert not any(r.payload_omitted for r in records)


@pytest.mark.parametrize(
    ("body", "error"),
    [(MALFORMED, ParseError), (XXE, UnsafeInputError), (BOMB, UnsafeInputError)],
)
def test_malformed_or_hostile_files_are_passed_on_for_the_pipeline_to_reject(
    app: WafApp, server: PeerServer, http: HttpClient, body: bytes, error: type[Exception]
) -> None:
    app.put("zz-bad.xml", body, MARCH)
    records, listing = harvest(http, server.url + "waf/")
    bad = records[-1]
    assert bad.payload == body and bad.local_id == server.url + "waf/zz-bad.xml"
    with pytest.raises(error):
        parse_xml(bad.payload)
    assert b"root:" not in bad.payload
    assert any(n.startswith("zz-bad.xml: ") for n in listing.notes)
    assert listing.complete  # the file was listed and read: it is that record's error


def test_a_bad_file_keeps_the_identifier_it_had(
    app: WafApp, server: PeerServer, http: HttpClient
) -> None:
    _, first = harvest(http, server.url + "waf/")
    app.put("dataset-flood-zones.xml", MALFORMED, MARCH)
    records, _ = harvest(http, server.url + "waf/", checkpoint=first.next_checkpoint)
    assert records[0].payload == MALFORMED
    assert records[0].local_id == "6f3c2a1e-9b4d-4c1a-8e2f-0d5b7a9c1e01"


@pytest.mark.parametrize("trouble", ["status", "huge"])
def test_a_file_that_cannot_be_fetched_truncates_the_listing(
    app: WafApp, server: PeerServer, http: HttpClient, trouble: str
) -> None:
    if trouble == "status":
        app.put("gone.xml", b"", MARCH, status=404)
    else:
        app.put("huge.xml", generate_gemini_record(1) + b" " * 300_000, MARCH)
    records, listing = harvest(http, server.url + "waf/")
    assert len(records) == 3
    assert listing.truncated_reason == "1 file(s) of the folder could not be fetched"
    assert not listing.allows_withdrawal
    assert any("404" in n or "cap" in n for n in listing.notes)


# -- single GEMINI document ---------------------------------------------------------------------
def test_single_document(app: WafApp, server: PeerServer, http: HttpClient) -> None:
    records, listing = harvest(
        http, server.url + "waf/service-flood-wms.xml", kind=GeminiDocHarvester
    )
    (record,) = records
    assert record.payload == dict(bundled_gemini_records())["service-flood-wms.xml"]
    assert record.local_id == "c7e9a1b3-5d7f-4a9b-8c1d-3e5f7a9b1c03"
    assert record.datestamp == datetime(2026, 1, 20, tzinfo=UTC)
    assert listing.complete


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (NOT_GEMINI, "not a GEMINI document"),
        (MALFORMED, "not a well-formed XML document"),
        (XXE, "DOCTYPE declaration is refused"),
    ],
)
def test_single_document_errors(
    app: WafApp, server: PeerServer, http: HttpClient, body: bytes, message: str
) -> None:
    app.put("one.xml", body, MARCH)
    with pytest.raises(HarvestError, match=message):
        harvest(http, server.url + "waf/one.xml", kind=GeminiDocHarvester)


def test_single_document_unreachable(app: WafApp, server: PeerServer, http: HttpClient) -> None:
    with pytest.raises(TransportError, match="404"):
        harvest(http, server.url + "waf/missing.xml", kind=GeminiDocHarvester)


@pytest.mark.parametrize("kind", [WafHarvester, GeminiDocHarvester])
def test_url_must_be_http(kind: Any) -> None:
    with pytest.raises(ConfigError, match="http"):
        kind.check_config(SourceConfig(name="x", type=kind.name, url="file:///etc/passwd"))


def test_xinclude_in_a_file_is_never_followed(
    app: WafApp, server: PeerServer, http: HttpClient
) -> None:
    other = WafApp(folder="/private/")
    other.put("secret.txt", b"TOP-SECRET", MARCH, content_type="text/plain")
    with PeerServer(other) as elsewhere:
        body = generate_gemini_record(7).replace(
            b"<gmd:language>",
            b'<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="'
            + (elsewhere.url + "private/secret.txt").encode()
            + b'" parse="text"/><gmd:language>',
            1,
        )
        app.put("zz-xinclude.xml", body, MARCH)
        records, _ = harvest(http, server.url + "waf/")
    (included,) = [r for r in records if (r.url or "").endswith("zz-xinclude.xml")]
    assert included.payload == body
    root = parse_xml(included.payload)
    assert root.find(".//{http://www.w3.org/2001/XInclude}include") is not None
    assert other.hits["/private/secret.txt"] == 0  # the parser fetched nothing
