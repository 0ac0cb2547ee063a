"""The search index's part of ``aggregator store check`` and ``store reindex``.

The index (``search.py``) is kept by the serving processes from the records changed since its
watermark, so the records after the watermark are simply not caught up yet; up to it, the
index must hold exactly the active records that have a dataset. Both sides are read in id
order and merged, so memory stays flat.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

from aggregator.serve.dashboard.search import SearchIndex
from aggregator.store.check import Finding

SEARCH = "search index"


def _ids(conn: sqlite3.Connection, sql: str, *args: object) -> Iterator[int]:
    for (rid,) in conn.execute(sql, args):
        yield int(rid)


def check_search(folder: Path, state: sqlite3.Connection) -> list[Finding]:
    """Disagreements between the search index in ``folder`` and the records of ``state``
    (none when there is no index yet: `serve` builds it)."""
    path = folder / "search.sqlite3"
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute("BEGIN")
        row = conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        modified, _, ident = (str(row[0]) if row else "|0").rpartition("|")
        mark = (modified, int(ident))
        want = _ids(
            state,
            "SELECT id FROM records WHERE status = 'active' AND dataset_iri IS NOT NULL"
            " AND ntriples IS NOT NULL AND (modified, id) <= (?, ?) ORDER BY id",
            *mark,
        )
        later = set(_ids(state, "SELECT id FROM records WHERE (modified, id) > (?, ?)", *mark))
        have = _ids(conn, "SELECT record_id FROM docs ORDER BY record_id")
        findings = [
            Finding(SEARCH, f"record id {rid}", detail)
            for rid, detail in _differences(want, have)
            if rid not in later  # changed since the watermark: caught up at the next search
        ]
        fts = conn.execute(
            "SELECT count(*) FROM docs d WHERE NOT EXISTS (SELECT 1 FROM fts WHERE rowid ="
            " d.record_id)"
        ).fetchone()[0]
        if fts:
            findings.append(Finding(SEARCH, "fts", f"{fts} document(s) without their words"))
        conn.execute("COMMIT")
        return findings
    finally:
        conn.close()


def _differences(want: Iterator[int], have: Iterator[int]) -> Iterator[tuple[int, str]]:
    """Merge two ascending id streams: ids only in ``want`` are missing, only in ``have``
    are extra."""
    w, h = next(want, None), next(have, None)
    while w is not None or h is not None:
        if w is not None and (h is None or w < h):
            yield w, "an active record the index lacks"
            w = next(want, None)
        elif h is not None and (w is None or h < w):
            yield h, "indexed, but not an active record"
            h = next(have, None)
        else:
            w, h = next(want, None), next(have, None)


def rebuild_search(folder: Path, state: sqlite3.Connection) -> int:
    """Build the search index in ``folder`` again from every record; returns the records."""
    index = SearchIndex(folder, folder / "state.sqlite3")
    try:
        return index.rebuild(state)
    finally:
        index.close()
