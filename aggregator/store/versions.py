"""Version tags of a source's records (``source_versions``): the checksums a META-SHARE node
gives its LRs, noted in the batch's transaction and read back by the listing to fetch only
what changed (docs/store.md, "Version tags"), and which other source holds a local id."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from typing import Any


def put_versions(conn: sqlite3.Connection, source: str, versions: Mapping[str, str]) -> None:
    """Note the version tags a source gave its records (inside the batch's transaction)."""
    conn.executemany(
        "INSERT INTO source_versions (source, local_id, version) VALUES (?, ?, ?)"
        " ON CONFLICT (source, local_id) DO UPDATE SET version = excluded.version",
        [(source, lid, v) for lid, v in versions.items()],
    )


def read_versions(
    conn: sqlite3.Connection, source: str, local_ids: Iterable[str]
) -> dict[str, str]:
    """local_id -> the version tag noted for each record of ``source`` the store holds (active
    or rejected: a withdrawn record is not held, whatever its tag)."""
    return _by_chunks(
        conn,
        local_ids,
        "SELECT v.local_id, v.version FROM source_versions v JOIN records r"
        " ON r.source = v.source AND r.local_id = v.local_id"
        " WHERE v.local_id IN ({marks}) AND v.source = ? AND r.status != 'withdrawn'",
        source,
    )


def read_deleted_versions(
    conn: sqlite3.Connection, source: str, local_ids: Iterable[str]
) -> dict[str, str]:
    """local_id -> the version tag noted when ``source`` deleted each record the store does
    not hold (withdrawn, or never taken). A record withdrawn for being absent from a listing
    has its tag blanked (:meth:`aggregator.jobs.lifecycle.BatchWriter.withdraw`), so only tags of
    deletions are found."""
    return _by_chunks(
        conn,
        local_ids,
        "SELECT v.local_id, v.version FROM source_versions v LEFT JOIN records r"
        " ON r.source = v.source AND r.local_id = v.local_id"
        " WHERE v.local_id IN ({marks}) AND v.source = ? AND v.version != ''"
        " AND (r.status IS NULL OR r.status = 'withdrawn')",
        source,
    )


def read_holders(conn: sqlite3.Connection, source: str, local_ids: Iterable[str]) -> dict[str, str]:
    """local_id -> the other source holding an active record under that local id."""
    return _by_chunks(
        conn,
        local_ids,
        "SELECT local_id, min(source) FROM records"
        " WHERE local_id IN ({marks}) AND source != ? AND status = 'active' GROUP BY local_id",
        source,
    )


def _by_chunks(
    conn: sqlite3.Connection, local_ids: Iterable[str], query: str, *args: str
) -> dict[str, str]:
    """Run ``query`` (its ``{marks}``: the placeholders of up to 500 local ids, then ``args``)
    over the distinct ``local_ids``, chunk by chunk; its two columns become a dict."""
    return {str(key): str(value) for key, value in rows_in_chunks(conn, local_ids, query, *args)}


def rows_in_chunks(
    conn: sqlite3.Connection, keys: Iterable[str], query: str, *args: Any
) -> Iterator[Any]:
    """The rows of ``query`` over the distinct ``keys``, 500 at a time: its ``{marks}`` are
    the placeholders of one chunk of keys, bound first, then ``args``."""
    ids = list(dict.fromkeys(keys))
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        yield from conn.execute(query.format(marks=",".join("?" * len(chunk))), (*chunk, *args))
