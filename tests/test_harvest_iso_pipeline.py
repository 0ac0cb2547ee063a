"""ISO 19139 sources end to end: csw / waf / gemini-doc -> the iso19139 mapper -> SHACL -> the
record store -> the OAI-PMH feed's ``iso19139`` format; the UK DMS initial checks (metadata
date not newer -> skipped, the newer of two with the same fileIdentifier kept, withdrawn then
reinstated), truncated listings, per-record errors and the publisher cross-check on the job."""

from __future__ import annotations

import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from lxml import etree
from starlette.applications import Starlette
from test_serve_oai import UvicornThread, free_socket  # the OAI provider in uvicorn

from aggregator.config import (
    HarvestSettings,
    HttpSettings,
    Settings,
    SourceConfig,
    ValidationSettings,
    ValidationStep,
)
from aggregator.config.profiles import profile_steps
from aggregator.core.xml import parse_xml
from aggregator.demo.peers.csw import CswItem, CswPeer
from aggregator.demo.peers.gemini_samples import bundled_gemini_records, generate_gemini_record
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.waf import WafApp
from aggregator.harvest.gemini import record_facts
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.serve.context import ServeContext
from aggregator.serve.oai import routes
from aggregator.store.records import RecordStore

BASE = "http://127.0.0.1:8000/"
OAI = "{http://www.openarchives.org/OAI/2.0/}"
GMD_ROOT = "{http://www.isotc211.org/2005/gmd}MD_Metadata"
GENERATED = 7


def documents() -> list[bytes]:
    return [doc for _, doc in bundled_gemini_records()] + [
        generate_gemini_record(i) for i in range(GENERATED)
    ]


def fid(document: bytes) -> str:
    return record_facts(parse_xml(document)).file_identifier


@pytest.fixture
def peer() -> CswPeer:
    return CswPeer.of_documents(documents())


@pytest.fixture
def csw(peer: CswPeer) -> Iterator[PeerServer]:
    with PeerServer(peer) as running:
        yield running


@pytest.fixture
def http() -> Iterator[HttpClient]:
    with HttpClient(HttpSettings(allow_private=True, retries=0, timeout=20)) as client:
        yield client


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RecordStore]:
    with RecordStore(tmp_path / "store", BASE) as opened:
        yield opened


def settings_for(store: RecordStore, source: SourceConfig) -> Settings:
    return Settings(
        config_path=None,
        store_path=store.path,
        base_iri=BASE,
        http=HttpSettings(allow_private=True, retries=0, timeout=20),
        harvest=HarvestSettings(workers=0),
        sources={source.name: source},
    )


#: what a configured iso19139 source gets by default: the gemini profile (ISO 19139 XSD, Table
#: A.1 and GEMINI 2.3 Schematron), then SHACL
GEMINI_CHAIN = (*profile_steps("gemini", ValidationSettings()), ValidationStep("shacl"))


def csw_source(url: str, **options: Any) -> SourceConfig:
    return SourceConfig(
        name="csw", type="csw", url=url, format="iso19139",
        publisher="Riverside Environment Agency", options=options, validation=GEMINI_CHAIN,
    )  # fmt: skip


def run(store: RecordStore, source: SourceConfig, http: HttpClient, **kw: Any) -> Any:
    return run_source(settings_for(store, source), store, source, RunOptions(**kw), http=http)


def counts(job: Any) -> dict[str, int]:
    return {k: v for k, v in job.counters.items() if v}


def canonical(element: etree._Element) -> bytes:
    """Exclusive C14N: the same bytes whatever namespaces an envelope around it declares."""
    return etree.tostring(element, method="c14n", exclusive=True)


def oai_records(store: RecordStore) -> dict[str, bytes]:
    """ListRecords in the iso19139 format from our own provider: fileIdentifier -> record."""
    settings = Settings(config_path=None, store_path=store.path, base_iri=BASE)
    app = Starlette(routes=routes(ServeContext(store, settings)))
    found: dict[str, bytes] = {}
    with UvicornThread(app, free_socket()) as server:
        query = {"verb": "ListRecords", "metadataPrefix": "iso19139"}
        while True:
            url = server.url + "?" + urllib.parse.urlencode(query)
            with urllib.request.urlopen(url, timeout=20) as answer:
                root = etree.fromstring(answer.read())
            for metadata in root.iter(OAI + "metadata"):
                record = metadata[0]
                assert record.tag == GMD_ROOT
                found[record_facts(record).file_identifier] = canonical(record)
            token = root.findtext(f".//{OAI}resumptionToken")
            if not token:
                return found
            query = {"verb": "ListRecords", "resumptionToken": token}


