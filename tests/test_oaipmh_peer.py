"""The OAI-PMH fixture server speaks OAI-PMH 2.0: checked with raw HTTP, sickle and pyoai."""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from lxml import etree

from aggregator.demo.peers.oaipmh import DAY, OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem, generated_items
from aggregator.demo.peers.server import PeerServer

NS = "http://www.openarchives.org/OAI/2.0/"
OAI = "{" + NS + "}"
DATA = Path(__file__).parent / "data" / "oaipmh"
T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)
UTC_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
VERBS = (
    "Identify",
    "ListMetadataFormats",
    "ListSets",
    "GetRecord",
    "ListIdentifiers",
    "ListRecords",
)


def rdf(i: int) -> bytes:
    return (
        '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
        'xmlns:dct="http://purl.org/dc/terms/">'
        f'<rdf:Description rdf:about="https://data.example.org/dataset/{i}">'
        f"<dct:title>Dataset {i} &amp; friends</dct:title></rdf:Description></rdf:RDF>"
    ).encode()


def make_items(n: int = 25) -> MemoryItems:
    return MemoryItems(
        OaiItem(
            f"oai:example.org:{i}",
            T0 + timedelta(hours=i),
            ("env:air",) if i % 2 == 0 else ("transport",),
            metadata=rdf(i),
        )
        for i in range(n)
    )


@pytest.fixture
def peer() -> OaiPmhPeer:
    return OaiPmhPeer(make_items(), page_size=10)


@pytest.fixture
def server(peer: OaiPmhPeer) -> Iterator[PeerServer]:
    with PeerServer(peer) as srv:
        yield srv


def check_envelope(root: etree._Element) -> None:
    """The parts of the OAI-PMH 2.0 schema every response must satisfy."""
    assert root.tag == OAI + "OAI-PMH"
    children = list(root)
    assert children[0].tag == OAI + "responseDate"
    assert UTC_STAMP.match(children[0].text or "")
    assert children[1].tag == OAI + "request"
    assert len(children) >= 3
    if children[2].tag == OAI + "error":
        assert all(c.tag == OAI + "error" and c.get("code") for c in children[2:])
    else:
        assert len(children) == 3
        assert children[2].tag in {OAI + v for v in VERBS}
        assert children[2].tag == OAI + (children[1].get("verb") or "")
    for element in root.iter(OAI + "datestamp"):
        assert UTC_STAMP.match(element.text or "") or re.match(
            r"^\d{4}-\d{2}-\d{2}$", element.text or ""
        )


def oai(server: PeerServer, method: str = "GET", **params: str) -> etree._Element:
    if method == "GET":
        resp = requests.get(server.url, params=params, timeout=5)
    else:
        resp = requests.post(server.url, data=params, timeout=5)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/xml")
    root = etree.fromstring(resp.content)
    check_envelope(root)
    return root


def error_code(root: etree._Element) -> str | None:
    error = root.find(OAI + "error")
    return None if error is None else error.get("code")


def identifiers(root: etree._Element) -> list[str]:
    return [e.text or "" for e in root.iter(OAI + "identifier")]


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_identify(server: PeerServer, method: str) -> None:
    root = oai(server, method, verb="Identify")
    ident = root.find(OAI + "Identify")
    assert ident is not None
    assert ident.findtext(OAI + "baseURL") == server.url
    assert ident.findtext(OAI + "protocolVersion") == "2.0"
    assert ident.findtext(OAI + "granularity") == "YYYY-MM-DDThh:mm:ssZ"
    assert ident.findtext(OAI + "earliestDatestamp") == "2024-03-01T12:00:00Z"
    assert ident.findtext(OAI + "deletedRecord") == "persistent"
    assert root.find(OAI + "request").get("verb") == "Identify"  # type: ignore[union-attr]


