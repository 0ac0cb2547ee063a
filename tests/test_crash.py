"""Crash consistency with a real kill: a harvest in a subprocess is SIGKILLed mid-run,
several times, at different points; the store must reopen consistent and converge."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from storecheck import assert_consistent

from aggregator.config import load_settings
from aggregator.core.models import JobStatus
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import generated_items
from aggregator.demo.peers.sample_data import generate_dataset
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

N = 600


def _progress(db: Path, job_id: int) -> int:
    """Records the given job has dealt with so far (its counters, written with each batch)."""
    if not db.exists():
        return -1
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            row = con.execute("SELECT counters FROM jobs WHERE id = ?", (job_id,)).fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return -1
    return sum(json.loads(row[0]).values()) if row else -1


@pytest.mark.slow
def write_config(tmp_path: Path, url: str) -> Path:
    """aggregator.toml of one OAI-PMH source, in-process mapping, batches of 20."""
    config = tmp_path / "aggregator.toml"
    config.write_text(
        f"""
[store]
path = "store"
base_iri = "http://127.0.0.1:8000/"
[http]
allow_private = true
[harvest]
workers = 0
batch_size = 20
[sources.portal]
type = "oai-pmh"
url = "{url}"
""",
        encoding="utf-8",
    )
    return config


def test_kill_mid_harvest_then_converge(tmp_path: Path) -> None:
    items = generated_items(
        N,
        generate_dataset,
        identifier="oai:data.example.org:dataset-{:06d}",
        start=datetime(2024, 1, 1, tzinfo=UTC),
        step=timedelta(minutes=1),
    )
    peer = OaiPmhPeer(items, page_size=25)
    peer.faults.delay = 0.05  # slow pages keep the harvest running long enough to be killed
    with PeerServer(peer) as server:
        config = write_config(tmp_path, f"{server.url}oai")
        db = tmp_path / "store" / "state.sqlite3"
        cmd = [
            sys.executable,
            "-m",
            "aggregator.cli",
            "-c",
            str(config),
            "harvest",
            "portal",
            "--full",
        ]
        killed_at = []
        for job_id, threshold in enumerate((20, 150, 300), start=1):  # progressively later
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while _progress(db, job_id) < threshold and time.monotonic() < deadline:
                assert proc.poll() is None, "the harvest ended before it could be killed"
                time.sleep(0.005)
            time.sleep(0.013 * job_id)  # land at different points of a batch
            assert proc.poll() is None, "the harvest ended before it could be killed"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            killed_at.append(_progress(db, job_id))

        settings = load_settings(config)
        with RecordStore(settings.store_path, settings.base_iri) as store:
            assert_consistent(store)  # recovery ran at open; every record old or new
            killed_jobs = store.jobs.recent("portal")
            assert len(killed_jobs) == 3
            assert all(j.status == JobStatus.FAILED.value for j in killed_jobs)
            assert all("died" in j.message for j in killed_jobs)
            peer.faults.delay = 0
            job = run_source(
                settings, store, "portal", RunOptions(full=True), http=HttpClient(settings.http)
            )
            assert job.status == JobStatus.SUCCEEDED.value, job.message
            assert store.db.counts_by_status("portal") == {"active": N}
            assert_consistent(store)
            again = run_source(
                settings, store, "portal", RunOptions(full=True), http=HttpClient(settings.http)
            )
            assert again.counters["skipped"] == N
    assert all(0 < k < N for k in killed_at), killed_at


def test_kill_between_the_graph_writes_of_one_record_written_in_consecutive_batches(
    tmp_path: Path,
) -> None:
    """One record is written by two consecutive batches of a job (it changed at the source
    while the listing ran, so it is listed again at the end). The process dies after the graph
    write of the first batch and before that of the second: the state database holds the
    second version, the graph store the first. Clearing the first batch's pending marks must
    leave the second batch's mark on the record, so that opening the store repairs it."""
    from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
    from aggregator.demo.peers.sample_data import generate_identifier
    from aggregator.store.names import StoreNames

    def item(i: int, revision: int = 0, when: datetime | None = None) -> OaiItem:
        stamp = when or datetime(2024, 1, 1, tzinfo=UTC) + timedelta(minutes=i)
        return OaiItem(
            generate_identifier(i), stamp, (), False, generate_dataset(i, revision=revision)
        )

    # 110 records, 25 a page, batches of 20: the pipeline takes them in chunks of 100, so the
    # 100th (index 99) closes the first chunk and is written by the 5th batch; it changes
    # when the 5th page is asked for, so the listing ends with its new version (6th batch)
    changing = 99
    newer = datetime(2024, 6, 1, tzinfo=UTC)
    items = MemoryItems(item(i) for i in range(110))
    peer = OaiPmhPeer(items, page_size=25)
    pages = 0

    def peer_app(environ: dict[str, object], start_response: object) -> list[bytes]:
        nonlocal pages
        if "ListRecords" in str(environ.get("QUERY_STRING", "")):
            pages += 1
            if pages == 5:  # the record was on page 4: it moves to the end of the listing
                items.put(item(changing, revision=1, when=newer))
        return peer(environ, start_response)  # type: ignore[arg-type]

    with PeerServer(peer_app) as server:  # type: ignore[arg-type]
        config = write_config(tmp_path, f"{server.url}oai")
        settings = load_settings(config)
        ident = generate_identifier(changing)
        graph_iri = StoreNames(settings.store_path, settings.base_iri).record_iri("portal", ident)
        marker = tmp_path / "marker"
        child = Path(__file__).parent / "crash_child.py"
        stamp = newer.strftime("%Y-%m-%dT%H:%M:%SZ")
        cmd = [sys.executable, str(child), str(config), "portal", graph_iri, stamp, str(marker)]
        done = subprocess.run(cmd, capture_output=True, timeout=180, check=False)
        assert marker.exists(), done.stderr.decode()[-2000:]
        assert marker.read_text().startswith("killed"), marker.read_text()
        assert done.returncode == -signal.SIGKILL
        with RecordStore(settings.store_path, settings.base_iri) as store:
            row = store.record("portal", ident)
            assert row is not None and row.source_datestamp == stamp  # the journal's version
            assert_consistent(store)  # every record's named graph equals its journalled state
            assert store.recovery.repaired >= 1  # the record's graph held the older one
            ask = (
                f"ASK {{ GRAPH <{graph_iri}> {{ ?r <https://w3id.org/ld-aggregator/ns#"
                f'sourceDatestamp> "{stamp}"^^<http://www.w3.org/2001/XMLSchema#dateTime> }} }}'
            )
            assert bool(store.graphs.query(ask))
            peer.faults.delay = 0
            job = run_source(
                settings, store, "portal", RunOptions(full=True), http=HttpClient(settings.http)
            )
            assert job.status == JobStatus.SUCCEEDED.value, job.message
            assert store.db.counts_by_status("portal") == {"active": 110}
            assert_consistent(store)
