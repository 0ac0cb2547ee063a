"""What the OAI-PMH provider reads from SQLite: keyset pages, counts, sets, single records.

Every list is ordered by ``(modified, id)`` and read from the ``record_sets`` index
``(set_spec, modified, record_id)``: a listing without a set is the parent set ``source``,
which holds every published (active or withdrawn) record. A page is one index range scan,
``LIMIT n + 1``, whatever its depth; no OFFSET anywhere. ``iso19139`` listings without a set
use the partial index of ISO 19139 records instead.

Bounds are strings compared with ``modified`` (``YYYY-MM-DDTHH:MM:SS.ffffffZ``): ``lo`` is
inclusive, ``hi`` exclusive, both ``YYYY-MM-DDTHH:MM:SS``, so a datestamp (``modified``
truncated to seconds) is within [from, until] exactly when ``lo <= modified < hi``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from aggregator.serve.oai_formats import ISO_FORMAT
from aggregator.store.commit_barrier import wait_for_commits
from aggregator.store.packing import unpack, unpack_graph

PUBLISHED = ("active", "withdrawn")
LOWEST = ""
HIGHEST = "~"  # sorts after every 'YYYY-...' string


@dataclass(frozen=True, slots=True)
class Selection:
    """A ListIdentifiers/ListRecords selection."""

    set_spec: str  # 'source' selects every published record
    iso_only: bool
    lo: str = LOWEST
    hi: str = HIGHEST


@dataclass(slots=True)
class Item:
    """One published (or rejected, for single lookups) record as the provider needs it."""

    id: int
    source: str
    local_id: str
    status: str
    modified: str
    format: str | None
    payload_sha: str | None
    dataset_iri: str | None
    specs: list[str]
    ntriples: bytes
    payload: bytes = b""

    @property
    def datestamp(self) -> str:
        return self.modified[:19] + "Z"

    @property
    def deleted(self) -> bool:
        return self.status == "withdrawn"


def _columns(with_graph: bool) -> str:
    graph = "r.ntriples" if with_graph else "NULL"
    return (
        "r.id, r.source, r.local_id, r.status, r.modified, r.format, r.payload_sha,"
        " r.dataset_iri, (SELECT group_concat(x.set_spec, ' ') FROM record_sets x"
        f" WHERE x.record_id = r.id AND instr(x.set_spec, ':') > 0), {graph}"
    )


def _item(row: tuple[object, ...]) -> Item:
    specs = str(row[8]).split() if row[8] else []
    return Item(
        id=int(row[0]),  # type: ignore[call-overload]
        source=str(row[1]),
        local_id=str(row[2]),
        status=str(row[3]),
        modified=str(row[4]),
        format=None if row[5] is None else str(row[5]),
        payload_sha=None if row[6] is None else str(row[6]),
        dataset_iri=None if row[7] is None else str(row[7]),
        specs=sorted(specs),
        ntriples=unpack_graph(row[9]) if isinstance(row[9], bytes) else b"",
    )


@contextmanager
def snapshot(conn: sqlite3.Connection, store_path: Path) -> Iterator[sqlite3.Connection]:
    """One read transaction: a count and a page see the same state of the store. It begins
    after any commit in flight (``commit_barrier.py``): the request's ``responseDate``, taken
    before, is then a safe ``from`` for the harvester's next request."""
    wait_for_commits(store_path)
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


