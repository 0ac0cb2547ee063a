"""ISO 19115-2 records and CSW envelopes harvested through local peers: the waf, gemini-doc and
csw harvesters list each ISO record (``gmd:MD_Metadata`` or ``gmi:MI_Metadata``) of a document
under its own fileIdentifier, as the record element alone, and the pipeline validates, maps
and stores each one as it does a bare record.

Golden documents: tests/data/iso/ (see tests/test_iso_flavours.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from lxml import etree
from test_harvest_iso_pipeline import GEMINI_CHAIN, counts, run
from test_iso_flavours import (
    BY_ID,
    DATASET,
    DUBLIN_CORE,
    EMPTY_BY_ID,
    EXCEPTION,
    GMI_ID,
    GMI_RECORD,
    SERIES,
    TWO,
)

from aggregator.config import HttpSettings, SourceConfig, ValidationSettings, ValidationStep
from aggregator.config.profiles import profile_steps
from aggregator.core.errors import HarvestError
from aggregator.core.models import RawRecord
from aggregator.core.xml import parse_xml
from aggregator.demo.peers.csw import CswPeer
from aggregator.demo.peers.gemini_samples import bundled_gemini_records
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.waf import WafApp
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.gemini import GeminiDocHarvester, record_facts
from aggregator.harvest.waf import WafHarvester
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

MARCH = datetime(2026, 3, 14, 9, 30, tzinfo=UTC)
BASE = "http://127.0.0.1:8000/"
GMD_ROOT = "{http://www.isotc211.org/2005/gmd}MD_Metadata"
GMI_ROOT = "{http://www.isotc211.org/2005/gmi}MI_Metadata"
DATASET_ID = "4f0c6f3e-5a7b-4d0e-9b1a-2c3d4e5f6a01"
SERIES_ID = "b7e2a9d4-1c3f-4e8a-9d2b-6f5e4d3c2b10"
#: a chain for ISO records that are not UK GEMINI: ISO 19139 XSD and Table A.1, then SHACL
ISO_CHAIN = (*profile_steps("iso19139", ValidationSettings()), ValidationStep("shacl"))


@pytest.fixture
def http() -> Iterator[HttpClient]:
    with HttpClient(HttpSettings(allow_private=True, retries=0, timeout=20)) as client:
        yield client


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RecordStore]:
    with RecordStore(tmp_path / "store", BASE) as opened:
        yield opened


def harvest(
    http: HttpClient,
    url: str,
    kind: type[WafHarvester] | type[GeminiDocHarvester] = WafHarvester,
    checkpoint: str | None = None,
    up_to_date: Any = None,
) -> tuple[list[RawRecord], Listing]:
    source = SourceConfig(name="w", type=kind.name, url=url, format="iso19139")
    harvester = kind(source, http.session(source))
    listing = Listing(incremental=checkpoint is not None)
    request = HarvestRequest(
        full=False, checkpoint=checkpoint, cancel=threading.Event(), up_to_date=up_to_date
    )
    return list(harvester.list_records(request, listing)), listing


def canonical(element: etree._Element) -> bytes:
    """Exclusive C14N: the same bytes whatever namespaces an envelope around it declares."""
    return etree.tostring(element, method="c14n", exclusive=True)


def records_of(path: Path) -> dict[str, bytes]:
    """fileIdentifier -> canonical record, for each ISO record of a golden document."""
    root = parse_xml(path.read_bytes())
    found = [root] if root.tag in (GMD_ROOT, GMI_ROOT) else list(root.iter(GMD_ROOT, GMI_ROOT))
    return {record_facts(r).file_identifier: canonical(r) for r in found}


def alone(record: RawRecord) -> etree._Element:
    """The record's payload parsed on its own (no envelope around it)."""
    root = parse_xml(record.payload)
    assert root.tag in (GMD_ROOT, GMI_ROOT)
    return root


