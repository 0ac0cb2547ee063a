"""The csw harvester against our own CSW 2.0.2 fixture server (aggregator.demo.peers.csw)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from aggregator.config import HttpSettings, SourceConfig
from aggregator.core.errors import ConfigError, HarvestError, TransportError
from aggregator.core.models import RawRecord
from aggregator.core.xml import parse_xml
from aggregator.demo.peers.csw import CswFaults, CswItem, CswPeer, GeneratedCatalogue, item_of
from aggregator.demo.peers.gemini_samples import bundled_gemini_records, generate_gemini_record
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.csw import CswHarvester
from aggregator.harvest.csw.client import ISO_SCHEMA_DMS, load_checkpoint
from aggregator.harvest.gemini import record_facts
from aggregator.net.client import HttpClient
from aggregator.plugin import harvesters

N = 23


def documents(count: int = N) -> list[bytes]:
    return [generate_gemini_record(i) for i in range(count)]


@pytest.fixture
def peer() -> CswPeer:
    return CswPeer.of_documents(documents())


@pytest.fixture
def server(peer: CswPeer) -> Iterator[PeerServer]:
    with PeerServer(peer) as running:
        yield running


@pytest.fixture
def http() -> Iterator[HttpClient]:
    settings = HttpSettings(allow_private=True, retries=1, backoff=0.01, timeout=5.0)
    with HttpClient(settings, sleep=lambda _s: None) as client:
        yield client


def harvest(
    http: HttpClient,
    url: str,
    checkpoint: str | None = None,
    cancel: threading.Event | None = None,
    **options: Any,
) -> tuple[list[RawRecord], Listing]:
    source = SourceConfig(name="csw", type="csw", url=url, format="iso19139", options=options)
    harvester = CswHarvester(source, http.session(source))
    listing = Listing(incremental=checkpoint is not None)
    request = HarvestRequest(full=False, checkpoint=checkpoint, cancel=cancel or threading.Event())
    return list(harvester.list_records(request, listing)), listing


def expected_ids(count: int = N) -> list[str]:
    return [record_facts(parse_xml(d)).file_identifier for d in documents(count)]


def test_registered_under_its_name_with_the_iso_format() -> None:
    assert harvesters.get("csw") is CswHarvester
    assert CswHarvester.formats == ("iso19139",)


@pytest.mark.parametrize("binding", ["get", "post"])
@pytest.mark.parametrize("mode", ["identifiers", "full"])
def test_both_modes_and_bindings_list_every_record(
    peer: CswPeer, server: PeerServer, http: HttpClient, mode: str, binding: str
) -> None:
    records, listing = harvest(http, server.url + "csw", mode=mode, binding=binding, page_size=5)
    assert [r.local_id for r in records] == expected_ids()
    assert listing.complete and listing.allows_withdrawal
    assert listing.expected_total == N and listing.seen == N
    assert listing.pages == 5  # 23 records, 5 per page
    assert any("paging stopped: nextRecord=0" in n for n in listing.notes)
    assert peer.bindings_seen[binding] > 0
    assert peer.requests["GetCapabilities"] == 1
    first = records[0]
    assert first.format == "iso19139" and first.media_type == "application/xml"
    assert first.datestamp is not None and first.datestamp.year == 2025
    # the payload is the record itself, parseable on its own, the same record as served
    root = parse_xml(first.payload)
    assert root.tag == "{http://www.isotc211.org/2005/gmd}MD_Metadata"
    assert record_facts(root) == record_facts(parse_xml(generate_gemini_record(0)))
    assert first.url is not None and "GetRecordById" in first.url
    if mode == "identifiers":
        # ids from GetRecords, then GetRecordById in batches of 10: ceil(5/10) per page
        assert peer.requests["GetRecordById"] == 5
    else:
        assert peer.requests["GetRecordById"] == 0


def test_bundled_samples_are_served_whole_byte_for_byte_apart_from_the_declaration(
    http: HttpClient,
) -> None:
    samples = bundled_gemini_records()
    peer = CswPeer.of_documents(doc for _, doc in samples)
    with PeerServer(peer) as server:
        records, listing = harvest(http, server.url, mode="full")
    assert listing.complete
    assert {record_facts(parse_xml(r.payload)).hierarchy_level for r in records} == {
        "dataset",
        "series",
        "service",
    }
    for record, (_, doc) in zip(records, samples, strict=True):
        assert record_facts(parse_xml(record.payload)) == record_facts(parse_xml(doc))


def test_page_size_defaults_to_max_record_default(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.max_record_default = 4
    _, listing = harvest(http, server.url, mode="full")
    assert listing.pages == 6 and listing.complete


def test_capabilities_are_cached_in_the_checkpoint(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    _, listing = harvest(http, server.url, mode="full")
    assert listing.next_checkpoint is not None
    since, caps = load_checkpoint(listing.next_checkpoint)
    assert caps is not None and caps.modified_queryable == "apiso:Modified"
    assert caps.max_record_default == 10 and caps.supports("GetRecords", "post")
    assert since is not None
    harvest(http, server.url, checkpoint=listing.next_checkpoint, mode="full")
    assert peer.requests["GetCapabilities"] == 1  # the second run used the cached one


def test_selective_harvest_filters_on_modified_since_the_last_run(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    _, first = harvest(http, server.url, mode="full")
    assert not first.incremental
    _, caps = load_checkpoint(first.next_checkpoint)
    assert caps is not None
    from aggregator.harvest.csw.client import dump_checkpoint

    # records 0..22 are stamped 2025-01-01 00:00 + i minutes: since 2025-01-01T00:20 keeps 3
    checkpoint = dump_checkpoint("2025-01-01T00:20:00", caps)
    records, listing = harvest(http, server.url, checkpoint=checkpoint, mode="full")
    assert [r.local_id for r in records] == expected_ids()[20:]
    assert listing.incremental and listing.complete and not listing.allows_withdrawal


def test_without_a_modified_queryable_every_run_is_a_full_listing(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.modified_queryable = False
    _, first = harvest(http, server.url, mode="full")
    records, listing = harvest(http, server.url, checkpoint=first.next_checkpoint, mode="full")
    assert len(records) == N
    assert not listing.incremental and listing.allows_withdrawal


def test_type_filter_is_sent(http: HttpClient) -> None:
    peer = CswPeer.of_documents(doc for _, doc in bundled_gemini_records())
    with PeerServer(peer) as server:
        records, listing = harvest(http, server.url, mode="full", types=["service"])
    assert [record_facts(parse_xml(r.payload)).hierarchy_level for r in records] == ["service"]
    assert listing.complete and listing.expected_total == 1


def test_auto_binding_takes_get_when_post_is_not_advertised(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.bindings = ("get",)
    records, _ = harvest(http, server.url, mode="full")
    assert len(records) == N
    assert peer.bindings_seen["post"] == 0


def test_the_dms_schema_uri_is_accepted(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.schema_uri = ISO_SCHEMA_DMS
    records, listing = harvest(http, server.url, mode="identifiers", binding="get")
    assert len(records) == N and listing.complete
    assert ISO_SCHEMA_DMS.replace("/", "%2F").replace(":", "%3A") in (records[0].url or "")


@pytest.mark.parametrize("binding", ["get", "post"])
def test_exception_report_with_http_200_is_an_error(
    peer: CswPeer, server: PeerServer, http: HttpClient, binding: str
) -> None:
    peer.faults.exception_on_page = 2
    with pytest.raises(HarvestError, match="exception report: NoApplicableCode"):
        harvest(http, server.url, mode="full", binding=binding)


def test_exception_report_on_capabilities_is_an_error(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.exception_on_capabilities = True
    with pytest.raises(HarvestError, match="exception report"):
        harvest(http, server.url)


@pytest.mark.parametrize(
    ("fault", "rule"),
    [
        ("zero", "nextRecord=0 on page 1"),
        ("backwards", "going backwards"),
        ("beyond", "beyond numberOfRecordsMatched=23"),
    ],
)
def test_a_wrong_next_record_stops_the_loop_and_truncates(
    peer: CswPeer, server: PeerServer, http: HttpClient, fault: Any, rule: str
) -> None:
    peer.faults.next_record = fault
    records, listing = harvest(http, server.url, mode="full", page_size=5)
    assert len(records) == 5
    assert not listing.complete and not listing.allows_withdrawal
    assert listing.truncated_reason is not None and rule in listing.truncated_reason
    assert any(rule in note for note in listing.notes)


def test_a_next_record_that_skips_ahead_is_ignored_for_the_records_returned(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.next_record = "skip"
    records, listing = harvest(http, server.url, mode="full", page_size=5)
    assert [r.local_id for r in records] == expected_ids()
    assert listing.complete


def test_short_pages_are_followed_by_what_was_returned(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.short_pages = 3
    records, listing = harvest(http, server.url, mode="full", page_size=10)
    assert [r.local_id for r in records] == expected_ids()
    assert listing.complete and listing.pages == 8


def test_a_result_cap_is_a_truncated_listing(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.cap = 12
    records, listing = harvest(http, server.url, mode="identifiers", page_size=5)
    assert len(records) == 12
    assert listing.truncated_reason is not None
    assert "stopped short: 12 of 23" in listing.truncated_reason
    assert not listing.allows_withdrawal


def test_count_drift_is_a_truncated_listing(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.drift_after_page = 1
    records, listing = harvest(http, server.url, mode="full", page_size=5)
    assert listing.truncated_reason is not None
    assert "numberOfRecordsMatched changed from 23 to 24" in listing.truncated_reason
    assert len(records) == N


def test_records_missing_from_get_record_by_id_truncate(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.missing_by_id = frozenset({"cat-00004"})
    records, listing = harvest(http, server.url, mode="identifiers")
    assert len(records) == N - 1
    assert listing.truncated_reason is not None
    assert "returned 9 of 10 requested" in listing.truncated_reason


def test_a_server_ignoring_the_output_schema_is_an_error(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.ignore_output_schema = True
    with pytest.raises(HarvestError, match="instead of ISO 19139 records"):
        harvest(http, server.url, mode="full")


def test_slow_server_times_out_with_a_transport_error(peer: CswPeer, server: PeerServer) -> None:
    peer.faults.delay = 1.0
    settings = HttpSettings(allow_private=True, retries=0, timeout=0.3)
    with HttpClient(settings) as http, pytest.raises(TransportError, match="GET"):
        harvest(http, server.url)


def test_a_slow_server_within_the_timeout_is_harvested(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.delay = 0.05
    records, listing = harvest(http, server.url, mode="full")
    assert len(records) == N and listing.complete


def test_cancel_truncates(peer: CswPeer, server: PeerServer, http: HttpClient) -> None:
    cancel = threading.Event()
    cancel.set()
    records, listing = harvest(http, server.url, cancel=cancel, mode="full")
    assert records == [] and listing.truncated_reason == "cancelled"


def test_up_to_date_records_are_listed_without_payload(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    source = SourceConfig(
        name="csw", type="csw", url=server.url, format="iso19139", options={"mode": "full"}
    )
    held = set(expected_ids()[:10])
    asked: list[int] = []

    def up_to_date(listed: Any) -> frozenset[str]:
        asked.append(len(listed))
        return frozenset(i for i, _ in listed if i in held)

    request = HarvestRequest(full=False, checkpoint=None, up_to_date=up_to_date)
    listing = Listing(incremental=False)
    records = list(CswHarvester(source, http.session(source)).list_records(request, listing))
    assert [r.payload_omitted for r in records] == [True] * 10 + [False] * 13
    assert all(r.payload == b"" for r in records[:10])
    assert asked == [10, 10, 3]  # one question per page


def test_a_response_with_an_external_entity_is_refused(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    peer.faults.doctype_attack = True
    with pytest.raises(HarvestError, match="DOCTYPE declaration is refused") as caught:
        harvest(http, server.url, mode="full")
    assert caught.value.code == "unsafeInput"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "everything"}, "mode"),
        ({"page_size": 10_000}, "page_size"),
        ({"types": ["datasets"]}, "unknown record type"),
        ({"output_schema": "http://www.opengis.net/cat/csw/2.0.2"}, "output_schema"),
    ],
)
def test_bad_options_fail_at_configuration(options: dict[str, Any], message: str) -> None:
    source = SourceConfig(name="c", type="csw", url="http://example.org/csw", options=options)
    with pytest.raises(ConfigError, match=message):
        CswHarvester.check_config(source)


def test_url_must_be_http() -> None:
    source = SourceConfig(name="c", type="csw", url="ftp://example.org/csw")
    with pytest.raises(ConfigError, match="http"):
        CswHarvester.check_config(source)


def test_identifiers_mode_asks_the_store_once_per_batch(
    peer: CswPeer, server: PeerServer, http: HttpClient
) -> None:
    source = SourceConfig(
        name="csw", type="csw", url=server.url, format="iso19139",
        options={"mode": "identifiers", "page_size": 10, "batch_size": 4},
    )  # fmt: skip
    asked: list[int] = []

    def up_to_date(listed: Any) -> frozenset[str]:
        asked.append(len(listed))
        return frozenset(i for i, _ in listed)

    request = HarvestRequest(full=False, checkpoint=None, up_to_date=up_to_date)
    records = list(CswHarvester(source, http.session(source)).list_records(request, Listing(False)))
    assert all(r.payload_omitted and r.payload == b"" for r in records) and len(records) == N
    assert asked == [4, 4, 2, 4, 4, 2, 3]  # pages of 10, 10, 3 in batches of 4


def test_a_generated_catalogue_pages_without_making_every_record(http: HttpClient) -> None:
    """The peer of ``bench/million.py`` serves 300,000 generated records: a page of a full
    listing makes the records on it, not the whole catalogue first (which took minutes)."""
    made: list[int] = []

    def make(i: int) -> CswItem:
        made.append(i)
        return item_of(f"gen-{i}", generate_gemini_record(i))

    peer = CswPeer(GeneratedCatalogue(300_000, make=make), CswFaults(max_record_default=10))
    with PeerServer(peer) as running:
        source = SourceConfig(
            name="csw", type="csw", url=running.url + "csw", format="iso19139",
            options={"mode": "full", "page_size": 10},
        )  # fmt: skip
        listing = Listing(incremental=False)
        records = CswHarvester(source, http.session(source)).list_records(
            HarvestRequest(full=True, checkpoint=None), listing
        )
        first = [next(records) for _ in range(15)]  # two pages (and one fetched ahead)
        records.close()
    assert [r.local_id for r in first] == expected_ids(15)
    assert listing.expected_total == 300_000
    assert 20 <= len(made) <= 40 and max(made) < 40