def test_list_metadata_formats(server: PeerServer) -> None:
    root = oai(server, verb="ListMetadataFormats")
    assert [e.text for e in root.iter(OAI + "metadataPrefix")] == ["dcat_ap"]
    root = oai(server, verb="ListMetadataFormats", identifier="oai:example.org:3")
    assert [e.text for e in root.iter(OAI + "metadataPrefix")] == ["dcat_ap"]
    root = oai(server, verb="ListMetadataFormats", identifier="oai:nope")
    assert error_code(root) == "idDoesNotExist"


def test_list_sets_and_no_set_hierarchy(server: PeerServer, peer: OaiPmhPeer) -> None:
    root = oai(server, verb="ListSets")
    assert [e.text for e in root.iter(OAI + "setSpec")] == ["env", "env:air", "transport"]
    peer.items = MemoryItems([OaiItem("oai:x:1", T0, metadata=rdf(1))])
    assert error_code(oai(server, verb="ListSets")) == "noSetHierarchy"
    assert error_code(oai(server, verb="ListRecords", metadataPrefix="dcat_ap", set="a")) == (
        "noSetHierarchy"
    )


@pytest.mark.parametrize("verb", ["ListIdentifiers", "ListRecords"])
def test_paging_with_resumption_tokens(server: PeerServer, verb: str) -> None:
    root = oai(server, verb=verb, metadataPrefix="dcat_ap")
    seen, cursors, sizes, pages = identifiers(root), [], [], 1
    token = root.find(f"{OAI}{verb}/{OAI}resumptionToken")
    while token is not None and token.text:
        cursors.append(token.get("cursor"))
        sizes.append(token.get("completeListSize"))
        root = oai(server, "POST", verb=verb, resumptionToken=token.text)
        assert root.find(OAI + "request").get("resumptionToken") == token.text  # type: ignore[union-attr]
        seen += identifiers(root)
        pages += 1
        token = root.find(f"{OAI}{verb}/{OAI}resumptionToken")
    assert token is not None
    assert token.text is None  # the last page has an empty token
    cursors.append(token.get("cursor"))
    sizes.append(token.get("completeListSize"))
    assert pages == 3
    assert seen == [f"oai:example.org:{i}" for i in range(25)]
    assert cursors == ["0", "10", "20"]
    assert sizes == ["25"] * 3
    if verb == "ListRecords":
        assert len(list(root.iter(OAI + "metadata"))) == 5
    else:
        assert root.find(f".//{OAI}metadata") is None


def test_single_page_has_no_token(server: PeerServer) -> None:
    root = oai(
        server,
        verb="ListIdentifiers",
        metadataPrefix="dcat_ap",
        set="transport",
        until="2024-03-01T15:00:00Z",
    )
    assert identifiers(root) == ["oai:example.org:1", "oai:example.org:3"]
    assert root.find(f".//{OAI}resumptionToken") is None


def test_from_until_inclusive_seconds(server: PeerServer) -> None:
    root = oai(
        server,
        verb="ListIdentifiers",
        metadataPrefix="dcat_ap",
        **{"from": "2024-03-01T14:00:00Z", "until": "2024-03-01T16:00:00Z"},
    )
    assert identifiers(root) == ["oai:example.org:2", "oai:example.org:3", "oai:example.org:4"]


def test_from_until_inclusive_days(server: PeerServer) -> None:
    # T0 is noon on 1 March: items 0-11 fall on 1 March, items 12-24 on 2 March
    day2 = oai(
        server,
        verb="ListIdentifiers",
        metadataPrefix="dcat_ap",
        **{"from": "2024-03-02", "until": "2024-03-02"},
    )
    assert identifiers(day2) == [f"oai:example.org:{i}" for i in range(12, 22)]
    assert day2.find(f".//{OAI}resumptionToken").get("completeListSize") == "13"  # type: ignore[union-attr]
    day1 = oai(server, verb="ListIdentifiers", metadataPrefix="dcat_ap", until="2024-03-01")
    assert identifiers(day1)[-1] == "oai:example.org:9"
    assert day1.find(f".//{OAI}resumptionToken").get("completeListSize") == "12"  # type: ignore[union-attr]
    day3 = oai(server, verb="ListIdentifiers", metadataPrefix="dcat_ap", **{"from": "2024-03-03"})
    assert error_code(day3) == "noRecordsMatch"