# -- WAF -------------------------------------------------------------------------------------------
def test_waf_lists_each_record_of_an_envelope_alone(http: HttpClient) -> None:
    app = WafApp()
    app.put("by-id.xml", BY_ID.read_bytes(), MARCH)
    app.put("two.xml", TWO.read_bytes(), MARCH)
    app.put("dublin-core.xml", DUBLIN_CORE, MARCH)
    with PeerServer(app) as server:
        records, listing = harvest(http, server.url + "waf/")
        assert [r.local_id for r in records] == [DATASET_ID, SERIES_ID, GMI_ID]
        expected = records_of(BY_ID) | records_of(TWO)
        for record in records:
            assert canonical(alone(record)) == expected[record.local_id]
            assert record_facts(alone(record)).date_stamp == record.datestamp
        assert [alone(r).tag for r in records] == [GMD_ROOT, GMD_ROOT, GMI_ROOT]
        assert listing.complete and listing.allows_withdrawal
        assert any(
            n.startswith("dublin-core.xml: the csw:GetRecordsResponse holds no ISO 19139 record")
            and "2 csw:Record" in n
            for n in listing.notes
        )

        # the next run: an envelope whose listing date and records are unchanged is not fetched
        held = {DATASET_ID, SERIES_ID, GMI_ID}

        def up_to_date(listed: Any) -> frozenset[str]:
            return frozenset(i for i, _ in listed if i in held)

        before = dict(app.hits)
        again, _ = harvest(
            http, server.url + "waf/", checkpoint=listing.next_checkpoint, up_to_date=up_to_date
        )
        assert [(r.local_id, r.payload_omitted) for r in again] == [
            (DATASET_ID, True),
            (SERIES_ID, True),
            (GMI_ID, True),
        ]
        assert app.hits["/waf/two.xml"] == before["/waf/two.xml"]
        # one record of the envelope not held (newer elsewhere): the file is fetched again
        held.discard(GMI_ID)
        third, _ = harvest(
            http, server.url + "waf/", checkpoint=listing.next_checkpoint, up_to_date=up_to_date
        )
        assert [r.payload_omitted for r in third] == [True, False, False]
        assert app.hits["/waf/two.xml"] == before["/waf/two.xml"] + 1


def test_waf_file_that_is_an_exception_report_withdraws_nothing(http: HttpClient) -> None:
    app = WafApp()
    for name, doc in bundled_gemini_records():
        app.put(name, doc, MARCH)
    app.put("answer.xml", EXCEPTION, MARCH)
    app.put("gmi.xml", GMI_RECORD.read_bytes(), MARCH)
    with PeerServer(app) as server:
        records, listing = harvest(http, server.url + "waf/")
    assert len(records) == 4  # the three GEMINI records and the gmi one are listed
    [gmi] = [r for r in records if r.local_id == GMI_ID]
    assert gmi.payload == GMI_RECORD.read_bytes()  # a bare record: byte for byte
    assert any("answer.xml: an OWS exception report" in n and "abc-123" in n for n in listing.notes)
    assert listing.truncated_reason == "answer.xml is an OWS exception report"
    assert not listing.allows_withdrawal


# -- single document ----------------------------------------------------------------------------
def test_single_document_envelope_gives_each_record(http: HttpClient) -> None:
    app = WafApp()
    app.put("two.xml", TWO.read_bytes(), MARCH)
    app.put("gmi.xml", GMI_RECORD.read_bytes(), MARCH)
    with PeerServer(app) as server:
        records, listing = harvest(http, server.url + "waf/two.xml", kind=GeminiDocHarvester)
        assert [r.local_id for r in records] == [SERIES_ID, GMI_ID]
        assert [canonical(alone(r)) for r in records] == list(records_of(TWO).values())
        assert listing.complete and listing.expected_total == 2 and listing.seen == 2
        [gmi], _ = harvest(http, server.url + "waf/gmi.xml", kind=GeminiDocHarvester)
    assert gmi.local_id == GMI_ID and gmi.payload == GMI_RECORD.read_bytes()
    assert gmi.datestamp == datetime(2025, 11, 3, 14, 22, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (EXCEPTION, "an OWS exception report, not an ISO 19139 record: InvalidParameterValue"),
        (EMPTY_BY_ID, "the csw:GetRecordByIdResponse holds no ISO 19139 record"),
        (DUBLIN_CORE, r"holds no ISO 19139 record \(2 csw:Record"),
        (
            TWO.read_bytes().replace(f">{GMI_ID}<".encode(), b"><", 1),
            "record 2 of the csw:GetRecordsResponse has no fileIdentifier",
        ),
    ],
)
def test_single_document_errors_name_what_was_found(
    http: HttpClient, body: bytes, message: str
) -> None:
    app = WafApp()
    app.put("one.xml", body, MARCH)
    with PeerServer(app) as server, pytest.raises(HarvestError, match=message):
        harvest(http, server.url + "waf/one.xml", kind=GeminiDocHarvester)


