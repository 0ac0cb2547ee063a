"""The csw harvester against a real CSW 2.0.2 server: pycsw from PyPI, on 127.0.0.1, with a
SQLite repository loaded from our own GEMINI records (tests/pycsw_peer.py)."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aggregator.config import HttpSettings, SourceConfig
from aggregator.core.errors import HarvestError
from aggregator.core.models import RawRecord
from aggregator.core.xml import parse_xml
from aggregator.demo.peers.gemini_samples import bundled_gemini_records, generate_gemini_record
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.csw import CswHarvester
from aggregator.harvest.csw.client import dump_checkpoint, load_checkpoint
from aggregator.harvest.gemini import record_facts
from aggregator.net.client import HttpClient

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # pycsw 2.x imports pkg_resources (deprecated)
    from pycsw_peer import start_pycsw

# pycsw runs in this process (server threads): the deprecation warnings of its SQLAlchemy 1.4
# and OWSLib are not ours
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]
GENERATED = 22


def fixture_documents() -> list[tuple[str, bytes]]:
    return bundled_gemini_records() + [
        (f"generated-{i:03d}.xml", generate_gemini_record(i)) for i in range(GENERATED)
    ]


def facts_by_id() -> dict[str, Any]:
    found = {}
    for _, doc in fixture_documents():
        facts = record_facts(parse_xml(doc))
        found[facts.file_identifier] = facts
    return found


@pytest.fixture(scope="module")
def pycsw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PeerServer]:
    with start_pycsw(tmp_path_factory.mktemp("pycsw"), fixture_documents()) as running:
        yield running


@pytest.fixture
def http() -> Iterator[HttpClient]:
    settings = HttpSettings(allow_private=True, retries=0, timeout=20.0)
    with HttpClient(settings) as client:
        yield client


def harvest(
    http: HttpClient, url: str, checkpoint: str | None = None, **options: Any
) -> tuple[list[RawRecord], Listing]:
    source = SourceConfig(name="pycsw", type="csw", url=url, format="iso19139", options=options)
    harvester = CswHarvester(source, http.session(source))
    listing = Listing(incremental=checkpoint is not None)
    request = HarvestRequest(full=False, checkpoint=checkpoint, cancel=threading.Event())
    return list(harvester.list_records(request, listing)), listing


@pytest.mark.parametrize("binding", ["get", "post"])
@pytest.mark.parametrize("mode", ["identifiers", "full"])
def test_pycsw_is_harvested_whole_in_both_modes_and_bindings(
    pycsw: PeerServer, http: HttpClient, mode: str, binding: str
) -> None:
    records, listing = harvest(http, pycsw.url + "csw", mode=mode, binding=binding, page_size=7)
    expected = facts_by_id()
    assert sorted(r.local_id for r in records) == sorted(expected)
    assert listing.complete, listing.truncated_reason
    assert listing.allows_withdrawal
    assert listing.expected_total == len(expected)
    assert listing.pages == 4  # 25 records, 7 a page
    for record in records:
        facts = record_facts(parse_xml(record.payload))
        assert facts == expected[record.local_id]
        assert record.datestamp == facts.date_stamp


def test_pycsw_capabilities_name_the_modified_queryable(
    pycsw: PeerServer, http: HttpClient
) -> None:
    _, listing = harvest(http, pycsw.url + "csw", mode="full")
    _, caps = load_checkpoint(listing.next_checkpoint)
    assert caps is not None
    assert caps.modified_queryable == "apiso:Modified"
    assert caps.max_record_default == 10
    assert caps.supports("GetRecords", "get") and caps.supports("GetRecords", "post")
    assert caps.iso_schema() == "http://www.isotc211.org/2005/gmd"


@pytest.mark.parametrize("binding", ["get", "post"])
def test_pycsw_selective_harvest_with_modified(
    pycsw: PeerServer, http: HttpClient, binding: str
) -> None:
    _, first = harvest(http, pycsw.url + "csw", mode="full")
    _, caps = load_checkpoint(first.next_checkpoint)
    assert caps is not None
    # the bundled records are stamped 2026; the generated ones 2025
    checkpoint = dump_checkpoint("2026-01-01", caps)
    records, listing = harvest(
        http, pycsw.url + "csw", checkpoint=checkpoint, mode="full", binding=binding
    )
    expected = {i for i, f in facts_by_id().items() if f.date_stamp.year == 2026}
    assert {r.local_id for r in records} == expected
    assert listing.incremental and listing.complete


@pytest.mark.parametrize("binding", ["get", "post"])
def test_pycsw_type_filter(pycsw: PeerServer, http: HttpClient, binding: str) -> None:
    records, listing = harvest(
        http, pycsw.url + "csw", mode="full", binding=binding, types=["series", "service"]
    )
    levels = sorted(record_facts(parse_xml(r.payload)).hierarchy_level for r in records)
    assert levels == ["series", "service"]
    assert listing.complete


def test_pycsw_exception_report_is_an_error(pycsw: PeerServer, http: HttpClient) -> None:
    source = SourceConfig(name="p", type="csw", url=pycsw.url + "csw", format="iso19139")
    session = http.session(source)
    from aggregator.harvest.csw.client import CswClient

    with pytest.raises(HarvestError, match="exception report"):
        CswClient(session, pycsw.url + "csw", "get").get_record_by_id(
            ["x"], "http://example.org/not-a-schema"
        )


def test_fixture_repository_is_ours(tmp_path: Path) -> None:
    # the repository loader refuses to run half loaded: all fixture records are in it
    with start_pycsw(tmp_path, bundled_gemini_records()) as running:
        settings = HttpSettings(allow_private=True, retries=0, timeout=20.0)
        with HttpClient(settings) as http:
            records, listing = harvest(http, running.url + "csw", mode="full")
    assert len(records) == 3 and listing.complete
