"""The OAI-PMH set index of the state database: ``record_sets`` (one row per record and set,
ordered for keyset paging) and ``set_counts`` (each set's size, so that a whole set's
``completeListSize`` is one row instead of a count).

:class:`SetIndex` works inside the transactions of :class:`aggregator.store.state.StateDB`:
:meth:`SetIndex.put` as each record is written (its new rows inserted a batch at a time by
:meth:`SetIndex.flush_rows`), :meth:`SetIndex.flush` just before commit
(the size changes collected since ``BEGIN``), :meth:`SetIndex.discard` on rollback.
"""

from __future__ import annotations

import sqlite3
from collections import Counter

EU_THEME_IRIS = (
    "http://publications.europa.eu/resource/authority/data-theme/",
    "https://publications.europa.eu/resource/authority/data-theme/",
)
EU_THEME_CODES = frozenset(
    {"AGRI", "ECON", "EDUC", "ENER", "ENVI", "GOVE", "HEAL"}
    | {"INTR", "JUST", "REGI", "SOCI", "TECH", "TRAN"}
)


def record_set_specs(source: str, themes: str) -> list[str]:
    """The OAI-PMH sets of a published record: ``source``/``source:NAME`` and, when it has EU
    data themes, ``theme``/``theme:CODE`` (parents are kept as rows so that a set query is
    one index range)."""
    specs = ["source", f"source:{source}"]
    codes = sorted(
        {
            code
            for iri in themes.split()
            for base in EU_THEME_IRIS
            if iri.startswith(base) and (code := iri[len(base) :]) in EU_THEME_CODES
        }
    )
    if codes:
        specs += ["theme", *(f"theme:{c}" for c in codes)]
    return specs


class SetIndex:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # rows added to (+) and taken from (-) each set in the open transaction
        self._delta: Counter[str] = Counter()
        self._rows: list[tuple[int, str, str]] = []  # rows to insert (flush_rows)

    def put(
        self,
        record_id: int,
        source: str,
        status: str,
        themes: str,
        modified: str,
        *,
        new: bool = False,
    ) -> None:
        """Keep ``record_sets`` (the OAI-PMH set index) in step with one record's new state.

        Rejected records are in no set. A withdrawal keeps the theme sets the record was in
        (its themes go with its content), so selective harvesters see the deleted header.
        ``new``: the record was not in the database before, so it has no rows to drop. The
        new rows are inserted by :meth:`flush_rows`, a batch at a time.
        """
        if new:
            if status in ("active", "withdrawn"):
                self._add(record_id, record_set_specs(source, themes), modified)
            return
        self.flush_rows()  # the rows this record may have been given earlier in the batch
        conn = self.conn
        if status not in ("active", "withdrawn"):
            self._drop(record_id)
            return
        specs = record_set_specs(source, themes)
        if status == "withdrawn" and len(specs) == 2:
            cur = conn.execute(
                "SELECT set_spec FROM record_sets WHERE record_id = ?"
                " AND set_spec >= 'theme' AND set_spec < 'theme;'",
                (record_id,),
            )
            specs += [str(r[0]) for r in cur]
        self._drop(record_id)
        self._add(record_id, specs, modified)

    def _add(self, record_id: int, specs: list[str], modified: str) -> None:
        self._rows += [(record_id, spec, modified) for spec in specs]
        self._delta.update(specs)

    def flush_rows(self) -> None:
        """Insert the rows :meth:`put` collected (inside the transaction of the puts)."""
        if self._rows:
            self.conn.executemany(
                "INSERT INTO record_sets (record_id, set_spec, modified) VALUES (?,?,?)",
                self._rows,
            )
            self._rows = []

    def _drop(self, record_id: int) -> None:
        cur = self.conn.execute(
            "DELETE FROM record_sets WHERE record_id = ? RETURNING set_spec", (record_id,)
        )
        self._delta.subtract(str(r[0]) for r in cur)

    def flush(self) -> None:
        """Add the open transaction's changes to ``set_counts`` (just before it commits)."""
        self.flush_rows()
        if not self._delta:
            return
        self.conn.executemany(
            "INSERT INTO set_counts (set_spec, n) VALUES (?, ?)"
            " ON CONFLICT (set_spec) DO UPDATE SET n = n + excluded.n",
            [(spec, n) for spec, n in self._delta.items() if n],
        )
        self._delta.clear()

    def discard(self) -> None:
        """The transaction was rolled back: forget its changes."""
        self._delta.clear()
        self._rows = []

    def count_all(self) -> None:
        """Count every set afresh (schema migration 1: a store made before ``set_counts``)."""
        self.conn.execute("DELETE FROM set_counts")
        self.conn.execute(
            "INSERT INTO set_counts (set_spec, n)"
            " SELECT set_spec, count(*) FROM record_sets GROUP BY set_spec"
        )
        self._delta.clear()

    def fill(self) -> None:
        """Build the set index from the records (schema migration 1: a store made before
        it existed)."""
        rows = self.conn.execute(
            "SELECT id, source, status, themes, modified FROM records"
            " WHERE status IN ('active', 'withdrawn')"
        ).fetchall()
        for rid, source, status, themes, modified in rows:
            self.put(int(rid), source, status, themes or "", modified)
        self.flush_rows()