def page(
    conn: sqlite3.Connection,
    sel: Selection,
    after: tuple[str, int] | None,
    limit: int,
    *,
    with_graph: bool,
) -> list[Item]:
    """Up to ``limit`` records of the selection after the keyset position ``after``."""
    lo = sel.lo
    after_mod, after_id = after if after is not None else (LOWEST, -1)
    if after_mod > lo:
        lo = after_mod
    cols = _columns(with_graph)
    if sel.iso_only and sel.set_spec == "source":
        sql = (
            f"SELECT {cols} FROM records r WHERE r.format = '{ISO_FORMAT}'"
            " AND r.status != 'rejected' AND r.modified >= ? AND r.modified < ?"
            " AND (r.modified > ? OR r.id > ?) ORDER BY r.modified, r.id LIMIT ?"
        )
        args: tuple[object, ...] = (lo, sel.hi, after_mod, after_id, limit)
    else:
        iso = f" AND r.format = '{ISO_FORMAT}'" if sel.iso_only else ""
        sql = (
            f"SELECT {cols} FROM record_sets s JOIN records r ON r.id = s.record_id"
            " WHERE s.set_spec = ? AND s.modified >= ? AND s.modified < ?"
            f" AND (s.modified > ? OR s.record_id > ?){iso}"
            " ORDER BY s.modified, s.record_id LIMIT ?"
        )
        args = (sel.set_spec, lo, sel.hi, after_mod, after_id, limit)
    return [_item(row) for row in conn.execute(sql, args)]


def count(conn: sqlite3.Connection, sel: Selection) -> int:
    if sel.iso_only and sel.set_spec == "source":
        row = conn.execute(
            f"SELECT count(*) FROM records r WHERE r.format = '{ISO_FORMAT}'"
            " AND r.status != 'rejected' AND r.modified >= ? AND r.modified < ?",
            (sel.lo, sel.hi),
        ).fetchone()
    elif sel.iso_only:
        row = conn.execute(
            "SELECT count(*) FROM record_sets s JOIN records r ON r.id = s.record_id"
            f" WHERE s.set_spec = ? AND s.modified >= ? AND s.modified < ?"
            f" AND r.format = '{ISO_FORMAT}'",
            (sel.set_spec, sel.lo, sel.hi),
        ).fetchone()
    elif sel.lo == LOWEST and sel.hi == HIGHEST:  # a whole set: counted as it was written
        row = conn.execute(
            "SELECT n FROM set_counts WHERE set_spec = ?", (sel.set_spec,)
        ).fetchone()
    else:
        row = conn.execute(
            "SELECT count(*) FROM record_sets s"
            " WHERE s.set_spec = ? AND s.modified >= ? AND s.modified < ?",
            (sel.set_spec, sel.lo, sel.hi),
        ).fetchone()
    return int(row[0]) if row else 0


def record(
    conn: sqlite3.Connection, source: str, local_id: str, *, with_graph: bool
) -> Item | None:
    row = conn.execute(
        f"SELECT {_columns(with_graph)} FROM records r WHERE r.source = ? AND r.local_id = ?",
        (source, local_id),
    ).fetchone()
    return _item(row) if row else None


def payload(conn: sqlite3.Connection, sha: str) -> bytes:
    row = conn.execute("SELECT data FROM payloads WHERE sha256 = ?", (sha,)).fetchone()
    return unpack(row[0]) if row else b""


def set_specs(conn: sqlite3.Connection) -> list[str]:
    """Every set that holds a record (a skip scan: one index probe per set)."""
    out: list[str] = []
    last = ""
    while True:
        row = conn.execute(
            "SELECT set_spec FROM record_sets WHERE set_spec > ? ORDER BY set_spec LIMIT 1",
            (last,),
        ).fetchone()
        if row is None:
            return out
        last = str(row[0])
        out.append(last)


def has_sets(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM record_sets LIMIT 1").fetchone() is not None


def earliest(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT min(modified) FROM record_sets WHERE set_spec = 'source'").fetchone()
    return str(row[0]) if row and row[0] else None


def first_identifier_key(conn: sqlite3.Connection) -> tuple[str, str] | None:
    """(source, local_id) of the first published record, for Identify's sample identifier."""
    row = conn.execute(
        "SELECT r.source, r.local_id FROM record_sets s JOIN records r ON r.id = s.record_id"
        " WHERE s.set_spec = 'source' ORDER BY s.modified, s.record_id LIMIT 1"
    ).fetchone()
    return (str(row[0]), str(row[1])) if row else None
