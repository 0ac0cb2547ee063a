"""The ogc-records harvester against the local OGC API - Records server
(aggregator.demo.peers.ogc_records), on its own and through the pipeline into an on-disk store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from storecheck import assert_consistent

from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.core.errors import HarvestError
from aggregator.core.models import JobStatus, RawRecord
from aggregator.demo.peers.ogc_records import OgcRecordsPeer, RecordCollection
from aggregator.demo.peers.ogc_records_data import generate_record, load_bundled_records, record_id
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.checkpoints import Checkpoint
from aggregator.harvest.ogc_records import OgcRecordsHarvester
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.journal import JobRow
from aggregator.store.records import RecordStore

BASE = "http://127.0.0.1:8000/"
BIG = 2500


@pytest.fixture
def peer() -> OgcRecordsPeer:
    return OgcRecordsPeer(
        [
            RecordCollection("sample", "Sample records", features=load_bundled_records()),
            RecordCollection("big", "Many records", count=BIG, make=generate_record),
        ]
    )


@pytest.fixture
def server(peer: OgcRecordsPeer) -> Iterator[PeerServer]:
    with PeerServer(peer) as running:
        yield running


@pytest.fixture
def http() -> HttpClient:
    return HttpClient(HttpSettings(allow_private=True, retries=0, timeout=10.0))


def harvest(
    http: HttpClient, url: str, checkpoint: str | None = None, **options: Any
) -> tuple[list[RawRecord], Listing]:
    source = SourceConfig(
        name="records", type="ogc-records", url=url, format="ogc-records", options=options
    )
    listing = Listing(incremental=checkpoint is not None)
    request = HarvestRequest(full=False, checkpoint=checkpoint, cancel=threading.Event())
    harvester = OgcRecordsHarvester(source, http)  # type: ignore[arg-type]
    return list(harvester.list_records(request, listing)), listing


def test_thousands_of_records_follow_opaque_next_links(
    http: HttpClient, server: PeerServer, peer: OgcRecordsPeer
) -> None:
    records, listing = harvest(http, server.url, collection="big", limit=100)
    assert [r.local_id for r in records] == [record_id(i) for i in range(BIG)]
    assert listing.complete and listing.expected_total == BIG and listing.pages == 25
    assert listing.seen == BIG
    paths = [p for p, _q in peer.requests]
    assert paths[:2] == ["/conformance", "/collections"]
    items = [q for p, q in peer.requests if p.endswith("/items")]
    assert items[0] == "limit=100&f=json"
    assert all(q.startswith("cursor=") for q in items[1:])  # the next href, verbatim
    assert records[7].datestamp == datetime(2024, 1, 1, 0, 7, tzinfo=UTC)
    assert records[7].media_type == "application/geo+json"


def test_building_urls_instead_of_following_next_fails_at_the_peer(
    http: HttpClient, server: PeerServer
) -> None:
    response = http.get(f"{server.url}collections/big/items?offset=100", raise_for_status=False)
    assert response.status == 400


def test_every_record_collection_without_the_option(http: HttpClient, server: PeerServer) -> None:
    records, listing = harvest(http, server.url, limit=500)
    assert len(records) == BIG + 3 and listing.complete


def test_an_unknown_collection_is_a_clear_error(http: HttpClient, server: PeerServer) -> None:
    with pytest.raises(HarvestError, match=r"no collection 'nope' \(offered: big, sample\)"):
        harvest(http, server.url, collection="nope")


def test_a_malformed_feature_is_delivered_for_its_own_error(
    http: HttpClient, server: PeerServer, peer: OgcRecordsPeer
) -> None:
    peer.collections["big"].malformed.add(42)
    records, listing = harvest(http, server.url, collection="big", limit=100)
    assert listing.complete and len(records) == BIG
    assert records[42].local_id.startswith("malformed-")


def test_incremental_runs_send_datetime_since(
    http: HttpClient, server: PeerServer, peer: OgcRecordsPeer
) -> None:
    _records, first = harvest(http, server.url, collection="big", limit=1000)
    saved = Checkpoint.read(first.next_checkpoint)
    assert saved is not None and saved.since == "2024-01-02T17:39:00Z"  # record 2499
    peer.collections["big"].count = BIG + 5  # five new records
    records, again = harvest(http, server.url, checkpoint=first.next_checkpoint, collection="big")
    assert again.incremental and again.complete
    assert [r.local_id for r in records] == [record_id(i) for i in range(BIG - 1, BIG + 5)]
    assert "datetime=2024-01-02T17%3A39%3A00Z%2F.." in [q for p, q in peer.requests][-1]


# --- through the pipeline ------------------------------------------------------------------


class Env:
    def __init__(self, tmp: Path, url: str, **options: Any) -> None:
        source = SourceConfig(
            name="records", type="ogc-records", url=url, format="ogc-records", options=options
        )
        self.settings = Settings(
            config_path=None,
            store_path=tmp / "store",
            base_iri=BASE,
            http=HttpSettings(allow_private=True, retries=0, timeout=10.0),
            harvest=HarvestSettings(workers=0),
            sources={"records": source},
        )
        self.http = HttpClient(self.settings.http)
        self.store = RecordStore(self.settings.store_path, BASE)

    def run(self, **kw: Any) -> JobRow:
        return run_source(self.settings, self.store, "records", RunOptions(**kw), http=self.http)


def test_pipeline_stores_records_and_reports_the_malformed_one(
    tmp_path: Path, server: PeerServer, peer: OgcRecordsPeer
) -> None:
    peer.collections["sample"].malformed.add(1)
    env = Env(tmp_path, server.url, collection="sample")
    job = env.run()
    assert job.status == JobStatus.SUCCEEDED.value, job.message
    counters = {k: v for k, v in job.counters.items() if v}
    assert counters == {"added": 2, "errored": 1} or counters == {"added": 2, "rejected": 1}
    errors = env.store.jobs.errors(job.id)
    assert any("the feature has no id" in str(e["message"]) for e in errors)
    peer.collections["sample"].malformed.clear()
    again = env.run(full=True)
    assert {k: v for k, v in again.counters.items() if v}.get("added") == 1
    assert env.store.db.counts_by_status("records").get("active") == 3
    assert_consistent(env.store)
    env.store.close()


def test_pipeline_harvests_a_large_collection_shacl_conformant(
    tmp_path: Path, server: PeerServer
) -> None:
    env = Env(tmp_path, server.url, collection="big", limit=500)
    job = env.run()
    env.store.close()
    assert job.status == JobStatus.SUCCEEDED.value, job.message
    assert {k: v for k, v in job.counters.items() if v} == {"added": BIG}


def test_source_probe_reads_conformance_and_collections(tmp_path: Path, server: PeerServer) -> None:
    from click.testing import CliRunner

    from aggregator.cli import main

    config = tmp_path / "aggregator.toml"
    config.write_text(
        f'[http]\nallow_private = true\n[sources.records]\ntype = "ogc-records"\n'
        f'url = "{server.url}"\noptions = {{ collection = "sample" }}\n'
        f'[sources.wrong]\ntype = "ogc-records"\nurl = "{server.url}"\n'
        'options = { collection = "nope" }\n',
        encoding="utf-8",
    )
    ok = CliRunner().invoke(main, ["-c", str(config), "source", "probe", "records"])
    assert ok.exit_code == 0, ok.output
    assert "conformance: http://www.opengis.net/spec/ogcapi-records-1/1.0/conf/core" in ok.output
    assert "collection sample (record, harvested): Sample records" in ok.output
    assert "collection big (record, not harvested)" in ok.output
    bad = CliRunner().invoke(main, ["-c", str(config), "source", "probe", "wrong"])
    assert bad.exit_code != 0 and "no collection 'nope'" in bad.output
