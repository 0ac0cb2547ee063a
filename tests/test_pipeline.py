"""The record lifecycle end to end: a real OAI-PMH peer on 127.0.0.1, the real OAI-PMH
harvester (sickle), the dcat mapper, SHACL, and an on-disk record store."""

from __future__ import annotations

import multiprocessing
import sqlite3
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from storecheck import assert_consistent, make_unversioned

from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.core.models import JobStatus
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.oaipmh import OaiPmhHarvester
from aggregator.jobs.lifecycle import UpToDate
from aggregator.jobs.pipeline import RunOptions, exit_code, run_source
from aggregator.net.client import HttpClient
from aggregator.store.journal import JobRow
from aggregator.store.packing import ZSTD_MAGIC, pack, unpack
from aggregator.store.records import RecordStore

T0 = datetime(2024, 3, 1, tzinfo=UTC)
BASE = "http://127.0.0.1:8000/"


def item(i: int, revision: int = 0, *, when: datetime | None = None) -> OaiItem:
    return OaiItem(
        generate_identifier(i),
        when or T0 + timedelta(hours=i + 100 * revision),
        ("even" if i % 2 == 0 else "odd",),
        False,
        generate_dataset(i, revision=revision),
    )


class Env:
    def __init__(self, tmp: Path, peer: OaiPmhPeer, url: str, brake: float = 0.2) -> None:
        self.peer = peer
        self.items = peer.items
        self.source = SourceConfig(name="portal", type="oai-pmh", url=url)
        self.settings = Settings(
            config_path=None,
            store_path=tmp / "store",
            base_iri=BASE,
            http=HttpSettings(allow_private=True, backoff=0.01, max_backoff=0.05, retries=2),
            harvest=HarvestSettings(withdraw_brake=brake, workers=0),
            sources={"portal": self.source},
        )
        self.http = HttpClient(self.settings.http, sleep=lambda s: None)
        self.store = RecordStore(self.settings.store_path, BASE)

    def run(self, **kw: bool) -> JobRow:
        return run_source(self.settings, self.store, "portal", RunOptions(**kw), http=self.http)

    def reopen(self) -> None:
        self.store.close()
        self.store = RecordStore(self.settings.store_path, BASE)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    items = MemoryItems(item(i) for i in range(25))
    peer = OaiPmhPeer(items, page_size=7)
    with PeerServer(peer) as server:
        e = Env(tmp_path, peer, f"{server.url}oai")
        yield e
        e.store.close()


def counts(job: JobRow) -> dict[str, int]:
    return {k: v for k, v in job.counters.items() if v}


def test_first_harvest_pages_and_stores_everything(env: Env) -> None:
    job = env.run()
    assert job.status == JobStatus.SUCCEEDED.value
    assert counts(job) == {"added": 25}
    assert job.listing["pages"] == 4
    assert job.listing["complete"]
    assert env.store.db.counts_by_status("portal") == {"active": 25}
    assert_consistent(env.store)
    # the original payload is kept byte for byte and linked from the catalogue record
    row = env.store.record("portal", generate_identifier(3))
    assert row is not None
    assert row.payload_sha
    _media_type, payload = env.store.payload(row.payload_sha)  # type: ignore[misc]
    assert payload == generate_dataset(3).rstrip(b"\n")  # the element; the newline is envelope
    # the catalogue record is queryable in the union default graph
    q = (
        "PREFIX dcat: <http://www.w3.org/ns/dcat#> PREFIX foaf: <http://xmlns.com/foaf/0.1/>"
        " SELECT (COUNT(?r) AS ?n) WHERE { ?r a dcat:CatalogRecord ; foaf:primaryTopic ?d ."
        " ?d a dcat:Dataset }"
    )
    assert next(iter(env.store.graphs.query(q)))[0].value == "25"  # type: ignore[call-overload]