def test_day_granularity_repository() -> None:
    peer = OaiPmhPeer(make_items(5), granularity=DAY)
    with PeerServer(peer) as server:
        root = oai(server, verb="ListIdentifiers", metadataPrefix="dcat_ap", until="2024-03-01")
        assert [e.text for e in root.iter(OAI + "datestamp")] == ["2024-03-01"] * 5
        assert oai(server, verb="Identify").findtext(f"{OAI}Identify/{OAI}granularity") == DAY
        bad = oai(
            server, verb="ListIdentifiers", metadataPrefix="dcat_ap", until="2024-03-01T00:00:00Z"
        )
        assert error_code(bad) == "badArgument"


def test_set_selection_is_hierarchical(server: PeerServer) -> None:
    env = oai(server, verb="ListIdentifiers", metadataPrefix="dcat_ap", set="env")
    air = oai(server, verb="ListIdentifiers", metadataPrefix="dcat_ap", set="env:air")
    assert identifiers(env) == identifiers(air) == [f"oai:example.org:{i}" for i in range(0, 20, 2)]
    assert [e.text for e in env.iter(OAI + "setSpec")] == ["env:air"] * 10
    none = oai(server, verb="ListIdentifiers", metadataPrefix="dcat_ap", set="env:water")
    assert error_code(none) == "noRecordsMatch"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({}, "badVerb"),
        ({"verb": "ListEverything"}, "badVerb"),
        ({"verb": "Identify", "metadataPrefix": "dcat_ap"}, "badArgument"),
        ({"verb": "ListRecords"}, "badArgument"),
        ({"verb": "ListRecords", "metadataPrefix": "dcat_ap", "from": "yesterday"}, "badArgument"),
        ({"verb": "ListRecords", "metadataPrefix": "dcat_ap", "from": "2024-02-30"}, "badArgument"),
        (
            {
                "verb": "ListRecords",
                "metadataPrefix": "dcat_ap",
                "from": "2024-03-02",
                "until": "2024-03-01",
            },
            "badArgument",
        ),
        (
            {
                "verb": "ListRecords",
                "metadataPrefix": "dcat_ap",
                "from": "2024-03-01",
                "until": "2024-03-02T00:00:00Z",
            },
            "badArgument",
        ),
        (
            {"verb": "ListRecords", "resumptionToken": "x", "metadataPrefix": "dcat_ap"},
            "badArgument",
        ),
        ({"verb": "ListRecords", "resumptionToken": "not-a-token"}, "badResumptionToken"),
        ({"verb": "ListSets", "resumptionToken": "x"}, "badResumptionToken"),
        ({"verb": "GetRecord", "identifier": "oai:example.org:1"}, "badArgument"),
        (
            {"verb": "GetRecord", "identifier": "oai:nope", "metadataPrefix": "dcat_ap"},
            "idDoesNotExist",
        ),
        (
            {"verb": "GetRecord", "identifier": "oai:example.org:1", "metadataPrefix": "oai_dc"},
            "cannotDisseminateFormat",
        ),
        ({"verb": "ListIdentifiers", "metadataPrefix": "oai_dc"}, "cannotDisseminateFormat"),
        (
            {"verb": "ListRecords", "metadataPrefix": "dcat_ap", "from": "2030-01-01"},
            "noRecordsMatch",
        ),
    ],
)
def test_error_codes(server: PeerServer, params: dict[str, str], code: str) -> None:
    root = oai(server, **params)
    assert error_code(root) == code
    request = root.find(OAI + "request")
    assert request is not None
    assert request.text == server.url
    if code in ("badVerb", "badArgument"):
        assert dict(request.attrib) == {}  # the spec: echo only the base URL
    else:
        assert dict(request.attrib) == params