@pytest.mark.parametrize("mode", ["identifiers", "full"])
def test_csw_harvest_is_stored_and_republished_as_iso19139(
    csw: PeerServer, http: HttpClient, store: RecordStore, mode: str
) -> None:
    source = csw_source(csw.url, mode=mode)
    job = run(store, source, http)
    assert job.status == "succeeded", job.message
    assert counts(job) == {"added": len(documents())}
    assert job.listing["complete"] and any("paging stopped" in n for n in job.listing["notes"])
    served = oai_records(store)
    assert set(served) == {fid(d) for d in documents()}
    for doc in documents():
        row = store.record("csw", fid(doc))
        assert row is not None and row.status == "active" and row.format == "iso19139"
        assert row.payload_sha is not None
        kept = store.payload(row.payload_sha)
        assert kept is not None
        # what the store keeps and the feed serves is the record as the catalogue sent it
        assert record_facts(parse_xml(kept[1])) == record_facts(parse_xml(doc))
        assert canonical(parse_xml(kept[1])) == served[fid(doc)]
    if mode == "full":  # selective: nothing modified since today, nothing listed or withdrawn
        since = run(store, source, http)
        assert since.status == "succeeded" and since.listing["incremental"]
        assert since.listing["seen"] == 0 and counts(since) == {}
    again = run(store, source, http, full=True)  # every record listed: unchanged, skipped
    assert again.status == "succeeded", again.message
    assert counts(again) == {"skipped": len(documents())}


def test_initial_checks_date_duplicates_withdrawal_and_reinstatement(
    peer: CswPeer, csw: PeerServer, http: HttpClient, store: RecordStore
) -> None:
    source = csw_source(csw.url, mode="full", selective=False)
    run(store, source, http)
    items = list(peer.items)
    first = items[3]  # a generated record, stamped 2025-01-01T00:00:00

    def with_stamp(item: CswItem, stamp: str, title: str = "") -> CswItem:
        payload = item.payload.replace(item.modified.encode(), stamp.encode())
        if title:
            payload = payload.replace(b"Flood Zones for Planning", title.encode())
        return replace(item, modified=stamp, payload=payload)

    # changed content, same metadata date: not newer, so skipped
    peer.items = [*items[:3], with_stamp(first, first.modified, "Renamed"), *items[4:]]
    peer._cache.clear()
    job = run(store, source, http)
    assert counts(job) == {"skipped": len(items)}
    # a newer metadata date: updated
    newer = with_stamp(first, "2025-06-01T00:00:00", "Renamed")
    peer.items = [*items[:3], newer, *items[4:]]
    peer._cache.clear()
    job = run(store, source, http)
    assert counts(job) == {"updated": 1, "skipped": len(items) - 1}
    # the same fileIdentifier twice in one listing: the newer one is kept
    newest = with_stamp(first, "2025-07-01T00:00:00", "Newest")
    peer.items = [*items[:3], newest, *items[4:], replace(newer, internal_id="dup")]
    peer._cache.clear()
    job = run(store, source, http)
    row = store.record("csw", first.file_identifier)
    assert row is not None and row.source_datestamp == "2025-07-01T00:00:00Z"
    assert job.counters.get("updated") == 1
    # gone from the catalogue: a complete listing withdraws it
    peer.items = [*items[:3], *items[4:]]
    peer._cache.clear()
    job = run(store, source, http, allow_mass_withdrawal=True)
    assert job.counters.get("withdrawn") == 1
    assert (store.record("csw", first.file_identifier) or row).status == "withdrawn"
    assert first.file_identifier not in oai_records(store)  # no longer served with metadata
    # back with a newer date: reinstated
    peer.items = [*items[:3], with_stamp(first, "2025-08-01T00:00:00", "Back"), *items[4:]]
    peer._cache.clear()
    job = run(store, source, http)
    back = store.record("csw", first.file_identifier)
    assert back is not None and back.status == "active"
    assert back.source_datestamp == "2025-08-01T00:00:00Z"