def test_payloads_are_kept_as_zstd_frames_and_older_zlib_rows_still_read(env: Env) -> None:
    env.run()
    row = env.store.record("portal", generate_identifier(4))
    assert row is not None and row.payload_sha
    with sqlite3.connect(env.store.path / "state.sqlite3") as db:
        (packed,) = db.execute(
            "SELECT data FROM payloads WHERE sha256 = ?", (row.payload_sha,)
        ).fetchone()
    assert packed[:4] == ZSTD_MAGIC and unpack(packed) == generate_dataset(4).rstrip(b"\n")
    assert len(packed) < len(zlib.compress(unpack(packed), 1))
    # a store written before zstd holds zlib streams: they read as before, and an unchanged
    # record is still unchanged (its payload is compared by hash, not by packed bytes)
    with sqlite3.connect(env.store.path / "state.sqlite3") as db:
        for sha, data in db.execute("SELECT sha256, data FROM payloads").fetchall():
            db.execute(
                "UPDATE payloads SET data = ? WHERE sha256 = ?",
                (zlib.compress(unpack(data), 1), sha),
            )
    env.reopen()
    _media_type, payload = env.store.payload(row.payload_sha)  # type: ignore[misc]
    assert payload == generate_dataset(4).rstrip(b"\n")
    assert counts(env.run(full=True, force=True)) == {"unchanged": 25}
    assert unpack(b"") == b"" and unpack(None) == b"" and unpack(pack(b"")) == b""


def test_unchanged_records_are_not_rewritten(env: Env) -> None:
    env.run()
    before = {r.local_id: (r.modified, r.job_id) for r in env.store.db.iter_records()}
    incremental = env.run()  # from the checkpoint on: nothing changed since
    assert counts(incremental) == {}
    again = env.run(full=True)
    assert counts(again) == {"skipped": 25}  # same source dates: not even mapped
    forced = env.run(full=True, force=True)
    assert counts(forced) == {"unchanged": 25}  # mapped, same canonical hash: not rewritten
    after = {r.local_id: (r.modified, r.job_id) for r in env.store.db.iter_records()}
    assert after == before


