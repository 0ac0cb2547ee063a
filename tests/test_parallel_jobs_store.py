"""Jobs of several sources writing one store at once (the scheduler's threads): datestamps
drawn at commit, snapshots named by what the graph store holds, the process's GC setting,
and reads on the shared state connection."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from pyoxigraph import Store

from aggregator.jobs.pipeline import relaxed_gc
from aggregator.store.commit_barrier import CommitStamper, wait_for_commits
from aggregator.store.graphs import GraphContent, OxigraphGraphs
from aggregator.store.journal import JobLog, now_iso
from aggregator.store.records import RecordStore
from aggregator.store.snapshots import SnapshotReader
from aggregator.store.state import RecordWrite

BASE = "http://127.0.0.1:8000/"


def dataset(iri: str, title: str) -> bytes:
    return (
        f"<{iri}> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
        f" <http://www.w3.org/ns/dcat#Dataset> .\n"
        f'<{iri}> <http://purl.org/dc/terms/title> "{title}" .\n'
    ).encode()


def write_of(store: RecordStore, job: JobLog, local_id: str, modified: str) -> RecordWrite:
    iri = f"http://example.org/{job.source}/{local_id}"
    return RecordWrite(
        source=job.source,
        local_id=local_id,
        record_iri=store.record_iri(job.source, local_id),
        dataset_iri=iri,
        status="active",
        content_hash=f"h-{local_id}",
        first_seen=modified,
        modified=modified,
        source_datestamp=None,
        job_id=job.id,
        format="dcat-ap",
        payload_sha=None,
        url=None,
        themes="",
        ntriples=dataset(iri, local_id),
        catalog_ntriples=b"",
        findings="[]",
        existed=False,
        modified_at_commit=True,
    )


class SlowGraphs(OxigraphGraphs):
    """The embedded graph store, slow to load (a busy disk): widens the time in which other
    jobs commit batches that the graph store does not hold yet."""

    def replace(
        self, contents: Sequence[GraphContent], added: bytes = b"", removed: bytes = b""
    ) -> None:
        time.sleep(0.01)
        super().replace(contents, added, removed)


def test_a_record_is_stamped_when_its_batch_commits(tmp_path: Path) -> None:
    with RecordStore(tmp_path / "s", BASE) as store:
        job = store.jobs.start("src", full=True)
        decided = now_iso()
        time.sleep(0.05)  # the record waits for its batch, as behind 1,000 others
        before_commit = now_iso()
        store.write(job, [write_of(store, job, "a", decided)])
        row = store.record("src", "a")
        assert row is not None and row.modified >= before_commit > decided
        # strictly increasing from commit to commit, whatever the clock says
        store.write(job, [write_of(store, job, "b", decided)])
        row_b = store.record("src", "b")
        assert row_b is not None and row_b.modified > row.modified


def test_stamps_keep_increasing_when_the_clock_is_behind(tmp_path: Path) -> None:
    stamper = CommitStamper(tmp_path, last_stamp="2999-01-01T00:00:00.000000Z")
    try:
        with stamper.stamping() as first:
            pass
        with stamper.stamping() as second:
            pass
    finally:
        stamper.close()
    assert first == "2999-01-01T00:00:00.000001Z"
    assert second == "2999-01-01T00:00:00.000002Z"


def test_a_reader_waits_for_the_commit_in_flight(tmp_path: Path) -> None:
    """A reader that noted its time while a commit was in flight reads after that commit."""
    stamper = CommitStamper(tmp_path)
    done = threading.Event()
    waited: list[bool] = []

    def reader() -> None:
        wait_for_commits(tmp_path)
        waited.append(done.is_set())

    try:
        with stamper.stamping():
            t = threading.Thread(target=reader)
            t.start()
            time.sleep(0.2)
            assert not waited  # still waiting
            done.set()
        t.join(10)
    finally:
        stamper.close()
    assert waited == [True]
    wait_for_commits(tmp_path / "nothing-here")  # no barrier file: nothing to wait for


def test_snapshots_are_named_by_what_the_graph_store_holds(tmp_path: Path) -> None:
    """Two jobs write at once while a reader has the shelf open (a batch is published as it
    is loaded); one of them ends (sync, which publishes) again and again. Every snapshot
    published holds exactly the records committed up to the generation it is named by, and
    the last one every record."""
    path = tmp_path / "s"
    graphs = SlowGraphs(path / "graphs")
    store = RecordStore(path, BASE, graphs=graphs)
    assert store.shelf is not None
    reader = SnapshotReader(store.shelf.root)
    reader.check()  # a reader holds the shelf: each batch is published as it is loaded
    committed: dict[int, int] = {}  # generation -> records committed up to it
    total = [0]
    lock = threading.Lock()
    failures: list[str] = []

    def writer(source: str, batches: int) -> None:
        job = store.jobs.start(source, full=False)
        for b in range(batches):
            ws = [write_of(store, job, f"{b}-{i}", now_iso()) for i in range(3)]
            with lock:  # the generation this batch gets and the total it makes
                store.write(job, ws)
                total[0] += len(ws)
                committed[store.db.generation()] = total[0]

    def ender() -> None:
        job_end = time.monotonic() + 3
        while time.monotonic() < job_end:
            store.sync()
            check_current()

    def check_current() -> None:
        shelf = store.shelf
        assert shelf is not None
        name = shelf.current
        gen = shelf.generation
        if name is None or gen is None or gen not in committed:
            return
        snap = Store.read_only(str(shelf.root / name))
        held = len([g for g in snap.named_graphs()])
        del snap
        if held != committed[gen]:
            failures.append(f"snapshot {name} holds {held} records, committed {committed[gen]}")

    threads = [
        threading.Thread(target=writer, args=("one", 60)),
        threading.Thread(target=writer, args=("two", 60)),
        threading.Thread(target=ender),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    store.sync()
    check_current()
    assert store.shelf.generation == store.db.generation()
    reader.close()
    store.close()
    assert not failures, failures[:5]


def test_overlapping_jobs_leave_the_gc_setting_as_they_found_it() -> None:
    before = gc.get_threshold()
    first = relaxed_gc(50_000)
    second = relaxed_gc(50_000)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first job ends while the second still runs
    assert gc.get_threshold()[0] == 50_000
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before


def test_rows_read_on_the_shared_connection_never_show_another_jobs_uncommitted_writes(
    tmp_path: Path,
) -> None:
    with RecordStore(tmp_path / "s", BASE) as store:
        job = store.jobs.start("src", full=True)
        store.write(job, [write_of(store, job, f"r{i}", now_iso()) for i in range(300)])
        db = store.db
        cur = db.conn.execute("SELECT local_id FROM records ORDER BY id")
        first = cur.fetchone()
        assert first == ("r0",)
        began = threading.Event()
        ended = threading.Event()

        def other_job() -> None:  # begins a transaction, writes, and rolls it back
            db.begin()
            try:
                db.conn.execute(
                    "UPDATE records SET local_id = 'uncommitted-' || local_id WHERE id > 1"
                )
                began.set()
                time.sleep(0.3)
            finally:
                db.rollback()
                ended.set()

        t = threading.Thread(target=other_job)
        t.start()
        began.wait(10)
        rest = [str(r[0]) for r in cur]  # the rest of the rows, read while it is open
        t.join(10)
        assert ended.is_set()
        assert not [r for r in rest if r.startswith("uncommitted-")]
        assert len(rest) == 299


def test_the_search_index_catching_up_during_parallel_jobs_misses_nothing(
    tmp_path: Path,
) -> None:
    """Job "one" decides its records and commits them late (behind a long batch); job "two"
    decides and commits later ones at once. The search index catches up from its watermark
    between the two commits and after: it must hold every active record in the end."""
    import sqlite3

    from aggregator.serve.dashboard.search import SearchIndex

    path = tmp_path / "s"
    with RecordStore(path, BASE) as store:
        one = store.jobs.start("one", full=True)
        two = store.jobs.start("two", full=True)
        decided_early = [write_of(store, one, f"r{i}", now_iso()) for i in range(20)]
        time.sleep(0.01)
        store.write(two, [write_of(store, two, f"r{i}", now_iso()) for i in range(20)])
        index = SearchIndex(path, path / "state.sqlite3")
        reader = sqlite3.connect(f"file:{path / 'state.sqlite3'}?mode=ro", uri=True)
        try:
            assert index.search(reader, "", {}).total == 20  # caught up to job two's batch
            store.write(one, decided_early)
            assert index.search(reader, "", {}).total == 40
        finally:
            reader.close()