def test_repeated_arguments(server: PeerServer) -> None:
    resp = requests.get(f"{server.url}?verb=Identify&verb=Identify", timeout=5)
    assert error_code(etree.fromstring(resp.content)) == "badVerb"
    resp = requests.get(
        f"{server.url}?verb=ListRecords&metadataPrefix=dcat_ap&metadataPrefix=x", timeout=5
    )
    assert error_code(etree.fromstring(resp.content)) == "badArgument"


def test_token_of_another_verb_is_refused(server: PeerServer) -> None:
    token = oai(server, verb="ListIdentifiers", metadataPrefix="dcat_ap").find(
        f".//{OAI}resumptionToken"
    )
    assert token is not None
    assert token.text
    assert (
        error_code(oai(server, verb="ListRecords", resumptionToken=token.text))
        == "badResumptionToken"
    )


def test_deleted_items_have_headers_only(server: PeerServer, peer: OaiPmhPeer) -> None:
    items = peer.items
    assert isinstance(items, MemoryItems)
    items.delete("oai:example.org:3", when=T0 + timedelta(days=5))
    record = oai(server, verb="GetRecord", identifier="oai:example.org:3", metadataPrefix="dcat_ap")
    header = record.find(f".//{OAI}header")
    assert header is not None
    assert header.get("status") == "deleted"
    assert header.findtext(OAI + "datestamp") == "2024-03-06T12:00:00Z"
    assert record.find(f".//{OAI}metadata") is None
    listed = oai(server, verb="ListRecords", metadataPrefix="dcat_ap", **{"from": "2024-03-06"})
    assert identifiers(listed) == ["oai:example.org:3"]
    assert listed.find(f".//{OAI}metadata") is None


def test_get_record_embeds_metadata(server: PeerServer) -> None:
    root = oai(server, verb="GetRecord", identifier="oai:example.org:7", metadataPrefix="dcat_ap")
    metadata = root.find(f"{OAI}GetRecord/{OAI}record/{OAI}metadata")
    assert metadata is not None
    assert len(metadata) == 1
    assert etree.tostring(copy.deepcopy(metadata[0])) == rdf(7)  # embedded verbatim


def test_items_change_between_pages(server: PeerServer, peer: OaiPmhPeer) -> None:
    """Keyset paging: an item updated mid-listing moves to the end instead of shifting pages."""
    items = peer.items
    assert isinstance(items, MemoryItems)
    first = oai(server, verb="ListIdentifiers", metadataPrefix="dcat_ap")
    token = first.find(f".//{OAI}resumptionToken")
    assert token is not None
    assert token.text
    items.put(OaiItem("oai:example.org:2", T0 + timedelta(days=3), metadata=rdf(2)))
    items.put(OaiItem("oai:example.org:new", T0 + timedelta(days=4), metadata=rdf(99)))
    items.remove("oai:example.org:15")
    seen = identifiers(first)
    while token is not None and token.text:
        root = oai(server, verb="ListIdentifiers", resumptionToken=token.text)
        seen += identifiers(root)
        token = root.find(f".//{OAI}resumptionToken")
    expected = [f"oai:example.org:{i}" for i in range(25) if i != 15]
    assert seen == [*expected, "oai:example.org:2", "oai:example.org:new"]


def test_sequence_items_are_made_on_demand() -> None:
    made: list[int] = []
    base = generated_items(100_000)
    make = base.make

    def counting(i: int) -> OaiItem:
        made.append(i)
        return make(i)

    base.make = counting
    peer = OaiPmhPeer(base, page_size=50)
    with PeerServer(peer) as server:
        root = oai(
            server, verb="ListRecords", metadataPrefix="dcat_ap", **{"from": "2024-01-02T00:00:00Z"}
        )
        token = root.find(f".//{OAI}resumptionToken")
        assert token is not None
        assert token.get("completeListSize") == str(100_000 - 86_400)
        assert identifiers(root)[0] == "oai:example.org:86400"
        page2 = oai(server, verb="ListRecords", resumptionToken=token.text or "")
        assert identifiers(page2)[0] == "oai:example.org:86450"
        record = oai(
            server, verb="GetRecord", identifier="oai:example.org:99999", metadataPrefix="dcat_ap"
        )
        assert identifiers(record) == ["oai:example.org:99999"]
    assert len(made) < 100_000 // 2  # two bisections and two pages, plus one scan for GetRecord