class CountingPool(ProcessPoolExecutor):
    """A real pool of mapping workers that counts the chunks it is given."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, mp_context=multiprocessing.get_context("forkserver"))
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def test_an_unchanged_reharvest_sends_nothing_to_the_workers(env: Env) -> None:
    with CountingPool() as pool:
        first = run_source(
            env.settings, env.store, "portal", RunOptions(), http=env.http, executor=pool
        )
        assert counts(first) == {"added": 25} and pool.submitted == 1
        again = run_source(
            env.settings, env.store, "portal", RunOptions(full=True), http=env.http, executor=pool
        )
        assert counts(again) == {"skipped": 25} and pool.submitted == 1  # all skipped by date
        env.items.put(item(3, revision=1))
        changed = run_source(
            env.settings, env.store, "portal", RunOptions(full=True), http=env.http, executor=pool
        )
        assert counts(changed) == {"skipped": 24, "updated": 1} and pool.submitted == 2


@pytest.mark.parametrize(("own", "used"), [(None, 1), (0, 0), (2, 2)])
def test_a_source_may_set_its_own_number_of_workers(env: Env, own: int | None, used: int) -> None:
    source = replace(env.source, workers=own)
    settings = replace(
        env.settings, harvest=replace(env.settings.harvest, workers=1), sources={"portal": source}
    )
    job = run_source(settings, env.store, "portal", RunOptions(), http=env.http)
    assert counts(job) == {"added": 25}
    assert job.listing["workers"] == used


def test_changed_record_is_updated_and_not_newer_is_skipped(env: Env) -> None:
    env.run()
    env.items.put(item(4, revision=1))  # newer date, new content
    older = T0 - timedelta(days=1)  # older date, different content: must be skipped
    env.items.put(
        OaiItem(generate_identifier(5), older, (), False, generate_dataset(5, revision=2))
    )
    job = env.run(full=True)
    assert counts(job) == {"updated": 1, "skipped": 24}
    row4 = env.store.record("portal", generate_identifier(4))
    assert row4 is not None
    assert row4.job_id == job.id
    assert env.store.dataset_ntriples(row4) != b""
    assert_consistent(env.store)


def test_incremental_run_uses_the_checkpoint(env: Env) -> None:
    first = env.run()
    assert first.listing.get("checkpoint_saved")
    env.items.put(item(30, when=datetime.now(UTC) + timedelta(seconds=5)))
    second = env.run()
    assert second.listing["incremental"] is True
    assert second.listing["checkpoint_used"] == first.listing["checkpoint_saved"]
    assert counts(second) == {"added": 1}
    assert env.store.db.counts_by_status("portal") == {"active": 26}
    full = env.run(full=True)
    assert full.listing["incremental"] is False
    assert counts(full) == {"skipped": 26}


def test_deleted_header_withdraws_and_newer_record_reinstates(env: Env) -> None:
    env.run()
    ident = generate_identifier(7)
    env.items.delete(ident, T0 + timedelta(days=30))
    job = env.run(full=True)
    assert counts(job)["withdrawn"] == 1
    row = env.store.record("portal", ident)
    assert row is not None
    assert row.status == "withdrawn"
    assert env.store.dataset_ntriples(row) == b""
    assert_consistent(env.store)
    # the dataset has left the union graph but its catalogue record stays
    ask = f"ASK {{ <{row.dataset_iri}> ?p ?o }}"
    assert not bool(env.store.graphs.query(ask))
    env.items.put(item(7, revision=1, when=T0 + timedelta(days=31)))
    again = env.run(full=True)
    assert counts(again).get("updated") == 1
    row = env.store.record("portal", ident)
    assert row is not None
    assert row.status == "active"
    assert bool(env.store.graphs.query(ask))
    assert_consistent(env.store)


def test_missing_records_are_withdrawn_only_after_a_complete_listing(env: Env) -> None:
    env.run()
    env.items.remove(generate_identifier(0))
    env.items.remove(generate_identifier(1))
    env.peer.faults.error_on_page = 2  # the listing breaks half way
    env.peer.faults.error_code = "badResumptionToken"
    broken = env.run(full=True)
    assert broken.status == JobStatus.FAILED.value
    assert env.store.db.counts_by_status("portal") == {"active": 25}
    env.peer.faults.error_on_page = None
    env.peer.faults.cap = 10  # a server cap: tokens stop while completeListSize says more
    capped = env.run(full=True)
    assert capped.status == JobStatus.PARTIAL.value
    assert "truncated" in capped.message
    assert env.store.db.counts_by_status("portal") == {"active": 25}
    env.peer.faults.cap = None
    done = env.run(full=True)
    assert done.status == JobStatus.SUCCEEDED.value
    assert counts(done) == {"skipped": 23, "withdrawn": 2}
    assert env.store.db.counts_by_status("portal") == {"active": 23, "withdrawn": 2}
    assert_consistent(env.store)


def test_mass_withdrawal_brake(env: Env) -> None:
    env.run()
    for i in range(10):
        env.items.remove(generate_identifier(i))
    held = env.run(full=True)
    assert held.status == JobStatus.PARTIAL.value
    assert "brake" in held.message
    assert exit_code(held) == 4
    assert env.store.db.counts_by_status("portal") == {"active": 25}
    forced = env.run(full=True, allow_mass_withdrawal=True)
    assert counts(forced)["withdrawn"] == 10
    assert env.store.db.counts_by_status("portal") == {"active": 15, "withdrawn": 10}


def test_duplicate_identifier_in_one_harvest_newest_wins(tmp_path: Path) -> None:
    """A listing that holds the same identifier twice (a record updated while the listing
    ran, so it appears again on a later page): the most recent metadata date wins, in
    either order."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    import plugins_for_tests as plugins

    plugins.register()
    from aggregator.core.models import RawRecord

    def raw(revision: int, day: int) -> RawRecord:
        return RawRecord(
            source="dup",
            local_id="oai:x:1",
            format="dcat",
            payload=generate_dataset(1, revision=revision),
            media_type="application/rdf+xml",
            datestamp=T0 + timedelta(days=day),
        )

    src = SourceConfig(name="dup", type="memory", url="http://127.0.0.1/")
    settings = Settings(
        None, tmp_path / "s", BASE, harvest=HarvestSettings(workers=0), sources={"dup": src}
    )
    with RecordStore(settings.store_path, BASE) as store:
        for order in ([raw(1, 1), raw(2, 2)], [raw(4, 4), raw(3, 3)]):
            plugins.FEEDS["dup"] = (order, True)
            job = run_source(settings, store, "dup")
            row = store.record("dup", "oai:x:1")
            newest = max(order, key=lambda r: r.datestamp)  # type: ignore[arg-type,return-value]
            assert row is not None
            assert row.source_datestamp == newest.datestamp.strftime("%Y-%m-%dT%H:%M:%SZ")
            assert job.counters["skipped"] == 1


