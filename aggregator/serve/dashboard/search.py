"""Full-text search and facets over the active datasets: an SQLite FTS5 index kept beside the
state database (``search.sqlite3`` in the store folder) and brought up to date from the
records changed since its watermark: by the ``serve`` supervisor's keeper
(``search_keeper.py``), and by each search for up to ``REQUEST_BUDGET`` seconds before it
answers from what is indexed (the page then says how many changed records are not searchable
yet).

Why a separate file kept by the readers: the harvest's write path stays as it is, a serving
process (which only reads the state database) can keep it, and a deleted index is rebuilt
from the records. Catching up reads the ``records_modified`` index from the watermark
``(modified, id)`` on, 500 rows at a time: after a harvest only the changed records are
indexed. The keeper and the serving processes share the file; ``BEGIN IMMEDIATE`` lets one of
them index a batch while the others wait, then go on from the new watermark. The store stamps
``modified`` inside each commit, strictly increasing from commit to commit
(``store/commit_barrier.py``), so the watermark never passes a record not yet visible.

Indexed: titles, descriptions and keywords (every language), with the ``unicode61`` tokenizer
(diacritics folded). Facets: source, theme, format (dct:format, else dcat:mediaType) and licence
(of the dataset or its distributions), each with its label in words, and conformance (flagged
records, stored with violations their source must fix, or not).
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aggregator.serve.dashboard import search_facets
from aggregator.serve.dashboard.search_docs import Doc, extract
from aggregator.store.packing import unpack_graph

BATCH = 500
#: seconds a search spends catching the index up before it answers from what is indexed
REQUEST_BUDGET = 2.0
PENDING_CAP = 100_000  # "more than" this many records not searchable yet
SCHEMA_VERSION = "5"  # an index of another version is dropped and built again
FACETS = ("source", "theme", "format", "licence", "conformance")
#: filters whose records are fewer than 1 in this many documents are read through their sets'
#: records and sorted, not found by walking the documents newest first
RARE_FILTER = 1000
#: the conformance facet: flagged records (stored with violations, validate/policy.py) or not
CONFORMANCE = {1: ("flagged", "Flagged: violations to fix"), 0: ("conforms", "No violation")}
_SCHEMA = """
PRAGMA journal_mode = WAL;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    record_id INTEGER PRIMARY KEY,
    dataset_iri TEXT NOT NULL,
    source TEXT NOT NULL,
    title TEXT NOT NULL,
    modified TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_modified ON docs (modified DESC, record_id DESC);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    title, description, keywords, tokenize = 'unicode61 remove_diacritics 2'
);
"""


def fts_query(text: str) -> str:
    """Words of the user's text as an FTS5 query: every word must match, the last one as a
    prefix; operators and quotes in the text are plain characters."""
    words = re.findall(r"\w+", text)
    if not words:
        return ""
    parts = [f'"{w}"' for w in words]
    parts[-1] += "*"
    return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Hit:
    record_id: int
    dataset_iri: str
    source: str
    title: str
    modified: str
    snippet: str


@dataclass(frozen=True, slots=True)
class FacetValue:
    value: str
    label: str
    count: int
    selected: bool


@dataclass(frozen=True, slots=True)
class Results:
    total: int
    hits: list[Hit]
    facets: dict[str, list[FacetValue]]
    pending: int = 0  # records changed since the index's watermark (up to PENDING_CAP)


def _version(conn: sqlite3.Connection) -> str | None:
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if not has_meta:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    return str(row[0]) if row else "1"


class SearchIndex:
    def __init__(self, folder: Path, state_db: Path) -> None:
        self.path = folder / "search.sqlite3"
        self.state_db = state_db
        self._local = threading.local()
        self._facet_counter = search_facets.FacetCounter()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            dropped = False
            try:
                if _version(conn) not in (None, SCHEMA_VERSION):
                    older = ("facets", "record_facets")  # tables of earlier versions
                    for name in ("meta", "docs", "fts", *older, *search_facets.TABLES):
                        conn.execute(f"DROP TABLE IF EXISTS {name}")
                    dropped = True
                for statement in (_SCHEMA + search_facets.SCHEMA).split(";"):
                    if statement.strip() and "journal_mode" not in statement:
                        conn.execute(statement)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            if dropped:  # the older index's pages go back to the file system
                conn.execute("VACUUM")
            self._local.conn = conn
        return conn

    def catch_up(self, state: sqlite3.Connection, budget: float | None = None) -> int:
        """Index the records changed since the watermark; returns how many were looked at.
        With a ``budget`` (seconds), stop after the batch that used it up: a search answers
        from what is indexed while the supervisor's keeper (``search_keeper.py``) does the
        rest."""
        conn = self._conn()
        done = 0
        until = None if budget is None else time.monotonic() + budget
        while True:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
                modified, _, ident = (row[0] if row else "|0").rpartition("|")
                batch = state.execute(
                    "SELECT id, source, dataset_iri, status, modified, ntriples, flagged"
                    " FROM records"
                    " WHERE (modified, id) > (?, ?) ORDER BY modified, id LIMIT ?",
                    (modified, int(ident), BATCH),
                ).fetchall()
                for rid, source, dataset_iri, status, mod, packed, flagged in batch:
                    self._drop(conn, rid)
                    if status == "active" and dataset_iri and packed:
                        doc = extract(unpack_graph(packed), dataset_iri, source)
                        value, label = CONFORMANCE[1 if flagged else 0]
                        doc = replace(doc, facets=(*doc.facets, ("conformance", value, label)))
                        self._add(conn, rid, dataset_iri, source, mod, doc)
                if batch:
                    last = batch[-1]
                    conn.execute(
                        "INSERT OR REPLACE INTO meta VALUES ('watermark', ?)",
                        (f"{last[4]}|{last[0]}",),
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            done += len(batch)
            if len(batch) < BATCH or (until is not None and time.monotonic() >= until):
                return done

    def behind(self, state: sqlite3.Connection, cap: int = PENDING_CAP) -> int:
        """Records changed since the watermark, not searchable yet (counted up to ``cap``)."""
        row = self._conn().execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        modified, _, ident = (row[0] if row else "|0").rpartition("|")
        return int(
            state.execute(
                "SELECT count(*) FROM (SELECT 1 FROM records WHERE (modified, id) > (?, ?)"
                " LIMIT ?)",
                (modified, int(ident), cap),
            ).fetchone()[0]
        )

    def rebuild(self, state: sqlite3.Connection) -> int:
        """Index every record again (``store reindex``): emptied in one transaction, then
        caught up as a new index is (a search meanwhile may see part of the records)."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table in ("docs", "fts", *search_facets.TABLES):
                conn.execute(f"DELETE FROM {table}")
            conn.execute("DELETE FROM meta WHERE key = 'watermark'")
            conn.execute(
                "INSERT INTO meta VALUES ('build', '1')"
                " ON CONFLICT (key) DO UPDATE SET value = value + 1"
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return self.catch_up(state)

    def close(self) -> None:  # this thread's connection
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @staticmethod
    def _drop(conn: sqlite3.Connection, rid: int) -> None:
        conn.execute("DELETE FROM fts WHERE rowid = ?", (rid,))
        conn.execute("DELETE FROM docs WHERE record_id = ?", (rid,))
        search_facets.drop(conn, rid)

    @staticmethod
    def _add(
        conn: sqlite3.Connection, rid: int, iri: str, source: str, modified: str, doc: Doc
    ) -> None:
        conn.execute(
            "INSERT INTO docs VALUES (?, ?, ?, ?, ?)",
            (rid, iri, source, doc.label[:500], modified),
        )
        conn.execute(
            "INSERT INTO fts (rowid, title, description, keywords) VALUES (?, ?, ?, ?)",
            (rid, doc.title, doc.description, doc.keywords),
        )
        search_facets.add(conn, rid, doc.facets)

    def search(
        self,
        state: sqlite3.Connection,
        text: str,
        selected: dict[str, list[str]],
        *,
        limit: int = 20,
        offset: int = 0,
    ) -> Results:
        """One page of matches, the total, and facet counts over every match.

        Facet filters choose facet sets (``search_facets.py``): those with at least one
        chosen value of every filtered facet. Without words, the sets alone give the total
        and the counts, and the page is read through them; words alone are read straight
        from the FTS5 doclist (no ranking) for the total and the counts; words and filters
        put the matches in the chosen sets into a temporary table once. Only the page is
        ranked."""
        self.catch_up(state, REQUEST_BUDGET)
        pending = self.behind(state)
        conn = self._conn()
        build = self._build(conn)
        match = fts_query(text)
        chosen = [_facet_ids(conn, k, list(selected[k])) for k in FACETS if selected.get(k)]
        if not match and not chosen:
            return replace(self._everything(conn, build, limit, offset), pending=pending)
        mark = self._watermark(conn)
        indexed, _ = self._facet_counter.whole(conn, build, mark)  # kept until the index moves
        if chosen:
            in_sets = self._facet_counter.choose(conn, build, mark, chosen)
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS ms (set_id INTEGER PRIMARY KEY)")
            conn.execute("DELETE FROM temp.ms")
            conn.execute(  # one statement: row by row, autocommit made each its own transaction
                "INSERT INTO temp.ms SELECT value FROM json_each(?)", (json.dumps(list(in_sets)),)
            )
            if not match:
                total = sum(in_sets.values())
                hits = self._filtered_page(conn, total, indexed, limit, offset)
                counted = self._facet_counter.expand(conn, build, in_sets)
                return Results(total, hits, _facets(counted, selected), pending)
        source, params = self._matches(conn, match, bool(chosen))
        total = int(conn.execute(f"SELECT count(*) FROM {source}", params).fetchone()[0])
        # rank every match by rowid alone, then make snippets for the page only
        page = [
            r[0]
            for r in conn.execute(
                # CROSS JOIN keeps fts outside: "rowid IN temp.m" would run the match
                # again for every id (docs/benchmarks.md#dashboard)
                "SELECT fts.rowid FROM fts"
                + (" CROSS JOIN temp.m ON m.rid = fts.rowid" if chosen else "")
                + " WHERE fts MATCH ? ORDER BY bm25(fts, 10.0, 1.0, 5.0), fts.rowid"
                " LIMIT ? OFFSET ?",
                (match, limit, offset),
            )
        ]
        # the snippet is cut here from the stored description: FTS5's snippet() runs the
        # match again for each row (docs/benchmarks.md#dashboard)
        words = re.findall(r"\w+", text)
        found: dict[int, tuple[Any, ...]] = {}
        for rid in page:
            row = conn.execute(
                "SELECT d.record_id, d.dataset_iri, d.source, d.title, d.modified,"
                " f.description FROM docs d JOIN fts f ON f.rowid = d.record_id"
                " WHERE d.record_id = ?",
                (rid,),
            ).fetchone()
            if row is not None:
                found[rid] = (*row[:5], make_snippet(row[5] or "", words))
        rows = [found[rid] for rid in page if rid in found]
        counted = self._facet_counter.matches(
            conn, build, mark, source, params, complement=total > indexed // 2
        )
        return Results(total, [Hit(*r) for r in rows], _facets(counted, selected), pending)

    @staticmethod
    def _filtered_page(
        conn: sqlite3.Connection, total: int, indexed: int, limit: int, offset: int
    ) -> list[Hit]:
        """Newest first, the page of the records in the chosen sets (``temp.ms``): walked
        from the newest document while they are common (about ``indexed / total`` documents
        read a hit), read through the sets' records and sorted while they are rare."""
        if not total:
            return []
        if total * RARE_FILTER >= indexed:
            sql = (
                "SELECT d.record_id, d.dataset_iri, d.source, d.title, d.modified, ''"
                " FROM docs d INDEXED BY docs_modified CROSS JOIN record_sets s"
                " ON s.record_id = d.record_id WHERE s.set_id IN temp.ms"
                " ORDER BY d.modified DESC, d.record_id DESC LIMIT ? OFFSET ?"
            )
        else:
            sql = (
                "SELECT d.record_id, d.dataset_iri, d.source, d.title, d.modified, ''"
                " FROM temp.ms CROSS JOIN record_sets s ON s.set_id = ms.set_id"
                " CROSS JOIN docs d ON d.record_id = s.record_id"
                " ORDER BY d.modified DESC, d.record_id DESC LIMIT ? OFFSET ?"
            )
        return [Hit(*r) for r in conn.execute(sql, (limit, offset))]

    @staticmethod
    def _matches(
        conn: sqlite3.Connection, match: str, filtered: bool
    ) -> tuple[str, tuple[str, ...]]:
        """SQL (and its parameters) selecting the ids of the records the words match as
        ``rid``: the FTS5 doclist, or with filters a temporary table filled once with the
        matches in the chosen sets (``temp.ms``)."""
        if not filtered:
            return "(SELECT rowid AS rid FROM fts WHERE fts MATCH ?)", (match,)
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS m (rid INTEGER PRIMARY KEY)")
        conn.execute("DELETE FROM temp.m")
        conn.execute(
            "INSERT INTO temp.m SELECT fts.rowid FROM fts CROSS JOIN record_sets s"
            " ON s.record_id = fts.rowid WHERE fts MATCH ? AND s.set_id IN temp.ms",
            (match,),
        )
        return "temp.m", ()

    @staticmethod
    def _watermark(conn: sqlite3.Connection) -> object:
        row = conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        return row[0] if row else None

    @staticmethod
    def _build(conn: sqlite3.Connection) -> object:
        """Which build of the index this is: ``store reindex`` counts a new one."""
        row = conn.execute("SELECT value FROM meta WHERE key = 'build'").fetchone()
        return row[0] if row else 0

    def _everything(
        self, conn: sqlite3.Connection, build: object, limit: int, offset: int
    ) -> Results:
        rows = conn.execute(
            "SELECT record_id, dataset_iri, source, title, modified, '' FROM docs"
            " ORDER BY modified DESC, record_id DESC LIMIT ? OFFSET ?",
            (limit, offset),
        ).fetchall()
        indexed, counted = self._facet_counter.whole(conn, build, self._watermark(conn))
        return Results(indexed, [Hit(*r) for r in rows], _facets(counted, {}))


def _facet_ids(conn: sqlite3.Connection, kind: str, values: list[str]) -> list[int]:
    """The ids of a facet's chosen values (none known: an id no record has)."""
    found = conn.execute(
        f"SELECT id FROM facet_values WHERE kind = ? AND value IN ({','.join('?' * len(values))})",
        (kind, *values),
    ).fetchall()
    return [int(r[0]) for r in found] or [-1]


def _facets(
    counted: Sequence[tuple[str, str, str, int]], selected: dict[str, list[str]]
) -> dict[str, list[FacetValue]]:
    """The 30 most frequent values of each facet (and every selected one), most first."""
    out: dict[str, list[FacetValue]] = {}
    for kind in FACETS:
        chosen = set(selected.get(kind) or [])
        values = sorted(
            ((v, lab, n) for k, v, lab, n in counted if k == kind), key=lambda t: (-t[2], t[1])
        )
        top = values[:30] + [t for t in values[30:] if t[0] in chosen]
        out[kind] = [FacetValue(v, lab, n, v in chosen) for v, lab, n in top]
    return out


def make_snippet(text: str, words: Sequence[str], width: int = 180) -> str:
    """About ``width`` characters of ``text`` around the first word of the query found in it,
    the query's words marked (\\x02 ... \\x03; the last word as a prefix, as it matched)."""
    if not text or not words:
        return ""
    alternatives = [
        re.escape(w) + r"\w*" if n == len(words) - 1 else re.escape(w) + r"\b"
        for n, w in enumerate(words)
    ]
    pattern = re.compile(r"\b(?:" + "|".join(alternatives) + ")", re.IGNORECASE)
    first = pattern.search(text)
    start = 0 if first is None else max(0, first.start() - width // 3)
    piece = text[start : start + width]
    marked = pattern.sub(lambda m: f"\x02{m.group(0)}\x03", piece)
    return ("… " if start else "") + marked + (" …" if start + width < len(text) else "")


def snippet_parts(snippet: str) -> Iterable[tuple[str, bool]]:
    """The snippet as (text, highlighted) pieces, for a template to mark up safely."""
    for n, part in enumerate(re.split("[\x02\x03]", snippet)):
        if part:
            yield part, n % 2 == 1
