"""Retiring a source: withdraw everything it published, then drop the rest of its state.

:func:`purge_source` is what ``aggregator source remove NAME --purge`` runs. The withdrawals
are one job of that source, written through the record store's journal like the withdrawals
of a harvest (:meth:`aggregator.jobs.lifecycle.BatchWriter.withdraw`, batch by batch): each record
goes to ``withdrawn``, keeps its catalogue record (so OAI-PMH serves it as a persistent
deleted record with the withdrawal's datestamp) and leaves the union default graph. Then the
state nothing published needs any more goes: rejected records (rows and graphs), the
source's dead letters (open and closed) and the payloads only they held, its quality
measurements, its checkpoint. The job history and the withdrawn records stay: they are what
a harvester of our OAI-PMH feed, or an auditor, reads later.

A crash (or kill) at any point leaves each batch withdrawn or not, never half, and the
source still registered; running the purge again finishes the work.

:func:`read_census` counts what the store holds per source through a read-only connection,
for ``config check`` and ``source list`` to report records of sources no longer configured.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from aggregator.config import SourceConfig
from aggregator.core.models import JobStatus
from aggregator.jobs.lifecycle import BatchWriter
from aggregator.store.journal import JobRow
from aggregator.store.records import STATE_FILE, RecordStore
from aggregator.validate.quality.runner import quality_graph_iri

DEAD_LETTERS = "dead letters"  # the census key for a source's open rejections


@dataclass(frozen=True, slots=True)
class Retirement:
    job: JobRow
    withdrawn: int
    rejected_dropped: int
    dead_letters_dropped: int
    payloads_dropped: int
    checkpoint_dropped: bool


def census(conn: sqlite3.Connection) -> dict[str, Counter[str]]:
    """Per source: its records by status and its open dead letters. A source with only a
    checkpoint is listed with no counts."""
    out: dict[str, Counter[str]] = {}
    for source, status, n in conn.execute(
        "SELECT source, status, count(*) FROM records GROUP BY source, status"
    ):
        out.setdefault(str(source), Counter())[str(status)] = int(n)
    for source, n in conn.execute(
        "SELECT source, count(*) FROM rejections WHERE superseded_by IS NULL GROUP BY source"
    ):
        out.setdefault(str(source), Counter())[DEAD_LETTERS] = int(n)
    for (source,) in conn.execute("SELECT source FROM checkpoints"):
        out.setdefault(str(source), Counter())
    return out


def read_census(store_path: Path) -> dict[str, Counter[str]]:
    """:func:`census` of the store at ``store_path`` without opening (or locking, or creating)
    the store: empty when there is no store yet."""
    db = store_path / STATE_FILE
    if not db.is_file():
        return {}
    conn = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        return census(conn)
    finally:
        conn.close()


def describe(counts: Counter[str]) -> str:
    """``active=3 withdrawn=1 ...`` for a census entry."""
    return " ".join(f"{k.replace(' ', '_')}={v}" for k, v in sorted(counts.items()) if v) or "-"


def _active_ids(store: RecordStore, source: str, after: str, limit: int) -> list[str]:
    cur = store.db.conn.execute(
        "SELECT local_id FROM records WHERE source = ? AND local_id > ? AND status = 'active'"
        " ORDER BY local_id LIMIT ?",
        (source, after, limit),
    )
    return [str(r[0]) for r in cur]


def _withdraw_all(store: RecordStore, source: SourceConfig, batch_size: int) -> JobRow:
    """One job withdrawing every active record of ``source``, journalled batch by batch."""
    job = store.jobs.start(source.name, full=False)
    writer = BatchWriter(store, source, job, force=False, batch_size=batch_size)
    status, message = JobStatus.SUCCEEDED, ""
    withdrawn = 0
    try:
        after = ""
        while ids := _active_ids(store, source.name, after, batch_size):
            writer.withdraw(ids)  # flushes (one journalled write) every batch_size records
            withdrawn += len(ids)
            after = ids[-1]
        writer.flush()
        store.sync()
        message = f"source retired: withdrew {withdrawn} record(s)"
    except BaseException as err:
        status, message = JobStatus.FAILED, f"retiring the source failed: {err!r}"
        store.jobs.finish(job, status, {"retire": True}, message)
        raise
    return store.jobs.finish(job, status, {"retire": True}, message)


def _drop_payloads(conn: sqlite3.Connection, candidates: set[str]) -> int:
    """Delete the payloads among ``candidates`` that no record, kept version of a record
    (``record_payloads``) or dead letter refers to any more (payloads are shared by content).
    Call inside a transaction."""
    if not candidates:
        return 0
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS retire_payloads (sha TEXT PRIMARY KEY)")
    conn.execute("DELETE FROM temp.retire_payloads")
    conn.executemany(
        "INSERT OR IGNORE INTO temp.retire_payloads VALUES (?)", [(s,) for s in candidates]
    )
    cur = conn.execute(
        "DELETE FROM payloads WHERE sha256 IN (SELECT sha FROM temp.retire_payloads)"
        " AND sha256 NOT IN (SELECT payload_sha FROM records WHERE payload_sha IN"
        " (SELECT sha FROM temp.retire_payloads))"
        " AND sha256 NOT IN (SELECT payload_sha FROM record_payloads WHERE payload_sha IN"
        " (SELECT sha FROM temp.retire_payloads))"
        " AND sha256 NOT IN (SELECT payload_sha FROM rejections) RETURNING sha256"
    )
    dropped = len(cur.fetchall())
    conn.execute("DELETE FROM temp.retire_payloads")
    return dropped


def purge_source(store: RecordStore, source: SourceConfig, batch_size: int) -> Retirement:
    """Withdraw every record of ``source`` (one job), then drop its other state."""
    name = source.name
    job = _withdraw_all(store, source, batch_size)
    db = store.db
    rejected = db.conn.execute(
        "SELECT id, record_iri, payload_sha FROM records WHERE source = ? AND status = 'rejected'",
        (name,),
    ).fetchall()
    # the graphs first: if the process dies after this, the rows are still there and the
    # next purge removes the (then absent: a no-op) graphs again before deleting the rows
    if rejected:
        store.graphs.remove([str(r[1]) for r in rejected])
    cur = db.conn.execute("SELECT record_iri FROM records WHERE source = ?", (name,))
    while rows := cur.fetchmany(500):  # quality measurements: whichever exist
        store.graphs.remove([quality_graph_iri(store, str(r[0])) for r in rows])
    candidates = {str(r[2]) for r in rejected if r[2]}
    candidates |= {
        str(r[0])
        for r in db.conn.execute(
            "SELECT DISTINCT payload_sha FROM rejections WHERE source = ?", (name,)
        )
    }
    db.begin()
    try:
        ids = [int(r[0]) for r in rejected]
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            db.conn.execute(f"DELETE FROM records WHERE id IN ({marks})", chunk)
            db.conn.execute(f"DELETE FROM journal WHERE record_id IN ({marks})", chunk)
        dead = db.conn.execute("DELETE FROM rejections WHERE source = ?", (name,)).rowcount
        checkpoint = db.conn.execute("DELETE FROM checkpoints WHERE source = ?", (name,)).rowcount
        db.conn.execute("DELETE FROM source_versions WHERE source = ?", (name,))
        payloads = _drop_payloads(db.conn, candidates)
        db.next_generation()  # graphs went too: readers get a snapshot of this state
        db.commit()
    except BaseException:
        db.rollback()
        raise
    store.sync()
    return Retirement(
        job=job,
        withdrawn=job.counters.get("withdrawn", 0),
        rejected_dropped=len(ids),
        dead_letters_dropped=dead,
        payloads_dropped=payloads,
        checkpoint_dropped=bool(checkpoint),
    )