def test_hostile_and_malformed_records_are_rejected_per_record(env: Env) -> None:
    env.items.put(
        OaiItem(
            "oai:x:broken",
            T0,
            (),
            False,
            # well-formed XML (a broken page would stop the listing) but not RDF/XML
            b"<rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'>"
            b"<rdf:Description rdf:about='http://x/1' rdf:resource='a' rdf:nodeID='b'/>"
            b"</rdf:RDF>",
        ),
        OaiItem(  # valid RDF, but no dataset in it
            "oai:x:empty",
            T0,
            (),
            False,
            b"<rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'/>",
        ),
    )
    env.peer.faults.hostile_identifier = generate_identifier(9)
    env.peer.faults.hostile_kind = "escaped"
    job = env.run()
    assert job.status == JobStatus.SUCCEEDED.value
    c = counts(job)
    assert c["rejected"] >= 1
    assert c["added"] >= 24
    errors = env.store.jobs.errors(job.id)
    assert {e["local_id"] for e in errors} >= {"oai:x:broken", "oai:x:empty"}
    assert {e["stage"] for e in errors} >= {"parse", "map"}
    assert all(e["message"] for e in errors)
    assert exit_code(job) == 3
    rejected = env.store.record("portal", "oai:x:broken")
    assert rejected is not None
    assert rejected.status == "rejected"
    assert rejected.payload_sha
    assert_consistent(env.store)


def test_a_failed_job_left_running_is_marked_failed_at_next_start(env: Env) -> None:
    log = env.store.jobs.start("portal", full=False)
    env.reopen()
    assert env.store.jobs.get(log.id).status == "failed"
    assert "died" in env.store.jobs.get(log.id).message


