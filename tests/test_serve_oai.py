"""The OAI-PMH 2.0 provider at /oai, against real clients on 127.0.0.1.

A store is filled by the real pipeline (the local OAI-PMH peer, the OAI-PMH harvester, the
dcat mapper, SHACL): active records, withdrawn ones (deleted at the peer), a rejected one
(malformed at the peer), and one ISO 19139 record written through the record store. The
provider runs in uvicorn in a thread; sickle, the strict ``oaipmh`` client, plain HTTP and
our own harvester talk to it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import uvicorn
from lxml import etree
from oaipmh import error as oai_error
from oaipmh.client import Client
from oaipmh.metadata import MetadataReader, MetadataRegistry, oai_dc_reader
from pyoxigraph import RdfFormat, parse
from sickle import Sickle
from starlette.applications import Starlette
from storecheck import make_unversioned

from aggregator.config import HarvestSettings, HttpSettings, ServeSettings, Settings, SourceConfig
from aggregator.core.models import RawRecord
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.mapping.base import MappingContext, canonical_ntriples
from aggregator.mapping.dcat import DcatMapper
from aggregator.mapping.finish import finish_mapped
from aggregator.net.client import HttpClient
from aggregator.serve import oai_store as oai_db
from aggregator.serve.context import ServeContext
from aggregator.serve.oai import OaiProvider, routes
from aggregator.serve.oai_formats import RdfXmlWriter, dataset_first, embeddable_xml
from aggregator.serve.oai_tokens import META_KEY, TokenSigner, TokenState
from aggregator.store.packing import pack
from aggregator.store.record_sets import record_set_specs
from aggregator.store.records import RecordStore
from aggregator.store.state import RecordRow, RecordWrite

OAI = "{http://www.openarchives.org/OAI/2.0/}"
NS = {"oai": "http://www.openarchives.org/OAI/2.0/"}
RDF_RDF = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}RDF"
T0 = datetime(2024, 3, 1, tzinfo=UTC)
BASE_IRI = "http://127.0.0.1:8000/"
PUBLIC = "https://oai.example.org/"
HOST = "oai.example.org"
KEY_ENV = "AGG_TEST_OAI_TOKEN_KEY"
KEY = "test-key-0123456789"
PAGE = 7
N_ITEMS = 30
DELETED = (3, 11, 20)
REJECTED = 25
ISO_LOCAL_ID = "iso-record-1"
ISO_PAYLOAD = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd" '
    b'xmlns:gco="http://www.isotc211.org/2005/gco">\n'
    b"  <gmd:fileIdentifier><gco:CharacterString>iso-record-1</gco:CharacterString>"
    b"</gmd:fileIdentifier>\n"
    b"  <!-- kept as received -->\n"
    b"  <gmd:language><gco:CharacterString>eng &amp; fre</gco:CharacterString></gmd:language>\n"
    b"</gmd:MD_Metadata>\n"
)
STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


# -- a server in a thread ---------------------------------------------------------------------
class UvicornThread:
    def __init__(self, app: Starlette, sock: socket.socket) -> None:
        self.sock = sock
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/oai"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )

    def __enter__(self) -> UvicornThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def serve_settings(store_path: Path) -> Settings:
    serve = ServeSettings(public_base_url=PUBLIC, oai_page_size=PAGE, oai_token_key_env=KEY_ENV)
    return Settings(config_path=None, store_path=store_path, base_iri=BASE_IRI, serve=serve)


def start(store: RecordStore, settings: Settings) -> tuple[UvicornThread, OaiProvider]:
    ctx = ServeContext(store, settings)
    server = UvicornThread(Starlette(routes=routes(ctx)), free_socket())
    provider = OaiProvider(ctx, TokenSigner(KEY.encode()))  # the same key: for crafted tokens
    return server, provider


# -- the store --------------------------------------------------------------------------------
def item(i: int) -> OaiItem:
    metadata = generate_dataset(i)
    if i == REJECTED:  # well-formed XML, but RDF without a dataset: rejected by the mapper
        metadata = b"<rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'/>"
    return OaiItem(generate_identifier(i), T0 + timedelta(hours=i), (), False, metadata)


def write_iso_record(store: RecordStore) -> None:
    """An ISO 19139 record as an ISO mapper would leave it: its DCAT graph and its payload."""
    raw = RawRecord(
        "isosrc", ISO_LOCAL_ID, "iso19139", generate_dataset(900), "application/rdf+xml"
    )
    ctx = MappingContext(BASE_IRI, "isosrc")
    ds = finish_mapped(DcatMapper().map(raw, ctx), ctx)[0]  # as the harvest leaves it
    job = store.jobs.start("isosrc", True)
    sha = hashlib.sha256(ISO_PAYLOAD).hexdigest()
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    write = RecordWrite(
        source="isosrc",
        local_id=ISO_LOCAL_ID,
        record_iri=store.record_iri("isosrc", ISO_LOCAL_ID),
        dataset_iri=ds.dataset_iri,
        status="active",
        content_hash=ds.content_hash,
        first_seen=now,
        modified=now,
        source_datestamp=None,
        job_id=job.id,
        format="iso19139",
        payload_sha=sha,
        url=None,
        themes=" ".join(ds.themes),
        ntriples=ds.ntriples,
        catalog_ntriples=b"",
        findings="[]",
        existed=False,
    )
    store.write(job, [write], payloads={sha: (ISO_PAYLOAD, "application/xml", pack(ISO_PAYLOAD))})
    store.sync()


@dataclass
class Feed:
    store: RecordStore
    url: str
    provider: OaiProvider
    settings: Settings

    def rows(self) -> list[RecordRow]:
        return list(self.store.db.iter_records())

    def published(self) -> list[RecordRow]:
        return [r for r in self.rows() if r.status != "rejected"]

    def ident(self, row: RecordRow) -> str:
        return self.provider.identifier(row.source, row.local_id)


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Feed]:
    tmp = tmp_path_factory.mktemp("oai")
    items = MemoryItems(item(i) for i in range(N_ITEMS))
    peer = OaiPmhPeer(items, page_size=50)
    with PeerServer(peer) as upstream:
        source = SourceConfig(name="portal", type="oai-pmh", url=f"{upstream.url}oai")
        harvest = Settings(
            config_path=None,
            store_path=tmp / "store",
            base_iri=BASE_IRI,
            http=HttpSettings(allow_private=True, retries=0),
            harvest=HarvestSettings(workers=0),
            sources={"portal": source},
        )
        store = RecordStore(harvest.store_path, BASE_IRI)
        http = HttpClient(harvest.http)
        run_source(harvest, store, "portal", RunOptions(), http=http)
        for i in DELETED:
            items.delete(generate_identifier(i), T0 + timedelta(days=30))
        run_source(harvest, store, "portal", RunOptions(full=True), http=http)
    write_iso_record(store)
    assert store.db.counts_by_status() == {
        "active": N_ITEMS - len(DELETED),  # 26 harvested and the ISO record
        "withdrawn": len(DELETED),
        "rejected": 1,
    }
    settings = serve_settings(harvest.store_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEY_ENV, KEY)
        server, provider = start(store, settings)
    with server:
        yield Feed(store, server.url, provider, settings)
    store.close()


# -- plain HTTP and structure -----------------------------------------------------------------
def get(url: str, **args: str) -> bytes:
    with urllib.request.urlopen(f"{url}?{urllib.parse.urlencode(args)}", timeout=30) as resp:
        assert resp.status == 200
        assert resp.headers["content-type"].startswith("text/xml")
        return bytes(resp.read())


def get_raw(url: str, query: str) -> bytes:
    with urllib.request.urlopen(f"{url}?{query}", timeout=30) as resp:
        assert resp.status == 200
        return bytes(resp.read())


def post(url: str, **args: str) -> bytes:
    data = urllib.parse.urlencode(args).encode()
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        return bytes(resp.read())


def check(body: bytes) -> etree._Element:
    """Well-formed, and structured as the OAI-PMH 2.0 schema says (no XSD is available
    offline, so the content models are checked here)."""
    root = etree.fromstring(body)
    assert root.tag == OAI + "OAI-PMH"
    kids = list(root)
    assert [k.tag for k in kids[:2]] == [OAI + "responseDate", OAI + "request"]
    assert STAMP.match(kids[0].text or "")
    assert kids[1].text == PUBLIC + "oai"
    rest = kids[2:]
    if rest[0].tag == OAI + "error":
        assert all(k.tag == OAI + "error" for k in rest)
        return root
    assert len(rest) == 1
    verb = etree.QName(rest[0]).localname
    assert kids[1].get("verb") == verb
    body_el = rest[0]
    children = [etree.QName(c).localname for c in body_el]
    if verb in ("ListRecords", "ListIdentifiers", "ListSets"):
        one = {"ListRecords": "record", "ListIdentifiers": "header", "ListSets": "set"}[verb]
        if children[-1] == "resumptionToken":
            token = body_el[-1]
            assert token.get("completeListSize", "0").isdigit()
            assert token.get("cursor", "0").isdigit()
            assert STAMP.match(token.get("expirationDate") or "2000-01-01T00:00:00Z")
            children = children[:-1]
        assert children and set(children) == {one}
    for header in body_el.iter(OAI + "header"):
        parts = [etree.QName(c).localname for c in header]
        assert parts[:2] == ["identifier", "datestamp"]
        assert set(parts[2:]) <= {"setSpec"}
        assert STAMP.match(header[1].text or "")
        assert header.get("status") in (None, "deleted")
    for rec in body_el.iter(OAI + "record"):
        parts = [etree.QName(c).localname for c in rec]
        deleted = rec[0].get("status") == "deleted"
        assert parts == (["header"] if deleted else ["header", "metadata"])
        if not deleted:
            assert len(rec[1]) == 1  # exactly one child element
    return root


def error_code(body: bytes) -> str:
    root = check(body)
    errors = root.findall(OAI + "error")
    assert errors, body[:500]
    return str(errors[0].get("code"))


def token_of(root: etree._Element) -> str | None:
    found = root.find(".//" + OAI + "resumptionToken")
    return None if found is None else (found.text or "")


def walk(url: str, verb: str, **args: str) -> tuple[list[etree._Element], list[bytes]]:
    """Every record/header of a listing, by plain requests; also the raw pages."""
    pages = [get(url, verb=verb, **args)]
    items: list[etree._Element] = []
    while True:
        root = check(pages[-1])
        if root.find(OAI + "error") is not None:
            return items, pages
        tag = "record" if verb == "ListRecords" else "header"
        items += find(root, OAI + verb).findall(OAI + tag)
        token = token_of(root)
        if not token:
            return items, pages
        pages.append(get(url, verb=verb, resumptionToken=token))


# -- the tests --------------------------------------------------------------------------------
def test_identify_get_and_post(feed: Feed) -> None:
    body = get(feed.url, verb="Identify")
    root = check(body)
    ident = root.find(OAI + "Identify")
    assert ident is not None
    assert ident.findtext(OAI + "granularity") == "YYYY-MM-DDThh:mm:ssZ"
    assert ident.findtext(OAI + "deletedRecord") == "persistent"
    assert ident.findtext(OAI + "protocolVersion") == "2.0"
    assert ident.findtext(OAI + "baseURL") == PUBLIC + "oai"
    earliest = min(r.modified for r in feed.published())
    assert ident.findtext(OAI + "earliestDatestamp") == earliest[:19] + "Z"
    sample = ident.findtext(
        ".//{http://www.openarchives.org/OAI/2.0/oai-identifier}sampleIdentifier"
    )
    assert sample is not None and sample.startswith(f"oai:{HOST}:")
    # POST answers the same (apart from responseDate)
    posted = post(feed.url, verb="Identify")
    strip = re.compile(rb"<responseDate>[^<]*</responseDate>")
    assert strip.sub(b"", posted) == strip.sub(b"", body)


def test_sickle_walks_the_whole_feed(feed: Feed) -> None:
    records = list(Sickle(feed.url).ListRecords(metadataPrefix="dcat_ap", ignore_deleted=False))
    published = feed.published()
    assert len(records) == len(published)
    by_ident = {feed.ident(r): r for r in published}
    assert {r.header.identifier for r in records} == set(by_ident)
    deleted = {r.header.identifier for r in records if r.header.deleted}
    assert deleted == {feed.ident(r) for r in published if r.status == "withdrawn"}
    datestamps = [r.header.datestamp for r in records]
    assert datestamps == sorted(datestamps)  # keyset order: (modified, id)
    for rec in records:
        row = by_ident[rec.header.identifier]
        assert rec.header.datestamp == row.modified[:19] + "Z"
        if rec.header.deleted:
            assert rec.xml.find(OAI + "metadata") is None
            continue
        metadata = rec.xml.find(OAI + "metadata")
        first = metadata[0]
        assert first.tag == RDF_RDF
        # the feed's dataset graph is the stored one, datatypes included
        served = canonical_ntriples(
            parse(etree.tostring(first), format=RdfFormat.RDF_XML, base_iri=BASE_IRI)
        )
        assert served == feed.store.dataset_ntriples(row)
        assert b"XMLSchema#nonNegativeInteger" in served
        # the dataset's own description comes first
        assert first[0].get("{http://www.w3.org/1999/02/22-rdf-syntax-ns#}about") == row.dataset_iri


def test_strict_oaipmh_client(feed: Feed) -> None:
    registry = MetadataRegistry()
    registry.registerReader("oai_dc", oai_dc_reader)
    registry.registerReader("dcat_ap", MetadataReader(fields={}, namespaces={}))
    client = Client(feed.url, registry)
    client.updateGranularity()
    identify = client.identify()
    assert identify.deletedRecord() == "persistent"
    published = feed.published()
    listed = list(client.listRecords(metadataPrefix="oai_dc"))
    assert len(listed) == len(published)
    assert sum(1 for h, _, _ in listed if h.isDeleted()) == len(DELETED)
    titles = [md.getField("title") for h, md, _ in listed if not h.isDeleted()]
    assert all(titles)
    assert len(list(client.listRecords(metadataPrefix="dcat_ap"))) == len(published)
    # sets
    sets = {spec: name for spec, name, _ in client.listSets()}
    assert {"source", "source:portal", "source:isosrc", "theme"} <= set(sets)
    assert sets["theme:ENVI"] == "EU data theme: Environment"
    theme_rows = [r for r in published if "data-theme/ENVI" in r.themes]
    assert theme_rows
    envi = list(client.listIdentifiers(metadataPrefix="dcat_ap", set="theme:ENVI"))
    withdrawn_envi = {
        feed.ident(r)
        for r in published
        if r.status == "withdrawn" and "theme:ENVI" in db_specs(feed, r)
    }
    assert {h.identifier() for h in envi} == {feed.ident(r) for r in theme_rows} | withdrawn_envi
    assert all("theme:ENVI" in h.setSpec() for h in envi)
    portal = list(client.listIdentifiers(metadataPrefix="dcat_ap", set="source:portal"))
    assert len(portal) == sum(1 for r in published if r.source == "portal")
    # from/until (datetime arguments, seconds granularity)
    stamps = sorted(r.modified[:19] for r in published)
    mid = datetime.fromisoformat(stamps[len(stamps) // 2])
    after = list(client.listIdentifiers(metadataPrefix="oai_dc", from_=mid))
    assert len(after) == sum(1 for s in stamps if s >= mid.isoformat())
    before = list(client.listIdentifiers(metadataPrefix="oai_dc", until=mid))
    assert len(before) == sum(1 for s in stamps if s <= mid.isoformat())
    # formats and single records
    prefixes = [f[0] for f in client.listMetadataFormats()]
    assert prefixes == ["dcat_ap", "dcat", "oai_dc", "iso19139"]
    gone = next(r for r in published if r.status == "withdrawn")
    header, metadata, _ = client.getRecord(identifier=feed.ident(gone), metadataPrefix="oai_dc")
    assert header.isDeleted() and metadata is None
    with pytest.raises(oai_error.IdDoesNotExistError):
        client.getRecord(identifier=f"oai:{HOST}:portal:nope", metadataPrefix="oai_dc")
    with pytest.raises(oai_error.NoRecordsMatchError):
        list(client.listRecords(metadataPrefix="oai_dc", set="theme:NOPE"))


def db_specs(feed: Feed, row: RecordRow) -> set[str]:
    cur = feed.store.db.conn.execute(
        "SELECT set_spec FROM record_sets WHERE record_id = ?", (row.id,)
    )
    return {str(r[0]) for r in cur}


def test_paging_tokens_and_counts(feed: Feed) -> None:
    published = feed.published()
    items, pages = walk(feed.url, "ListIdentifiers", metadataPrefix="dcat_ap")
    assert len(items) == len(published)
    assert len(pages) == -(-len(published) // PAGE)
    cursors = []
    for page in pages[:-1]:
        token = find(etree.fromstring(page), ".//" + OAI + "resumptionToken")
        assert token.get("completeListSize") == str(len(published))
        assert token.text
        cursors.append(int(token.get("cursor", "")))
    assert cursors == list(range(0, PAGE * len(cursors), PAGE))
    last = find(etree.fromstring(pages[-1]), ".//" + OAI + "resumptionToken")
    assert not last.text  # the last page: an empty token
    assert last.get("cursor") == str(PAGE * (len(pages) - 1))
    # re-issuing a token gives the same page
    again = token_of(etree.fromstring(pages[1]))
    assert again
    first = get(feed.url, verb="ListIdentifiers", resumptionToken=again)
    second = get(feed.url, verb="ListIdentifiers", resumptionToken=again)
    assert same_page(first, second)
    assert same_page(first, pages[2])
    # two walks started alike get the same pages
    one = get(feed.url, verb="ListRecords", metadataPrefix="oai_dc")
    two = get(feed.url, verb="ListRecords", metadataPrefix="oai_dc")
    assert same_page(one, two)
    token_one, token_two = token_of(etree.fromstring(one)), token_of(etree.fromstring(two))
    assert token_one and token_two
    assert same_page(
        get(feed.url, verb="ListRecords", resumptionToken=token_one),
        get(feed.url, verb="ListRecords", resumptionToken=token_two),
    )


def same_page(a: bytes, b: bytes) -> bool:
    """Equal responses, apart from responseDate and the next token (whose expiry moves on
    with the clock; within a minute it is the same token)."""
    strip = re.compile(
        rb"<responseDate>[^<]*</responseDate>|expirationDate=\"[^\"]*\"|>[A-Za-z0-9_.-]+</resumptionToken>"
    )
    return strip.sub(b"", a) == strip.sub(b"", b)


def find(root: etree._Element, path: str) -> etree._Element:
    found = root.find(path)
    assert found is not None, path
    return found


def test_day_granularity_and_bounds_are_inclusive(feed: Feed) -> None:
    published = feed.published()
    day = published[0].modified[:10]
    items, _ = walk(feed.url, "ListIdentifiers", metadataPrefix="dcat_ap", **{"from": day})
    assert len(items) == sum(1 for r in published if r.modified[:10] >= day)
    items, _ = walk(feed.url, "ListIdentifiers", metadataPrefix="dcat_ap", until=day)
    assert len(items) == sum(1 for r in published if r.modified[:10] <= day)
    stamp = sorted(r.modified for r in published)[5][:19] + "Z"
    items, _ = walk(
        feed.url, "ListIdentifiers", metadataPrefix="dcat_ap", **{"from": stamp, "until": stamp}
    )
    assert len(items) == sum(1 for r in published if r.modified[:19] + "Z" == stamp) >= 1
    assert (
        error_code(
            get(feed.url, verb="ListIdentifiers", metadataPrefix="dcat_ap", until="2000-01-01")
        )
        == "noRecordsMatch"
    )


ERRORS = [
    ("", "badVerb"),
    ("verb=Nope", "badVerb"),
    ("verb=Identify&verb=Identify", "badVerb"),
    ("verb=", "badVerb"),
    ("verb=Identify&extra=1", "badArgument"),
    ("verb=ListRecords", "badArgument"),
    ("verb=ListRecords&metadataPrefix=dcat_ap&metadataPrefix=oai_dc", "badArgument"),
    ("verb=ListRecords&metadataPrefix=dcat_ap&resumptionToken=x", "badArgument"),
    ("verb=ListIdentifiers&resumptionToken=x&set=source", "badArgument"),
    ("verb=GetRecord&identifier=x", "badArgument"),
    ("verb=GetRecord&metadataPrefix=dcat_ap&resumptionToken=x&identifier=y", "badArgument"),
    ("verb=ListRecords&metadataPrefix=dcat_ap&from=2024-01-01T00:00:00.5Z", "badArgument"),
    ("verb=ListRecords&metadataPrefix=dcat_ap&from=2024-01-01T00:00Z", "badArgument"),
    ("verb=ListRecords&metadataPrefix=dcat_ap&from=2024-13-01", "badArgument"),
    (
        "verb=ListRecords&metadataPrefix=dcat_ap&from=2024-01-01&until=2024-02-01T00:00:00Z",
        "badArgument",
    ),
    ("verb=ListRecords&metadataPrefix=dcat_ap&from=2024-02-01&until=2024-01-01", "badArgument"),
    ("verb=ListRecords&metadataPrefix=dcat_ap&from=", "badArgument"),
    ("verb=ListRecords&metadataPrefix=dc%20ap", "badArgument"),
    ("verb=ListRecords&metadataPrefix=dcat_ap&set=a%20b", "badArgument"),
    ("verb=ListRecords&metadataPrefix=marc21", "cannotDisseminateFormat"),
    ("verb=GetRecord&metadataPrefix=marc21&identifier=x", "cannotDisseminateFormat"),
    ("verb=GetRecord&metadataPrefix=dcat_ap&identifier=oai:elsewhere:portal:1", "idDoesNotExist"),
    ("verb=ListMetadataFormats&identifier=oai:oai.example.org:portal:nope", "idDoesNotExist"),
    ("verb=ListRecords&resumptionToken=garbage", "badResumptionToken"),
    ("verb=ListSets&resumptionToken=anything", "badResumptionToken"),
    ("verb=ListRecords&metadataPrefix=dcat_ap&set=source:nope", "noRecordsMatch"),
    ("verb=ListRecords&metadataPrefix=dcat_ap&from=2999-01-01", "noRecordsMatch"),
]


@pytest.mark.parametrize(("query", "code"), ERRORS)
def test_error_codes_get_and_post(feed: Feed, query: str, code: str) -> None:
    body = get_raw(feed.url, query)
    assert error_code(body) == code
    request = find(check(body), OAI + "request")
    if code in ("badVerb", "badArgument"):
        assert len(request.attrib) == 0  # no attributes echoed for an invalid request
    else:
        assert {str(k): str(v) for k, v in request.attrib.items()} == dict(
            urllib.parse.parse_qsl(query)
        )
    data = query.encode()
    req = urllib.request.Request(
        feed.url, data=data, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        assert error_code(resp.read()) == code


def test_echo_is_escaped(feed: Feed) -> None:
    ident = 'oai:x:<&">\x01'
    body = get(feed.url, verb="GetRecord", metadataPrefix="dcat_ap", identifier=ident)
    root = check(body)
    assert error_code(body) == "idDoesNotExist"
    assert find(root, OAI + "request").get("identifier") == 'oai:x:<&">'


def test_token_tampering_expiry_and_foreign_tokens(feed: Feed) -> None:
    root = check(get(feed.url, verb="ListRecords", metadataPrefix="dcat_ap", set="source:portal"))
    token = token_of(root)
    assert token
    payload, sig = token.split(".")
    state = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))

    def forged(body: list[object]) -> str:
        raw = base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode())
        return raw.decode().rstrip("=") + "." + sig

    tampered = [
        token[:-2] + ("AA" if token[-2:] != "AA" else "BB"),  # signature changed
        forged([*state[:3], "source:isosrc", *state[4:]]),  # another set, old signature
        forged([*state[:8], 0, *state[9:]]),  # cursor moved
        token + "x",
        "x" + token,
        token.replace(".", ""),
    ]
    for bad in tampered:
        assert error_code(get(feed.url, verb="ListRecords", resumptionToken=bad)) == (
            "badResumptionToken"
        ), bad
    # the right key, but another verb than the request's
    assert error_code(get(feed.url, verb="ListIdentifiers", resumptionToken=token)) == (
        "badResumptionToken"
    )
    # expired: correctly signed with the server's key, expiry in the past
    signer = TokenSigner(KEY.encode())
    st = TokenState("ListRecords", "dcat_ap", None, None, None, "", -1, 0, 5, int(time.time()) - 5)
    assert error_code(get(feed.url, verb="ListRecords", resumptionToken=signer.encode(st))) == (
        "badResumptionToken"
    )
    valid = signer.encode(replace(st, expires=int(time.time()) + 600))
    assert (
        check(get(feed.url, verb="ListRecords", resumptionToken=valid)).find(OAI + "ListRecords")
        is not None
    )
    # signed by another key (another server, or one whose key was changed)
    other = TokenSigner(b"another key").encode(replace(st, expires=int(time.time()) + 600))
    assert error_code(get(feed.url, verb="ListRecords", resumptionToken=other)) == (
        "badResumptionToken"
    )
    # a token never yields records outside its own query
    items, _ = walk(feed.url, "ListIdentifiers", metadataPrefix="dcat_ap", set="source:isosrc")
    assert [i.findtext(OAI + "identifier") for i in items] == [f"oai:{HOST}:isosrc:{ISO_LOCAL_ID}"]


def test_getrecord_and_formats(feed: Feed) -> None:
    active = next(r for r in feed.published() if r.source == "portal" and r.status == "active")
    ident = feed.ident(active)
    assert ident == f"oai:{HOST}:portal:{active.local_id}"
    for prefix in ("dcat_ap", "dcat"):
        root = check(get(feed.url, verb="GetRecord", identifier=ident, metadataPrefix=prefix))
        rdf = find(root, f".//{OAI}metadata")[0]
        assert rdf.tag == RDF_RDF
    formats = check(get(feed.url, verb="ListMetadataFormats", identifier=ident))
    assert [p.text for p in formats.iter(OAI + "metadataPrefix")] == ["dcat_ap", "dcat", "oai_dc"]
    assert (
        error_code(get(feed.url, verb="GetRecord", identifier=ident, metadataPrefix="iso19139"))
        == "cannotDisseminateFormat"
    )
    # oai_dc: derived from the DCAT-AP graph, language tags kept
    dc = check(get(feed.url, verb="GetRecord", identifier=ident, metadataPrefix="oai_dc"))
    ns = {"dc": "http://purl.org/dc/elements/1.1/"}
    titles = dc.findall(".//dc:title", ns)
    assert {t.get("{http://www.w3.org/XML/1998/namespace}lang") for t in titles} >= {"en"}
    for element in (
        "title",
        "description",
        "subject",
        "publisher",
        "date",
        "identifier",
        "type",
        "rights",
        "language",
        "coverage",
    ):
        assert dc.findall(f".//dc:{element}", ns), element
    assert active.dataset_iri in [i.text for i in dc.findall(".//dc:identifier", ns)]


def test_iso19139_record_is_the_original_payload(feed: Feed) -> None:
    ident = f"oai:{HOST}:isosrc:{ISO_LOCAL_ID}"
    formats = check(get(feed.url, verb="ListMetadataFormats", identifier=ident))
    assert [p.text for p in formats.iter(OAI + "metadataPrefix")][-1] == "iso19139"
    body = get(feed.url, verb="GetRecord", identifier=ident, metadataPrefix="iso19139")
    check(body)
    expected = ISO_PAYLOAD.split(b"?>", 1)[1].strip()
    assert b"<metadata>" + expected + b"</metadata>" in body
    items, _ = walk(feed.url, "ListRecords", metadataPrefix="iso19139")
    assert len(items) == 1
    # with a set: only the ISO records of that set
    assert (
        error_code(
            get(feed.url, verb="ListRecords", metadataPrefix="iso19139", set="source:portal")
        )
        == "noRecordsMatch"
    )


def test_rejected_records_are_not_published(feed: Feed) -> None:
    rejected = next(r for r in feed.rows() if r.status == "rejected")
    ident = feed.ident(rejected)
    items, _ = walk(feed.url, "ListIdentifiers", metadataPrefix="dcat_ap")
    assert ident not in {i.findtext(OAI + "identifier") for i in items}
    assert error_code(get(feed.url, verb="ListMetadataFormats", identifier=ident)) == (
        "noMetadataFormats"
    )
    assert error_code(
        get(feed.url, verb="GetRecord", identifier=ident, metadataPrefix="dcat_ap")
    ) == ("cannotDisseminateFormat")


def test_round_trip_through_our_own_harvester(feed: Feed, tmp_path: Path) -> None:
    """Our OAI-PMH harvester harvests our feed into a second store: same dataset graphs."""
    source = SourceConfig(name="mirror", type="oai-pmh", url=feed.url)
    settings = Settings(
        config_path=None,
        store_path=tmp_path / "mirror",
        base_iri="http://mirror.example.org/",
        http=HttpSettings(allow_private=True, retries=0),
        harvest=HarvestSettings(workers=0),
        sources={"mirror": source},
    )
    mirror = RecordStore(settings.store_path, settings.base_iri)
    try:
        job = run_source(settings, mirror, "mirror", RunOptions(), http=HttpClient(settings.http))
        assert job.listing["complete"]
        active = [r for r in feed.rows() if r.status == "active"]
        theirs = {r.local_id: r for r in mirror.db.iter_records()}
        assert mirror.db.counts_by_status() == {"active": len(active)}
        for row in active:
            copy = theirs[feed.ident(row)]  # our OAI identifier is their local id
            assert copy.dataset_iri == row.dataset_iri
            assert mirror.dataset_ntriples(copy) == feed.store.dataset_ntriples(row)
        again = run_source(
            settings,
            mirror,
            "mirror",
            RunOptions(full=True, force=True),
            http=HttpClient(settings.http),
        )
        assert again.counters["unchanged"] == len(active)
    finally:
        mirror.close()


def test_empty_store_has_no_sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    store = RecordStore(tmp_path / "empty", BASE_IRI)
    try:
        server, _ = start(store, serve_settings(tmp_path / "empty"))
        with server:
            check(get(server.url, verb="Identify"))
            assert error_code(get(server.url, verb="ListSets")) == "noSetHierarchy"
            assert (
                error_code(
                    get(server.url, verb="ListRecords", metadataPrefix="dcat_ap", set="source:x")
                )
                == "noSetHierarchy"
            )
            assert error_code(get(server.url, verb="ListRecords", metadataPrefix="dcat_ap")) == (
                "noRecordsMatch"
            )
            formats = check(get(server.url, verb="ListMetadataFormats"))
            assert len(formats.findall(f".//{OAI}metadataFormat")) == 4
    finally:
        store.close()


def test_token_key_is_made_once_and_kept_in_the_store(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "s", BASE_IRI)
    try:
        settings = Settings(config_path=None, store_path=tmp_path / "s", base_iri=BASE_IRI)
        assert settings.serve.oai_token_key_env == ""
        routes(ServeContext(store, settings))
        key = store.db.get_meta(META_KEY)
        assert key and len(bytes.fromhex(key)) == 32
        routes(ServeContext(store, settings))
        assert store.db.get_meta(META_KEY) == key
        missing = replace(settings, serve=ServeSettings(oai_token_key_env="AGG_TEST_UNSET_VAR"))
        os.environ.pop("AGG_TEST_UNSET_VAR", None)
        with pytest.raises(Exception, match="AGG_TEST_UNSET_VAR"):
            routes(ServeContext(store, missing))
    finally:
        store.close()


def test_record_sets_follow_the_records(tmp_path: Path) -> None:
    """The set index: kept in the upsert's transaction, withdrawals keep their theme sets,
    rejected records are in none, each set's size is kept as records change, and an older
    store gets the index and the sizes built when opened."""
    assert record_set_specs(
        "p", "http://publications.europa.eu/resource/authority/data-theme/ENVI http://x/y"
    ) == ["source", "source:p", "theme", "theme:ENVI"]
    items = MemoryItems([*(item(i) for i in range(6)), item(REJECTED)])
    with PeerServer(OaiPmhPeer(items)) as upstream:
        source = SourceConfig(name="p", type="oai-pmh", url=f"{upstream.url}oai")
        settings = Settings(
            config_path=None,
            store_path=tmp_path / "s",
            base_iri=BASE_IRI,
            http=HttpSettings(allow_private=True, retries=0),
            harvest=HarvestSettings(workers=0),
            sources={"p": source},
        )
        store = RecordStore(settings.store_path, BASE_IRI)
        http = HttpClient(settings.http)
        run_source(settings, store, "p", RunOptions(), http=http)
        assert_set_counts(store)
        items.delete(generate_identifier(2), T0 + timedelta(days=9))
        run_source(settings, store, "p", RunOptions(full=True), http=http)
        assert_set_counts(store)

    def sets() -> dict[tuple[int, str], str]:
        cur = store.db.conn.execute("SELECT record_id, set_spec, modified FROM record_sets")
        return {(int(a), str(b)): str(c) for a, b, c in cur}

    try:
        rows = {r.local_id: r for r in store.db.iter_records()}
        gone = rows[generate_identifier(2)]
        assert gone.status == "withdrawn" and gone.themes == ""  # themes leave with content
        before = sets()
        theme_specs = {s for (rid, s) in before if rid == gone.id and s.startswith("theme:")}
        assert theme_specs  # ... but the record stays in its theme sets
        assert all(
            mod == rows_mod
            for (rid, _), mod in before.items()
            for rows_mod in [next(r.modified for r in rows.values() if r.id == rid)]
        )
        # an older store: no record_sets yet -> built on open
        store.db.conn.execute("DELETE FROM record_sets")
        store.db.conn.execute("DELETE FROM meta WHERE key = 'record_sets'")
        store.db.conn.execute("DELETE FROM set_counts")
        store.db.conn.execute("DELETE FROM meta WHERE key = 'set_counts'")
        make_unversioned(store.db.conn)  # a store made before schema versions
        store.close()
        store = RecordStore(settings.store_path, BASE_IRI)
        rebuilt = sets()
        assert {k for k in rebuilt if k[0] != gone.id} == {k for k in before if k[0] != gone.id}
        assert_set_counts(store)
        # a whole set's completeListSize is read from set_counts; a date range is counted
        conn = store.db.conn
        assert oai_db.count(conn, oai_db.Selection("source", False)) == 6
        assert oai_db.count(conn, oai_db.Selection("theme:NONE", False)) == 0
        assert oai_db.count(conn, oai_db.Selection("source", False, "0", "1")) == 0
    finally:
        store.close()


def assert_set_counts(store: RecordStore) -> None:
    """``set_counts`` holds exactly the sizes of the sets in ``record_sets``."""
    conn = store.db.conn
    counted = dict(conn.execute("SELECT set_spec, count(*) FROM record_sets GROUP BY set_spec"))
    kept = {k: v for k, v in conn.execute("SELECT set_spec, n FROM set_counts") if v}
    assert kept == counted
    assert counted["source"] == 6  # the rejected record is in no set


def test_embeddable_xml() -> None:
    latin = '<?xml version="1.0" encoding="ISO-8859-1"?>\n<a xmlns="urn:x">é</a>'.encode("latin-1")
    assert embeddable_xml(latin) == '<a xmlns="urn:x">é</a>'.encode()
    assert embeddable_xml(b"<a>no namespace</a>") is None  # the envelope would capture it
    assert embeddable_xml(b'<!DOCTYPE a [<!ENTITY e "x">]><a xmlns="urn:x">&e;</a>') is None
    assert embeddable_xml(b"<a xmlns='urn:x'>") is None


def test_rdfxml_writer_never_sends_broken_xml() -> None:
    writer = RdfXmlWriter()
    nt = (
        b'<http://ex.org/a> <http://ex.org/123> "unwritable predicate" .\n'
        b'<http://ex.org/a> <http://purl.org/dc/terms/title> "bell\\u0007 and \\b"@en .\n'
        b'<http://ex.org/b> <http://purl.org/dc/terms/title> "b" .\n'
        b'<http://ex.org/d> <http://purl.org/dc/terms/title> "d" .\n'
    )
    data = writer.write(nt, "http://ex.org/b")
    root = etree.fromstring(data)  # well-formed
    assert root.tag == RDF_RDF
    about = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}about"
    assert root[0].get(about) == "http://ex.org/b"  # the dataset first
    graph = canonical_ntriples(parse(data, format=RdfFormat.RDF_XML))
    assert b"ex.org/123" not in graph
    assert b'"bell and "@en' in graph
    assert dataset_first(b"<a> <p> 1 .\n<b> <p> 2 .\n<c> <p> 3 .\n", "b") == (
        b"<b> <p> 2 .\n<a> <p> 1 .\n<c> <p> 3 .\n"
    )