# -- through the pipeline into the store ----------------------------------------------------------
def stored_root(store: RecordStore, source: str, identifier: str) -> etree._Element:
    row = store.record(source, identifier)
    assert row is not None and row.status == "active" and row.payload_sha is not None
    kept = store.payload(row.payload_sha)
    assert kept is not None
    return parse_xml(kept[1])


def test_waf_envelopes_are_validated_mapped_and_stored_record_by_record(
    http: HttpClient, store: RecordStore
) -> None:
    app = WafApp()
    app.put("by-id.xml", BY_ID.read_bytes(), MARCH)
    app.put("two.xml", TWO.read_bytes(), MARCH)
    with PeerServer(app) as server:
        source = SourceConfig(
            name="waf", type="waf", url=server.url + "waf/", format="iso19139",
            validation=ISO_CHAIN,
        )  # fmt: skip
        job = run(store, source, http)
    assert job.status == "succeeded", job.message
    assert counts(job) == {"added": 3}
    expected = records_of(BY_ID) | records_of(TWO)
    for identifier, record in expected.items():
        assert canonical(stored_root(store, "waf", identifier)) == record
    assert stored_root(store, "waf", GMI_ID).tag == GMI_ROOT


@pytest.mark.parametrize(("chain", "expected"), [(ISO_CHAIN, "added"), (GEMINI_CHAIN, "rejected")])
def test_single_gmi_document_end_to_end(
    http: HttpClient, store: RecordStore, chain: Any, expected: str
) -> None:
    app = WafApp()
    app.put("sst.xml", GMI_RECORD.read_bytes(), MARCH)
    with PeerServer(app) as server:
        source = SourceConfig(
            name="one", type="gemini-doc", url=server.url + "waf/sst.xml", format="iso19139",
            validation=chain,
        )  # fmt: skip
        job = run(store, source, http)
    assert counts(job) == {expected: 1}
    if expected == "added":
        assert stored_root(store, "one", GMI_ID).tag == GMI_ROOT
    else:  # UK GEMINI stays strict: a 19115-2 record is not GEMINI, and the finding says so
        [error] = store.jobs.errors(job.id)
        assert error["rule"] == "gemini-root" and "gmi:MI_Metadata" in (error["message"] or "")


@pytest.mark.parametrize("mode", ["identifiers", "full"])
def test_csw_keeps_gmi_records(http: HttpClient, store: RecordStore, mode: str) -> None:
    documents = [GMI_RECORD.read_bytes(), DATASET.read_bytes(), SERIES.read_bytes()]
    with PeerServer(CswPeer.of_documents(documents)) as csw:
        source = SourceConfig(
            name="csw", type="csw", url=csw.url, format="iso19139", options={"mode": mode},
            validation=ISO_CHAIN,
        )  # fmt: skip
        job = run(store, source, http)
    assert job.status == "succeeded", job.message
    assert counts(job) == {"added": 3}
    root = stored_root(store, "csw", GMI_ID)
    assert root.tag == GMI_ROOT and canonical(root) == records_of(GMI_RECORD)[GMI_ID]
    assert root.find("{http://www.isotc211.org/2005/gmi}acquisitionInformation") is not None