def test_journal_replays_a_write_interrupted_before_the_graph_store(env: Env) -> None:
    env.run()

    def boom(contents: object) -> None:
        raise OSError("disk gone")  # the graph store fails after the journal was committed

    env.items.put(item(4, revision=1))
    env.store.graphs.replace = boom  # type: ignore[method-assign,assignment]
    job = env.run(full=True)
    assert job.status == JobStatus.FAILED.value
    assert "graph store" in job.message
    env.store.close()
    env.store = RecordStore(env.settings.store_path, BASE)
    assert env.store.recovery.repaired >= 1
    assert_consistent(env.store)
    row = env.store.record("portal", generate_identifier(4))
    assert row is not None  # the journalled (new) state won: SQLite had committed it
    assert row.source_datestamp == (T0 + timedelta(hours=104)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_heartbeat_beats_while_a_slow_source_is_listed(env: Env) -> None:
    import time as _time

    from aggregator.store.journal import Heartbeat

    log = env.store.jobs.start("portal", full=True)
    before = env.store.jobs.get(log.id).heartbeat
    beat = Heartbeat(str(env.store.path / "state.sqlite3"), log.id, interval=0.05).start()
    _time.sleep(0.3)
    beat.stop()
    assert env.store.jobs.get(log.id).heartbeat > before


def test_records_the_store_holds_are_listed_without_their_payload(env: Env) -> None:
    """A full run asks the store which listed records it holds at their datestamp or a newer
    one (once per page); the harvester skips serialising those, and still lists them."""
    env.run()
    env.items.put(item(4, revision=1))  # newer: delivered whole
    env.items.put(OaiItem(generate_identifier(5), T0 - timedelta(days=1), (), False, b"<x/>"))
    env.items.put(item(30))  # new to the store: delivered whole
    env.items.delete(generate_identifier(6))  # a deleted header: no payload anyway
    up_to_date = UpToDate(env.store.path / "state.sqlite3", "portal")
    harvester = OaiPmhHarvester(env.source, env.http)
    request = HarvestRequest(full=True, checkpoint=None, up_to_date=up_to_date)
    listing = Listing(incremental=False)
    try:
        records = {r.local_id: r for r in harvester.list_records(request, listing)}
    finally:
        up_to_date.close()
    assert listing.complete and len(records) == 26
    whole = {lid for lid, r in records.items() if not r.payload_omitted}
    ids = generate_identifier
    assert whole == {ids(4), ids(6), ids(30)}
    assert records[ids(4)].payload == generate_dataset(4, revision=1).rstrip(b"\n")
    assert records[ids(6)].deleted
    older = records[ids(5)]  # the store holds a newer version: not serialised
    assert older.payload == b"" and older.datestamp == T0 - timedelta(days=1)
    # the pipeline counts them as listed and skipped, and withdraws none of them
    job = env.run(full=True)
    assert counts(job) == {"updated": 1, "added": 1, "withdrawn": 1, "skipped": 23}
    assert env.store.db.counts_by_status("portal") == {"active": 25, "withdrawn": 1}


def test_up_to_date_answers_nothing_when_it_cannot_read_the_store(tmp_path: Path) -> None:
    """The question is a shortcut: if the state database cannot be read, every payload is
    delivered (and the prefilter decides) rather than the listing failing."""
    missing = UpToDate(tmp_path / "no-such-dir" / "state.sqlite3", "portal")
    assert missing([("oai:x:1", T0)]) == frozenset()
    missing.close()


def test_a_journal_of_an_older_store_is_replayed_and_its_sequence_started(env: Env) -> None:
    """Stores made before pending held a generation marked pending rows with 1: migration 2
    moves such marks to the journal, and they are compared and repaired at open (before any
    new write can take a generation); graphs that the graph store holds are left alone."""
    import sqlite3

    env.run()
    env.store.close()
    ids = [generate_identifier(i) for i in (1, 2, 3)]
    con = sqlite3.connect(env.settings.store_path / "state.sqlite3")
    with con:
        make_unversioned(con)  # the schema of that time
        con.execute("DROP INDEX records_journal")
        con.execute("CREATE INDEX records_pending ON records (pending) WHERE pending = 1")
        con.executemany("UPDATE records SET pending = 1 WHERE local_id = ?", [(i,) for i in ids])
        gone = con.execute("SELECT record_iri FROM records WHERE local_id = ?", (ids[0],))
        graph_iri = gone.fetchone()[0]
    con.close()
    from aggregator.store.graphs import OxigraphGraphs

    graphs = OxigraphGraphs(env.settings.store_path / "graphs")
    graphs.remove([graph_iri])  # the crash came before this record's graph was loaded
    graphs.close()
    env.store = RecordStore(env.settings.store_path, BASE)
    # the 3 moved marks, and every other active record, marked by migration 5 for the split
    # of the shared statements: all compared, one repaired (its graphs were split already)
    assert (env.store.recovery.pending, env.store.recovery.repaired) == (25, 1)
    assert_consistent(env.store)
    indexes = {
        r[0] for r in env.store.db.conn.execute("SELECT name FROM sqlite_master WHERE type='index'")
    }
    # migrated: the marks were moved to the journal table, the rows' index is gone
    assert "records_journal" not in indexes and "records_pending" not in indexes
    env.items.put(item(4, revision=1))
    job = env.run(full=True)
    assert counts(job) == {"updated": 1, "skipped": 24}
    assert not list(env.store.db.pending_rows())
    assert_consistent(env.store)


def published(env: Env, local_id: str) -> tuple[str, bool, bool, str]:
    """A record as each side shows it: its state row's status, whether SPARQL finds its
    dataset in the union graph and its catalogue record's status in its named graph, and its
    OAI-PMH header (the provider reads the state database)."""
    from lxml import etree

    from aggregator.serve.context import ServeContext
    from aggregator.serve.oai import OaiProvider
    from aggregator.serve.oai_tokens import TokenSigner

    row = env.store.record("portal", local_id)
    assert row is not None
    in_union = bool(env.store.graphs.query(f"ASK {{ <{row.dataset_iri}> ?p ?o }}"))
    agg = "https://w3id.org/ld-aggregator/ns#"
    rec = f"<{row.record_iri}>"
    active_record = bool(
        env.store.graphs.query(f"ASK {{ GRAPH {rec} {{ {rec} <{agg}status> <{agg}Active> }} }}")
    )
    provider = OaiProvider(ServeContext(env.store, env.settings), TokenSigner(b"k" * 16))
    args = {
        "verb": ["GetRecord"],
        "identifier": [provider.identifier("portal", local_id)],
        "metadataPrefix": ["dcat_ap"],
    }
    root = etree.fromstring(b"".join(provider.respond(args)))
    header = root.find(".//{http://www.openarchives.org/OAI/2.0/}header")
    assert header is not None
    return row.status, in_union, active_record, header.get("status") or "active"


ACTIVE = ("active", True, True, "active")
WITHDRAWN = ("withdrawn", False, False, "deleted")


@pytest.mark.parametrize("gone", ["vanished", "deleted header"])
@pytest.mark.parametrize("back", ["unchanged", "newer"])
def test_a_withdrawn_record_that_comes_back_is_reinstated_whatever_its_date(
    env: Env, gone: str, back: str
) -> None:
    """Withdrawn means not held: a record back in the listing is reinstated, even at the very
    source date it had before it went (the skip-by-date rule, the harvester's shortcut and
    the decision after mapping all see its status)."""
    env.run()
    ident = generate_identifier(7)
    before = env.store.record("portal", ident)
    assert before is not None and published(env, ident) == ACTIVE
    if gone == "vanished":  # missing from a complete listing
        env.items.remove(ident)  # type: ignore[attr-defined]
    else:
        env.items.delete(ident, T0 + timedelta(days=30))  # type: ignore[attr-defined]
    job = env.run(full=True)
    assert counts(job) == {"withdrawn": 1, "skipped": 24}
    assert published(env, ident) == WITHDRAWN
    assert_consistent(env.store)
    returning = (
        item(7) if back == "unchanged" else item(7, revision=1, when=T0 + timedelta(days=31))
    )
    env.items.put(returning)  # type: ignore[attr-defined]
    job = env.run(full=True)
    assert counts(job) == {"updated": 1, "skipped": 24}
    row = env.store.record("portal", ident)
    assert row is not None and row.job_id == job.id
    assert row.source_datestamp == returning.datestamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert (row.content_hash == before.content_hash) == (back == "unchanged")
    assert published(env, ident) == ACTIVE
    assert_consistent(env.store)
    again = env.run(full=True)  # back for good: the next harvest skips it by date again
    assert counts(again) == {"skipped": 25}
    assert published(env, ident) == ACTIVE


def test_seen_marks_stay_bounded_and_withdrawal_stays_exact(tmp_path: Path) -> None:
    """An unchanged re-harvest many batches long keeps at most a batch of "seen" marks in
    memory (the rest are in the store's connection-local table as the listing goes), and the
    records a complete listing no longer holds are still exactly the ones withdrawn."""
    from aggregator.core.models import Outcome
    from aggregator.harvest.base import Listing as ListingT
    from aggregator.store.journal import JobLog

    n, batch = 350, 20
    items = MemoryItems(item(i) for i in range(n))
    peer = OaiPmhPeer(items, page_size=50)
    with PeerServer(peer) as server:
        env = Env(tmp_path, peer, f"{server.url}oai")
        env.settings = replace(
            env.settings, harvest=replace(env.settings.harvest, batch_size=batch)
        )
        try:
            assert counts(env.run()) == {"added": n}
            gone = {generate_identifier(i) for i in (3, 77, 150, 151, 349)}
            for ident in gone:
                items.remove(ident)
            items.put(item(200, revision=1))
            held_back: list[int] = []

            def progress(job: JobLog, listing: ListingT) -> None:
                marked = env.store.db.conn.execute(
                    "SELECT count(*) FROM temp.seen WHERE job_id = ?", (job.id,)
                ).fetchone()[0]
                held_back.append(job.counters.get(Outcome.SKIPPED.value, 0) - marked)

            job = run_source(
                env.settings,
                env.store,
                "portal",
                RunOptions(full=True, progress=progress),
                http=env.http,
            )
            assert counts(job) == {"skipped": n - 6, "updated": 1, "withdrawn": 5}
            assert held_back and max(held_back) < batch, held_back
            withdrawn = {r.local_id for r in env.store.db.iter_records("portal", "withdrawn")}
            assert withdrawn == gone
            assert env.store.db.counts_by_status("portal") == {"active": n - 5, "withdrawn": 5}
            assert_consistent(env.store)
        finally:
            env.store.close()


@pytest.mark.parametrize("reading", [True, False])
def test_batches_are_published_for_readers_only(
    env: Env, reading: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot per batch while a process reads the shelf (``serve``); otherwise only the
    job's end publishes (a checkpoint per batch is work and disk churn for nobody)."""
    from aggregator.store.snapshots import SnapshotReader, SnapshotShelf

    published: list[int] = []
    real = SnapshotShelf.publish

    def counted(self: SnapshotShelf, source: object, generation: int) -> Path:
        published.append(generation)
        return real(self, source, generation)  # type: ignore[arg-type]

    monkeypatch.setattr(SnapshotShelf, "publish", counted)
    env.settings = replace(env.settings, harvest=replace(env.settings.harvest, batch_size=5))
    assert env.store.shelf is not None
    reader = SnapshotReader(env.store.shelf.root)
    if reading:
        reader.check()  # holds the current snapshot open, as a serving process does
    assert env.store.shelf.has_readers() is reading
    try:
        before = env.store.db.generation()
        job = env.run()
        assert counts(job) == {"added": 25}
        generations = set(range(before + 1, env.store.db.generation() + 1))
        assert len(generations) == 5  # five batches of five records
        mid_job = set(published) & generations - {env.store.db.generation()}
        assert bool(mid_job) is reading, published
        assert env.store.shelf.generation == env.store.db.generation()  # the end, always
    finally:
        reader.close()


@pytest.mark.parametrize(("gather", "loads"), [(None, 1), (1, 5)])
def test_batches_are_gathered_into_bulk_loads(env: Env, gather: int | None, loads: int) -> None:
    """With nobody reading the snapshots, the journalled batches (five of five records) go to
    the graph store in one bulk load, and every mark is cleared; ``gather_records=1`` loads
    them one by one; a re-harvest that updates two records replaces their graphs either way
    (``test_store_graphs`` covers a record written by two gathered batches)."""
    from aggregator.store.graphs import GraphContent, OxigraphGraphs

    calls: list[int] = []

    class Counted(OxigraphGraphs):
        def replace(
            self, contents: Sequence[GraphContent], added: bytes = b"", removed: bytes = b""
        ) -> None:
            calls.append(len(contents))
            super().replace(contents, added, removed)

    env.store.close()
    extra = {} if gather is None else {"gather_records": gather}
    graphs = Counted(env.settings.store_path / "graphs")
    env.store = RecordStore(env.settings.store_path, BASE, graphs=graphs, **extra)
    env.settings = replace(env.settings, harvest=replace(env.settings.harvest, batch_size=5))
    job = env.run()
    assert counts(job) == {"added": 25}
    assert calls == [5] * loads if gather else calls == [25]
    assert not env.store.db.pending_rows()
    assert_consistent(env.store)
    env.items.put(item(3, revision=1))
    env.items.put(item(4, revision=1))
    calls.clear()
    job = env.run(full=True)
    assert counts(job) == {"updated": 2, "skipped": 23}
    assert_consistent(env.store)


def test_gathered_bulk_loads_are_cut_by_bytes_of_nquads(env: Env, tmp_path: Path) -> None:
    """A bulk load gathers batches only while their N-Quads fit ``gather_bytes`` (the load's
    peak memory grows with its bytes, not its records): with a budget of about two batches,
    five batches of five records go in three loads, none over the budget unless it is one
    batch alone, each as large as the budget allows, every mark cleared. The batches' sizes
    are learnt from a first harvest into another store with a one-byte budget, which loads
    each batch alone (the record count, 2,000, would gather all 25 records into one load)."""
    from aggregator.store.graphs import GraphContent, OxigraphGraphs, to_nquads

    loads: list[tuple[int, int]] = []  # (records, bytes of N-Quads) of each bulk load

    class Counted(OxigraphGraphs):
        def replace(
            self, contents: Sequence[GraphContent], added: bytes = b"", removed: bytes = b""
        ) -> None:
            size = sum(len(to_nquads(c)) for c in contents) + len(added)
            loads.append((len(contents), size))
            super().replace(contents, added, removed)

    def harvest(store_path: Path, budget: int) -> None:
        env.store.close()
        env.settings = replace(env.settings, store_path=store_path)
        graphs = Counted(store_path / "graphs")
        env.store = RecordStore(store_path, BASE, graphs=graphs, gather_bytes=budget)
        job = env.run()
        assert counts(job) == {"added": 25}
        assert not env.store.db.pending_rows()
        assert_consistent(env.store)

    env.settings = replace(env.settings, harvest=replace(env.settings.harvest, batch_size=5))
    harvest(tmp_path / "one-by-one", 1)
    assert [n for n, _ in loads] == [5] * 5
    batches = [size for _, size in loads]
    budget = batches[0] + batches[1] + min(batches) // 2
    assert budget < batches[0] + batches[1] + batches[2]

    # the loads the rule gives: batches in order, a load closed before the batch that would
    # take it past the budget (the first batch raises most shared statements: it is larger)
    expected: list[int] = []  # records of each load
    held = held_bytes = 0
    for size in batches:
        if held and held_bytes + size > budget:
            expected.append(held)
            held = held_bytes = 0
        held += 5
        held_bytes += size
    expected.append(held)
    assert 1 < len(expected) < 5  # cut by bytes, and gathered too

    loads.clear()
    harvest(tmp_path / "by-bytes", budget)
    assert [n for n, _ in loads] == expected
    assert all(size <= budget or n == 5 for n, size in loads)
    # each load as large as the budget allows: the batch after it would not have fitted
    first_batch = 0
    for records, size in loads[:-1]:
        first_batch += records // 5
        assert size + batches[first_batch] > budget
