"""The ckan harvester against the local CKAN-like action API (aggregator.demo.peers.ckan), on its
own and through the whole pipeline into an on-disk store."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from storecheck import assert_consistent

from aggregator.config import (
    HarvestSettings,
    HttpSettings,
    Secret,
    Settings,
    SourceConfig,
)
from aggregator.core.errors import ConfigError, HarvestError, TransportError
from aggregator.core.models import JobStatus, RawRecord
from aggregator.demo.peers.ckan import CkanPeer, MemoryCatalogue
from aggregator.demo.peers.ckan_data import generate_package, load_bundled_packages
from aggregator.demo.peers.ckan_query import Query
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.checkpoints import Checkpoint
from aggregator.harvest.ckan import CkanHarvester, action_url, solr_date
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.journal import JobRow
from aggregator.store.records import RecordStore

BASE = "http://127.0.0.1:8000/"


def package(i: int) -> dict[str, Any]:
    return generate_package(i)


@pytest.fixture
def catalogue() -> MemoryCatalogue:
    return MemoryCatalogue(package(i) for i in range(23))


@pytest.fixture
def peer(catalogue: MemoryCatalogue) -> CkanPeer:
    return CkanPeer(catalogue)


@pytest.fixture
def server(peer: CkanPeer) -> Iterator[PeerServer]:
    with PeerServer(peer) as running:
        yield running


@pytest.fixture
def http() -> HttpClient:
    return HttpClient(
        HttpSettings(allow_private=True, retries=1, backoff=0.01, timeout=5.0), sleep=lambda s: None
    )


def harvest(
    http: HttpClient, url: str, checkpoint: str | None = None, **options: Any
) -> tuple[list[RawRecord], Listing]:
    source = SourceConfig(name="portal", type="ckan", url=url, format="ckan", options=options)
    listing = Listing(incremental=checkpoint is not None)
    request = HarvestRequest(full=False, checkpoint=checkpoint, cancel=threading.Event())
    harvester = CkanHarvester(source, http)  # type: ignore[arg-type]
    return list(harvester.list_records(request, listing)), listing


def test_pages_by_key_with_a_stable_sort(
    http: HttpClient, server: PeerServer, peer: CkanPeer
) -> None:
    records, listing = harvest(http, server.url, rows=5)
    assert [r.local_id for r in records] == [package(i)["id"] for i in range(23)]
    assert listing.complete and not listing.incremental
    assert listing.expected_total == 23 and listing.seen == 23
    assert listing.pages == 6  # 5 + 4 + 4 + 4 + 4 + 2: each page re-reads the bound's package
    first = peer.requests[0]
    assert first["sort"] == "metadata_modified asc, id asc" and "fq" not in first
    assert {r["start"] for r in peer.requests} == {"0"}  # never an offset
    bounds = [solr_date(package(i)["metadata_modified"]) for i in (4, 8, 12, 16, 20)]
    assert [r["fq"] for r in peer.requests[1:]] == [f"metadata_modified:[{b} TO *]" for b in bounds]
    assert json.loads(records[3].payload) == package(3)
    assert records[3].datestamp == datetime(2024, 1, 1, 0, 3, tzinfo=UTC)
    assert all(r.media_type == "application/json" and r.format == "ckan" for r in records)
    checkpoint = Checkpoint.read(listing.next_checkpoint)
    assert checkpoint is not None and checkpoint.since == package(22)["metadata_modified"]
    assert checkpoint.full_at is not None


def test_action_url_and_solr_dates() -> None:
    assert action_url("https://p.example/") == "https://p.example/api/3/action/package_search"
    assert action_url("https://p.example/data/api/3/action/package_search") == (
        "https://p.example/data/api/3/action/package_search"
    )
    assert solr_date("2015-09-15T13:17:51.405474") == "2015-09-15T13:17:51.405Z"


def test_a_catalogue_changing_mid_listing_is_read_whole(
    http: HttpClient, server: PeerServer, peer: CkanPeer, catalogue: MemoryCatalogue
) -> None:
    """After the first page, one package read already is deleted and one is inserted: the
    rows move left, so plain offsets would jump over a package. Paging by key, nothing moves:
    every package of the catalogue is listed, each once."""

    def change(number: int, params: dict[str, str]) -> None:
        if number == 2:
            catalogue.delete(package(1)["id"])
            catalogue.put(package(100))

    peer.on_request = change
    records, listing = harvest(http, server.url, rows=5)
    ids = [r.local_id for r in records]
    now = {p for p in catalogue.packages}
    assert now <= set(ids), now - set(ids)
    assert len(ids) == len(set(ids))  # nothing yielded twice
    assert listing.complete and listing.truncated_reason is None


def test_plain_offsets_would_skip(
    http: HttpClient, server: PeerServer, peer: CkanPeer, catalogue: MemoryCatalogue
) -> None:
    """The same change, checked against the peer: offset 5 after the deletion holds what
    was at offset 6, so a harvester stepping by `rows` would never see package 5."""
    catalogue.delete(package(1)["id"])
    count, page = catalogue.search(
        Query(), [("metadata_modified", True), ("id", True)], 5, 5, False
    )
    assert count == 22 and page[0]["id"] == package(6)["id"]


def test_an_updated_package_moves_to_the_end_and_its_newer_version_wins(
    http: HttpClient, server: PeerServer, peer: CkanPeer, catalogue: MemoryCatalogue
) -> None:
    def change(number: int, params: dict[str, str]) -> None:
        if number == 2:
            catalogue.touch(package(2)["id"], "2025-01-01T00:00:00.000000")

    peer.on_request = change
    records, listing = harvest(http, server.url, rows=5)
    versions = [r for r in records if r.local_id == package(2)["id"]]
    assert len(versions) == 2 and versions[-1].datestamp == datetime(2025, 1, 1, tzinfo=UTC)
    assert {r.local_id for r in records} == set(catalogue.packages)
    assert listing.complete


def test_a_server_ignoring_fq_truncates(
    http: HttpClient, server: PeerServer, peer: CkanPeer
) -> None:
    peer.fail("repeat", from_request=3)  # the third page is the second again
    records, listing = harvest(http, server.url, rows=5)
    assert not listing.complete
    assert "the server does not apply fq" in (listing.truncated_reason or "")
    assert len(records) == 9  # the two pages read are still delivered (and stored)


def test_a_count_that_does_not_add_up_truncates(
    http: HttpClient, server: PeerServer, peer: CkanPeer, catalogue: MemoryCatalogue
) -> None:
    class Lying(MemoryCatalogue):
        def search(self, *args: Any, **kwargs: Any) -> tuple[int, list[dict[str, Any]]]:
            count, page = super().search(*args, **kwargs)
            return count + 3, page

    peer.catalogue = Lying(catalogue.packages.values())
    records, listing = harvest(http, server.url, rows=5)
    assert not listing.complete and len(records) == 23
    assert "an empty page although the server counts 3 more" in (listing.truncated_reason or "")


@pytest.mark.parametrize(
    ("kind", "error", "words"),
    [
        ("success-false", HarvestError, ["success: false", "Solr returned an error"]),
        ("html-500", TransportError, ["HTTP 500", "Internal Server Error", "HTML error page"]),
        ("not-json", HarvestError, ["did not answer JSON", "maintenance mode"]),
        ("status", TransportError, ["HTTP 503", "status 503"]),
    ],
)
def test_bad_answers_are_errors_with_the_response_excerpt(
    http: HttpClient,
    server: PeerServer,
    peer: CkanPeer,
    kind: str,
    error: type[Exception],
    words: list[str],
) -> None:
    peer.fail(kind, times=-1, from_request=2)
    with pytest.raises(error) as caught:
        harvest(http, server.url, rows=5)
    for word in words:
        assert word in str(caught.value)


def test_a_slow_answer_is_waited_for_within_the_timeout(server: PeerServer, peer: CkanPeer) -> None:
    peer.fail("slow", delay=0.6, from_request=2)
    patient = HttpClient(HttpSettings(allow_private=True, timeout=3.0, retries=0))
    records, listing = harvest(patient, server.url, rows=5)
    assert len(records) == 23 and listing.complete
    peer.fail("slow", delay=1.5, from_request=len(peer.requests) + 2, times=-1)
    hasty = HttpClient(HttpSettings(allow_private=True, timeout=0.4, retries=0))
    with pytest.raises(TransportError, match=r"(?i)timed? ?out|did not answer in time"):
        harvest(hasty, server.url, rows=5)


def test_incremental_runs_ask_for_newer_packages_only(
    http: HttpClient, server: PeerServer, peer: CkanPeer, catalogue: MemoryCatalogue
) -> None:
    _records, listing = harvest(http, server.url, rows=5)
    catalogue.touch(package(7)["id"], "2025-02-01T10:00:00.123456")
    peer.requests.clear()
    records, again = harvest(http, server.url, checkpoint=listing.next_checkpoint, rows=5)
    assert peer.requests[0]["fq"] == "metadata_modified:[2024-01-01T00:22:00.000Z TO *]"
    assert [r.local_id for r in records] == [package(22)["id"], package(7)["id"]]
    assert again.incremental and again.complete
    saved = Checkpoint.read(again.next_checkpoint)
    first = Checkpoint.read(listing.next_checkpoint)
    assert saved is not None and first is not None
    assert saved.since == "2025-02-01T10:00:00.123456" and saved.full_at == first.full_at


def test_a_full_run_is_due_after_full_every_days(
    http: HttpClient, server: PeerServer, peer: CkanPeer
) -> None:
    long_ago = (datetime.now(UTC) - timedelta(days=8)).isoformat()
    checkpoint = Checkpoint("2024-01-01T00:22:00", long_ago).dump()
    records, listing = harvest(http, server.url, checkpoint=checkpoint, rows=5)
    assert len(records) == 23 and not listing.incremental and listing.complete
    assert "fq" not in peer.requests[0]
    assert any("full run due" in n for n in listing.notes)
    recent = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    checkpoint = Checkpoint("2024-01-01T00:22:00", recent).dump()
    records, listing = harvest(http, server.url, checkpoint=checkpoint, rows=5)
    assert len(records) == 1 and listing.incremental
    _records, listing = harvest(http, server.url, checkpoint=checkpoint, rows=5, full_every_days=1)
    assert not listing.incremental


def test_options_are_checked(http: HttpClient) -> None:
    source = SourceConfig(name="p", type="ckan", url="http://x/", options={"rows": 1})
    with pytest.raises(ConfigError, match="rows must be from 2 to 1000"):
        CkanHarvester.check_config(source)
    source = SourceConfig(name="p", type="ckan", url="http://x/", options={"row": 10})
    with pytest.raises(ConfigError, match="unknown option"):
        CkanHarvester.check_config(source)


# --- through the pipeline ------------------------------------------------------------------


class Env:
    def __init__(self, tmp: Path, url: str, **source: Any) -> None:
        self.source = SourceConfig(name="portal", type="ckan", url=url, format="ckan", **source)
        self.settings = Settings(
            config_path=None,
            store_path=tmp / "store",
            base_iri=BASE,
            http=HttpSettings(allow_private=True, backoff=0.01, retries=1, timeout=5.0),
            harvest=HarvestSettings(workers=0, withdraw_brake=0.5),
            sources={"portal": self.source},
        )
        self.http = HttpClient(self.settings.http, sleep=lambda s: None)
        self.store = RecordStore(self.settings.store_path, BASE)

    def run(self, **kw: Any) -> JobRow:
        return run_source(self.settings, self.store, "portal", RunOptions(**kw), http=self.http)


@pytest.fixture
def env(tmp_path: Path, server: PeerServer) -> Iterator[Env]:
    e = Env(tmp_path, server.url, options={"rows": 10})
    yield e
    e.store.close()


def test_pipeline_stores_withdraws_and_skips_unchanged(
    env: Env, catalogue: MemoryCatalogue, peer: CkanPeer
) -> None:
    job = env.run()
    assert job.status == JobStatus.SUCCEEDED.value, job.message
    assert job.counters.get("added") == 23
    assert env.store.db.counts_by_status("portal") == {"active": 23}
    assert_consistent(env.store)
    again = env.run()  # incremental: the newest package again (the range is inclusive)
    assert again.listing["incremental"] and again.counters.get("skipped") == 1
    full = env.run(full=True)
    assert full.counters.get("skipped") == 23
    catalogue.delete(package(5)["id"])
    gone = env.run(full=True)
    assert gone.status == JobStatus.SUCCEEDED.value
    assert gone.counters.get("withdrawn") == 1
    catalogue.delete(package(6)["id"])
    peer.fail("repeat", from_request=len(peer.requests) + 2)
    truncated = env.run(full=True)
    assert truncated.status == JobStatus.PARTIAL.value
    assert "nothing withdrawn" in truncated.message
    assert env.store.db.counts_by_status("portal") == {"active": 22, "withdrawn": 1}
    assert_consistent(env.store)


def test_pipeline_job_fails_with_the_excerpt_of_an_html_page(env: Env, peer: CkanPeer) -> None:
    peer.fail("html-500", times=-1, from_request=2)
    job = env.run()
    assert job.status == JobStatus.FAILED.value
    assert "Internal Server Error" in job.message and "HTTP 500" in job.message
    assert job.counters.get("added") == 10  # the first page is kept
    assert env.store.db.counts_by_status("portal") == {"active": 10}


def test_bundled_packages_are_stored_and_shacl_conformant(tmp_path: Path) -> None:
    with PeerServer(CkanPeer(MemoryCatalogue(load_bundled_packages()))) as server:
        e = Env(tmp_path, server.url)
        job = e.run()
        e.store.close()
    assert job.status == JobStatus.SUCCEEDED.value, job.message
    # the water-bodies package's EU dataset-type term has no label in the package: the range
    # step adds the bundled one, so no package is flagged
    assert {k: v for k, v in job.counters.items() if v} == {"added": len(load_bundled_packages())}


def test_a_private_catalogue_needs_the_api_key_from_the_environment(
    tmp_path: Path, catalogue: MemoryCatalogue
) -> None:
    secret = copy.deepcopy(package(0)) | {"id": "private-1", "private": True}
    catalogue.put(secret)
    with PeerServer(CkanPeer(catalogue, api_key="s3cret")) as server:
        e = Env(
            tmp_path,
            server.url,
            options={"include_private": True},
            secrets={"api_key": Secret("CKAN_KEY", "s3cret")},
            headers={"Authorization": Secret("CKAN_KEY", "s3cret")},
        )
        job = e.run()
        assert job.status == JobStatus.SUCCEEDED.value, job.message
        assert job.counters.get("added") == 24
        e.store.close()
        anonymous = Env(tmp_path / "anon", server.url)
        refused = anonymous.run()
        anonymous.store.close()
    assert refused.status == JobStatus.FAILED.value
    assert "HTTP 403" in refused.message and "Access denied" in refused.message


def test_probe_reads_the_package_count(
    http: HttpClient, server: PeerServer, peer: CkanPeer
) -> None:
    source = SourceConfig(name="p", type="ckan", url=server.url, format="ckan")
    lines = CkanHarvester(source, http).probe()  # type: ignore[arg-type]
    assert lines == [f"package_search at {server.url}api/3/action/package_search: 23 packages"]
    assert peer.requests[-1]["rows"] == "0"


def test_spatial_and_dates_reach_the_store(tmp_path: Path) -> None:
    """Packages as data.gov.uk and catalog.data.gov write them (a GeoJSON ``spatial`` extra,
    CKAN's record dates, one with the publisher's own dates, one with a broken geometry),
    harvested from the local CKAN peer into an on-disk store."""
    data = Path(__file__).parent / "data" / "ckan"
    packages = [
        json.loads((data / "dgu-package-show.json").read_text())["result"],
        *json.loads((data / "datagov-package-search.json").read_text())["result"]["results"],
        *json.loads((data / "govdata-packages.json").read_text()),
    ]
    with PeerServer(CkanPeer(MemoryCatalogue(packages))) as server:
        e = Env(tmp_path, server.url)
        try:
            job = e.run()
            assert job.status == JobStatus.SUCCEEDED.value, job.message
            assert job.counters.get("added") == 5  # the broken geometry does not lose a record
            query = """
                PREFIX dct: <http://purl.org/dc/terms/>
                PREFIX dcat: <http://www.w3.org/ns/dcat#>
                PREFIX locn: <http://www.w3.org/ns/locn#>
                SELECT ?d ?issued ?modified ?geometry ?bbox WHERE {
                  ?d a dcat:Dataset ; dct:issued ?issued ; dct:modified ?modified .
                  OPTIONAL { ?d dct:spatial [ locn:geometry ?geometry ; dcat:bbox ?bbox ] }
                }"""
            rows = {
                str(r[0].value).rsplit("/", 1)[-1]: tuple(
                    None if v is None else (v.value, v.datatype.value) for v in list(r)[1:]
                )
                for r in e.store.graphs.query(query)  # type: ignore[union-attr]
            }
            assert_consistent(e.store)
        finally:
            e.store.close()
    gsp, xsd = "http://www.opengis.net/ont/geosparql#", "http://www.w3.org/2001/XMLSchema#"
    dgu = rows["5b1d2a3c-8e4f-4d60-9a7b-3c2e1f0d9a81"]
    assert dgu[0] == ("2019-03-04T10:21:13.482913Z", xsd + "dateTime")  # metadata_created
    # metadata_modified (the store holds the canonical form of the value: no trailing zero)
    assert dgu[1] == ("2024-06-18T07:55:02.11348Z", xsd + "dateTime")
    assert dgu[2] is not None and dgu[2][1] == gsp + "geoJSONLiteral"
    assert json.loads(dgu[2][0])["coordinates"][0][2] == [1.768, 55.812]
    assert dgu[3] == (
        "POLYGON((-6.418 49.864,1.768 49.864,1.768 55.812,-6.418 55.812,-6.418 49.864))",
        gsp + "wktLiteral",
    )
    hotspot = rows["0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"]  # the publisher's dates win
    assert hotspot[:2] == (("2021-12-01", xsd + "date"), ("2022-04-30T12:00:00Z", xsd + "dateTime"))
    assert hotspot[3] == ("POINT(-77.0365 38.8977)", gsp + "wktLiteral")
    broken = rows["2d3c4b5a-6978-4877-b6a5-94837261f0e1"]
    assert broken[2] is None and broken[0] == ("2021-02-01T12:00:00.5Z", xsd + "dateTime")