def test_unavailable_with_retry_after(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.unavailable, peer.faults.retry_after = 2, 7
    for _ in range(2):
        resp = requests.get(server.url, params={"verb": "Identify"}, timeout=5)
        assert resp.status_code == 503
        assert resp.headers["retry-after"] == "7"
    assert requests.get(server.url, params={"verb": "Identify"}, timeout=5).status_code == 200


def test_other_methods_are_refused(server: PeerServer) -> None:
    resp = requests.put(server.url, data="verb=Identify", timeout=5)
    assert resp.status_code == 405


def walk(server: PeerServer, **params: str) -> list[etree._Element]:
    pages = [oai(server, verb="ListRecords", metadataPrefix="dcat_ap", **params)]
    while error_code(pages[-1]) is None:
        token = pages[-1].find(f".//{OAI}resumptionToken")
        if token is None or not token.text or len(pages) > 10:
            break
        pages.append(oai(server, verb="ListRecords", resumptionToken=token.text))
    return pages


def test_fault_error_on_page(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.error_on_page = 2
    pages = walk(server)
    assert len(pages) == 2
    assert error_code(pages[1]) == "badResumptionToken"


def test_fault_cap_stops_tokens_early(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.cap = 15
    pages = walk(server)
    assert len(pages) == 2
    token = pages[-1].find(f".//{OAI}resumptionToken")
    assert token is not None
    assert token.text is None
    assert token.get("completeListSize") == "25"
    assert sum(len(identifiers(p)) for p in pages) == 20  # the server stopped after 20 of 25


def test_fault_repeat_token(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.repeat_token_on_page = 2
    pages = walk(server)
    tokens = [p.find(f".//{OAI}resumptionToken").text for p in pages[:2]]  # type: ignore[union-attr]
    assert tokens[0] == tokens[1]


def test_fault_malformed_page(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.malformed_page = 2
    first = oai(server, verb="ListRecords", metadataPrefix="dcat_ap")
    token = first.find(f".//{OAI}resumptionToken")
    assert token is not None
    resp = requests.get(
        server.url, params={"verb": "ListRecords", "resumptionToken": token.text}, timeout=5
    )
    with pytest.raises(etree.XMLSyntaxError):
        etree.fromstring(resp.content)


def test_fault_hostile_record(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.hostile_identifier = "oai:example.org:1"
    resp = requests.get(
        server.url, params={"verb": "ListRecords", "metadataPrefix": "dcat_ap"}, timeout=5
    )
    assert b'<!DOCTYPE OAI-PMH [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>' in resp.content
    assert b"<dct:title>&xxe;</dct:title>" in resp.content
    peer.faults.hostile_kind = "escaped"
    root = oai(server, verb="GetRecord", identifier="oai:example.org:1", metadataPrefix="dcat_ap")
    text = root.findtext(f".//{OAI}metadata") or ""
    assert text.startswith('<?xml version="1.0"?><!DOCTYPE rdf:RDF [<!ENTITY xxe SYSTEM')
    peer.faults.hostile_kind = "malformed"
    resp = requests.get(
        server.url,
        params={
            "verb": "GetRecord",
            "identifier": "oai:example.org:1",
            "metadataPrefix": "dcat_ap",
        },
        timeout=5,
    )
    with pytest.raises(etree.XMLSyntaxError):
        etree.fromstring(resp.content)


def test_fault_delay(server: PeerServer, peer: OaiPmhPeer) -> None:
    peer.faults.delay = 0.3
    started = time.monotonic()
    oai(server, verb="Identify")
    assert time.monotonic() - started >= 0.3


def test_metadata_xml_declaration_is_stripped(server: PeerServer, peer: OaiPmhPeer) -> None:
    items = peer.items
    assert isinstance(items, MemoryItems)
    items.put(
        OaiItem(
            "oai:example.org:file",
            T0,
            metadata=(DATA / "dataset-bus-stops.rdf")
            .read_bytes()
            .replace(b"<rdf:RDF", b'<?xml version="1.0" encoding="UTF-8"?>\n<rdf:RDF', 1),
        )
    )
    root = oai(
        server, verb="GetRecord", identifier="oai:example.org:file", metadataPrefix="dcat_ap"
    )
    assert (
        root.find(f".//{OAI}metadata/{{http://www.w3.org/1999/02/22-rdf-syntax-ns#}}RDF")
        is not None
    )


def test_request_log(server: PeerServer, peer: OaiPmhPeer) -> None:
    oai(server, "POST", verb="Identify")
    assert peer.requests[-1] == ("POST", {"verb": "Identify"})


# -- third-party clients --------------------------------------------------------------------


def test_sickle_walks_the_peer(server: PeerServer) -> None:
    from sickle import Sickle

    client = Sickle(server.url)
    assert client.Identify().granularity == "YYYY-MM-DDThh:mm:ssZ"
    records = list(client.ListRecords(metadataPrefix="dcat_ap"))
    assert [r.header.identifier for r in records] == [f"oai:example.org:{i}" for i in range(25)]
    assert records[4].metadata["title"] == ["Dataset 4 & friends"]
    headers = list(client.ListIdentifiers(metadataPrefix="dcat_ap", set="transport"))
    assert len(headers) == 12
    assert [s.setSpec for s in client.ListSets()] == ["env", "env:air", "transport"]
    assert [f.metadataPrefix for f in client.ListMetadataFormats()] == ["dcat_ap"]
    assert client.GetRecord(
        identifier="oai:example.org:3", metadataPrefix="dcat_ap"
    ).header.datestamp == ("2024-03-01T15:00:00Z")


def test_pyoai_strict_client_walks_the_peer(server: PeerServer, peer: OaiPmhPeer) -> None:
    """pyoai 4 (``oaipmh``) validates arguments, datestamps and error codes; it POSTs."""
    from oaipmh.client import Client
    from oaipmh.error import IdDoesNotExistError, NoRecordsMatchError
    from oaipmh.metadata import MetadataReader, MetadataRegistry

    registry = MetadataRegistry()
    registry.registerReader(
        "dcat_ap",
        MetadataReader(
            fields={"title": ("textList", "rdf:RDF/rdf:Description/dct:title/text()")},
            namespaces={
                "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
                "dct": "http://purl.org/dc/terms/",
            },
        ),
    )
    client = Client(server.url, registry)
    client.updateGranularity()
    identify = client.identify()
    assert identify.protocolVersion() == "2.0"
    assert identify.earliestDatestamp() == datetime(2024, 3, 1, 12, 0)
    records = list(client.listRecords(metadataPrefix="dcat_ap", from_=datetime(2024, 3, 1, 20, 0)))
    assert [h.identifier() for h, _, _ in records] == [f"oai:example.org:{i}" for i in range(8, 25)]
    assert records[0][1].getField("title") == ["Dataset 8 & friends"]
    headers = list(client.listIdentifiers(metadataPrefix="dcat_ap", set="env"))
    assert len(headers) == 13
    assert [s[0] for s in client.listSets()] == ["env", "env:air", "transport"]
    assert client.listMetadataFormats()[0][0] == "dcat_ap"
    header, metadata, _ = client.getRecord(identifier="oai:example.org:5", metadataPrefix="dcat_ap")
    assert header.datestamp() == datetime(2024, 3, 1, 17, 0)
    assert metadata.getField("title") == ["Dataset 5 & friends"]
    with pytest.raises(IdDoesNotExistError):
        client.getRecord(identifier="oai:nope", metadataPrefix="dcat_ap")
    with pytest.raises(NoRecordsMatchError):
        list(client.listRecords(metadataPrefix="dcat_ap", from_=datetime(2031, 1, 1)))
    assert all(method == "POST" for method, _ in list(peer.requests)[-3:])