def test_truncated_csw_listing_withdraws_nothing(
    peer: CswPeer, csw: PeerServer, http: HttpClient, store: RecordStore
) -> None:
    source = csw_source(csw.url, mode="full", page_size=3)
    run(store, source, http)
    peer.faults.cap = 6
    job = run(store, source, http, full=True)
    assert job.status == "partial"
    assert "stopped short: 6 of 10" in job.message and "nothing withdrawn" in job.message
    assert store.db.count_records("csw", "active") == len(documents())


def test_csw_exception_report_fails_the_job_and_keeps_what_was_stored(
    peer: CswPeer, csw: PeerServer, http: HttpClient, store: RecordStore
) -> None:
    source = csw_source(csw.url, mode="full", page_size=4)
    peer.faults.exception_on_page = 2
    job = run(store, source, http)
    assert job.status == "failed"
    assert "exception report: NoApplicableCode" in job.message
    assert job.counters.get("added") == 4  # the first page is kept


def test_waf_bad_files_are_rejected_per_record_with_their_error(
    http: HttpClient, store: RecordStore
) -> None:
    from datetime import UTC, datetime

    app = WafApp()
    stamp = datetime(2026, 3, 14, tzinfo=UTC)
    for name, doc in bundled_gemini_records():
        app.put(name, doc, stamp)
    app.put("broken.xml", b"<gmd:MD_Metadata xmlns:gmd='http://www.isotc211.org/2005/gmd'>", stamp)
    app.put(
        "entity.xml",
        b'<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>',
        stamp,
    )
    with PeerServer(app) as server:
        source = SourceConfig(
            name="waf", type="waf", url=server.url + "waf/", format="iso19139",
            validation=GEMINI_CHAIN,
        )  # fmt: skip
        job = run(store, source, http)
    assert counts(job) == {"added": 3, "rejected": 2}
    errors = {e["local_id"]: e for e in store.jobs.errors(job.id)}
    broken = errors[server.url + "waf/broken.xml"]
    assert broken["rule"] == "parseError" and "malformed XML" in (broken["message"] or "")
    entity = errors[server.url + "waf/entity.xml"]
    assert entity["rule"] == "unsafeInput" and "DOCTYPE" in (entity["message"] or "")


def test_single_document_end_to_end(http: HttpClient, store: RecordStore) -> None:
    from datetime import UTC, datetime

    app = WafApp()
    name, doc = bundled_gemini_records()[2]
    app.put(name, doc, datetime(2026, 1, 1, tzinfo=UTC))
    with PeerServer(app) as server:
        source = SourceConfig(
            name="one", type="gemini-doc", url=server.url + "waf/" + name, format="iso19139",
            validation=GEMINI_CHAIN,
        )  # fmt: skip
        job = run(store, source, http)
    assert counts(job) == {"added": 1}
    assert set(oai_records(store)) == {fid(doc)}


@pytest.mark.parametrize(("action", "expected"), [("reject", "rejected"), ("warn", "added")])
def test_publisher_cross_check_on_the_job(
    csw: PeerServer, http: HttpClient, store: RecordStore, action: str, expected: str
) -> None:
    check = ValidationStep(
        "iso-publisher", (("action", action), ("organisation", "Northshire County Council"))
    )
    source = replace(csw_source(csw.url, mode="full"), validation=(check, *GEMINI_CHAIN))
    job = run(store, source, http)
    assert counts(job) == {expected: len(documents())}
    message = "not associated with the registered publisher 'Northshire County Council'"
    if action == "reject":  # the job lists each record with the finding
        errors = store.jobs.errors(job.id)
        assert len(errors) == len(documents())
        assert all((e["message"] or "").startswith(message) for e in errors)
        assert {(e["stage"], e["severity"]) for e in errors} == {("iso-publisher", "violation")}
    else:  # stored, the warning kept with the record
        for doc in documents():
            row = store.record("csw", fid(doc))
            assert row is not None and row.status == "active"
            assert message in row.findings
