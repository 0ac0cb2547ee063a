"""The facets of the search index (``search.py``): how they are kept, chosen and counted.

A record's facet values (its source, themes, formats, licences, conformance) are kept as one
*facet set* that every record with the same values shares: ``record_sets`` (record -> set),
``facet_sets`` (the set's values, and how many records have it, kept as records are indexed
and dropped). Records of one catalogue repeat a few combinations of values, so there are far
fewer sets than records (26,439 for the 1M run's million).

- Counting the facets of a search's matches reads one ``record_sets`` row per match and groups
  them by set; each set's count is then added to each of its values. The whole index's
  counts (the first visit, and the complement of a search that matches most of the index)
  are the sets' own counts.
- A facet filter chooses the sets with at least one chosen value of every filtered facet: the
  total and the counts of a search by filters alone are those sets' own, with no record read.

Facet values and sets are only ever added within one build of the index, so their ids are
cached by build (``store reindex`` counts a new one) and a missing id reloads the table
(docs/benchmarks.md#dashboard).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence

SCHEMA = """
CREATE TABLE IF NOT EXISTS facet_values (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    value TEXT NOT NULL,
    label TEXT NOT NULL,
    UNIQUE (kind, value)
);
CREATE TABLE IF NOT EXISTS facet_sets (
    id INTEGER PRIMARY KEY,
    facet_ids TEXT NOT NULL UNIQUE,
    records INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS record_sets (
    record_id INTEGER PRIMARY KEY,
    set_id INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS record_sets_by_set ON record_sets (set_id, record_id)
"""
TABLES = ("facet_values", "facet_sets", "record_sets")

#: (kind, value, label, records)
Count = tuple[str, str, str, int]


def add(conn: sqlite3.Connection, rid: int, facets: Iterable[tuple[str, str, str]]) -> None:
    """Index record ``rid``'s facet values (kind, value, label)."""
    ids: set[int] = set()
    for kind, value, label in facets:
        conn.execute(
            "INSERT OR IGNORE INTO facet_values (kind, value, label) VALUES (?, ?, ?)",
            (kind, value, label),
        )
        row = conn.execute(
            "SELECT id FROM facet_values WHERE kind = ? AND value = ?", (kind, value)
        ).fetchone()
        ids.add(int(row[0]))
    key = ",".join(str(i) for i in sorted(ids))
    set_id = conn.execute(
        "INSERT INTO facet_sets (facet_ids, records) VALUES (?, 1) ON CONFLICT (facet_ids)"
        " DO UPDATE SET records = records + 1 RETURNING id",
        (key,),
    ).fetchone()[0]
    conn.execute("INSERT INTO record_sets VALUES (?, ?)", (rid, set_id))


def drop(conn: sqlite3.Connection, rid: int) -> None:
    """Take record ``rid``'s facet values out of the index (nothing when it has none)."""
    row = conn.execute("SELECT set_id FROM record_sets WHERE record_id = ?", (rid,)).fetchone()
    if row is None:
        return
    conn.execute("UPDATE facet_sets SET records = records - 1 WHERE id = ?", (row[0],))
    conn.execute("DELETE FROM record_sets WHERE record_id = ?", (rid,))


class FacetCounter:
    """Facet counts over the index, a search's matches or the rest of the index, through the
    facet sets; one per ``SearchIndex`` (its caches are shared by the serving threads)."""

    def __init__(self) -> None:
        self._build: object = None
        self._names: dict[int, tuple[str, str, str]] = {}
        self._sets: dict[int, tuple[int, ...]] = {}
        self._by_facet: dict[int, set[int]] = {}  # facet value -> the sets holding it
        #: (build, watermark), {set: records} of the sets some record has, their facet counts
        self._whole: tuple[object, dict[int, int], list[Count]] | None = None

    def _per_set(
        self, conn: sqlite3.Connection, build: object, watermark: object
    ) -> tuple[dict[int, int], list[Count]]:
        """{set: records} of the sets some record has, and the facet counts of the whole
        index, kept until the index's ``watermark`` moves."""
        kept = self._whole
        if kept is None or kept[0] != (build, watermark):
            per_set = dict(conn.execute("SELECT id, records FROM facet_sets WHERE records > 0"))
            counted = self.expand(conn, build, per_set)
            kept = self._whole = ((build, watermark), per_set, counted)
        return kept[1], kept[2]

    def whole(
        self, conn: sqlite3.Connection, build: object, watermark: object
    ) -> tuple[int, list[Count]]:
        """(records indexed, the facet counts of all of them)."""
        per_set, counted = self._per_set(conn, build, watermark)
        return sum(per_set.values()), counted

    def choose(
        self,
        conn: sqlite3.Connection,
        build: object,
        watermark: object,
        chosen: Sequence[Sequence[int]],
    ) -> dict[int, int]:
        """{set: records} of the sets holding at least one of each filter's ``chosen`` facet
        value ids (sets no record has left out)."""
        per_set, _ = self._per_set(conn, build, watermark)
        self._load_sets(conn, build, per_set)
        by_facet = self._by_facet
        found = set(per_set)
        for ids in chosen:
            found &= set().union(*(by_facet.get(i, ()) for i in ids))
        return {set_id: per_set[set_id] for set_id in found}

    def matches(
        self,
        conn: sqlite3.Connection,
        build: object,
        watermark: object,
        source: str,
        params: Sequence[object],
        *,
        complement: bool = False,
    ) -> list[Count]:
        """Facet counts of the records whose ids ``source`` (SQL with a column ``rid``)
        selects. With ``complement`` the records *not* selected are read and subtracted from
        the whole index's counts: the work follows the smaller side."""
        if not complement:
            per_set = dict(
                conn.execute(
                    f"SELECT s.set_id, count(*) FROM {source} AS m CROSS JOIN record_sets s"
                    " ON s.record_id = m.rid GROUP BY s.set_id",
                    params,
                )
            )
            return self.expand(conn, build, per_set)
        per_set = dict(self._per_set(conn, build, watermark)[0])
        for set_id, rest in conn.execute(
            "SELECT set_id, count(*) FROM record_sets"
            f" WHERE record_id NOT IN (SELECT rid FROM {source}) GROUP BY set_id",
            params,
        ):
            per_set[set_id] = per_set.get(set_id, 0) - rest
        return self.expand(conn, build, per_set)

    def _load_sets(
        self, conn: sqlite3.Connection, build: object, needed: Iterable[int]
    ) -> dict[int, tuple[int, ...]]:
        if build != self._build:
            self._build, self._names, self._sets = build, {}, {}
        if any(s not in self._sets for s in needed):
            sets = {
                int(i): tuple(int(f) for f in str(ids).split(",") if f)
                for i, ids in conn.execute("SELECT id, facet_ids FROM facet_sets")
            }
            by_facet: dict[int, set[int]] = {}
            for set_id, facet_ids in sets.items():
                for facet_id in facet_ids:
                    by_facet.setdefault(facet_id, set()).add(set_id)
            self._sets, self._by_facet = sets, by_facet
        return self._sets

    def expand(
        self, conn: sqlite3.Connection, build: object, per_set: dict[int, int]
    ) -> list[Count]:
        """Each set's count added to each of its facet values."""
        sets = self._load_sets(conn, build, per_set)
        counts: Counter[int] = Counter()
        for set_id, n in per_set.items():
            if n > 0:
                for facet_id in sets.get(set_id, ()):
                    counts[facet_id] += n
        if any(f not in self._names for f in counts):
            self._names = {
                int(i): (str(k), str(v), str(lab))
                for i, k, v, lab in conn.execute("SELECT id, kind, value, label FROM facet_values")
            }
        return [(*self._names[f], n) for f, n in counts.items() if f in self._names]
