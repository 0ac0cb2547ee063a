"""Do the graph store, the state database and its OAI-PMH set index agree? (``aggregator
store check``), and bring them back into agreement (``--repair``).

The state database is the reference: it holds every record's canonical N-Triples (the
dataset, the source's catalogue facts) and the fields its catalogue record is made of, so the
content each named graph must hold is known without the graph store
(:meth:`~aggregator.store.records.StoreNames.graph_content`, the same content the write
protocol loads). What is checked:

- every record has its named graph with exactly that content, compared as the journal replay
  compares it (:func:`~aggregator.store.graphs.stale_contents`: through SPARQL, literals
  normalised as the store normalises them, blank nodes blinded), so an active record whose
  graph is missing or differs and a withdrawn or rejected record whose graph still holds its
  dataset are found;
- no named graph belongs to no record (an orphan): the graphs are the records' and the quality
  measurements' (``quality/...`` of an active record, ``quality/metrics``);
- the set index (``record_sets``, ``set_counts``) says what the records' sources and themes
  say (a record withdrawn by a deleted header has no themes in its row any more: the theme
  sets it was in are kept as they are, and cannot be rebuilt);
- the search index: ``serve/dashboard/search_upkeep.py`` (the command puts them together).

Everything goes through :class:`~aggregator.store.graphs.GraphBackend` (SPARQL, ``replace``,
``remove``) and the state database, so a remote backend is checked the same way. Records are
read in chunks of ``CHUNK`` (memory stays flat); the graph names are one set.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from aggregator.store.graphs import GraphBackend, GraphContent, stale_contents
from aggregator.store.names import StoreNames
from aggregator.store.record_sets import record_set_specs
from aggregator.store.state import RECORD_COLUMNS, RecordRow, StateDB

CHUNK = 500

MISSING = "missing graph"
DIFFERENT = "graph differs"
INACTIVE = "withdrawn record still in the graph store"
ORPHAN = "orphan graph"
SETS = "set index"
SET_COUNTS = "set count"


@dataclass(frozen=True, slots=True)
class Finding:
    """One disagreement: what kind, about what (an IRI, a set spec), said in words."""

    kind: str
    subject: str
    detail: str


@dataclass
class CheckReport:
    records: int = 0
    graphs: int = 0
    findings: list[Finding] = field(default_factory=list)
    pending: int = 0  # journal marks a writer has not replayed yet (graphs may lag for them)
    repaired: dict[str, int] = field(default_factory=dict)  # kind -> how many were fixed

    @property
    def ok(self) -> bool:
        return not self.findings or sum(self.repaired.values()) >= len(self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "graphs": self.graphs,
            "pending": self.pending,
            "findings": [asdict(f) for f in self.findings],
            "repaired": self.repaired,
            "ok": self.ok,
        }

    def lines(self) -> Iterator[str]:
        yield f"checked {self.records} record(s) and {self.graphs} named graph(s)"
        if self.pending:
            yield (
                f"  {self.pending} journalled write(s) not replayed yet: the next writer (or"
                " --repair) replays them"
            )
        for f in self.findings:
            yield f"  {f.kind}: {f.subject}: {f.detail}"
        for kind, n in sorted(self.repaired.items()):
            yield f"repaired {n}: {kind}"
        if not self.findings:
            yield "graphs, records, the set index and the search index agree"
        elif not self.repaired:
            yield (
                f"{len(self.findings)} disagreement(s): run `aggregator store check --repair`"
                " to rebuild them from the state database"
            )


def records_in_chunks(db: StateDB) -> Iterator[list[RecordRow]]:
    after = 0
    while True:
        rows = [
            RecordRow.from_row(r)
            for r in db.conn.execute(
                f"SELECT {RECORD_COLUMNS} FROM records WHERE id > ? ORDER BY id LIMIT ?",
                (after, CHUNK),
            )
        ]
        if not rows:
            return
        yield rows
        after = rows[-1].id


def _content(names: StoreNames, db: StateDB, row: RecordRow) -> GraphContent:
    nt, cat = db.graph_bytes(row.id) if row.status == "active" else (b"", b"")
    return names.graph_content(row, row.id, True, nt, cat)


def check_graphs(
    names: StoreNames, db: StateDB, graphs: GraphBackend, report: CheckReport, *, repair: bool
) -> None:
    """Compare each record's named graph with its state; with ``repair``, rewrite those that
    differ and drop the orphans."""
    held = graphs.graph_names()
    report.graphs = len(held)
    kept: set[str] = set()
    for rows in records_in_chunks(db):
        report.records += len(rows)
        by_iri = {row.record_iri: row for row in rows}
        kept.update(by_iri)
        stale = stale_contents(graphs, [_content(names, db, row) for row in rows])
        found = [_graph_finding(by_iri[c.graph_iri], c.graph_iri in held) for c in stale]
        report.findings += found
        if repair and stale:
            graphs.replace(stale)
            for finding in found:
                report.repaired[finding.kind] = report.repaired.get(finding.kind, 0) + 1
    kept.add(names.shared_graph)  # checked on its own: shared_check.py
    orphans = sorted(g for g in held - kept if not _measurement(names, db, g))
    report.findings += [Finding(ORPHAN, g, "no record has this graph") for g in orphans]
    if repair and orphans:
        graphs.remove(orphans)
        report.repaired[ORPHAN] = len(orphans)


def _graph_finding(row: RecordRow, exists: bool) -> Finding:
    if not exists:
        return Finding(
            MISSING, row.record_iri, f"the {row.status} record {row.local_id!r} has no graph"
        )
    if row.status != "active":
        return Finding(
            INACTIVE, row.record_iri, f"{row.status}: its graph is not its catalogue record alone"
        )
    return Finding(DIFFERENT, row.record_iri, f"not the stored content of {row.local_id!r}")


def _measurement(names: StoreNames, db: StateDB, graph: str) -> bool:
    """A graph of quality measurements that belongs: of an active record, or the metrics."""
    quality = f"{names.base_iri}quality/"
    if not graph.startswith(quality):
        return False
    if graph == f"{quality}metrics":
        return True
    record_iri = f"{names.base_iri}record/{graph[len(quality) :]}"
    row = db.conn.execute(
        "SELECT 1 FROM records WHERE record_iri = ? AND status = 'active'", (record_iri,)
    ).fetchone()
    return row is not None


def check_sets(conn: sqlite3.Connection, report: CheckReport) -> list[int]:
    """The set index against the records; returns the ids of records whose rows are wrong
    (a withdrawal keeps the theme sets the record had: they cannot be told from its row)."""
    bad: list[int] = []
    cur = conn.execute(
        "SELECT r.id, r.record_iri, r.source, r.status, r.themes, r.modified,"
        " group_concat(s.set_spec, ' '), sum(s.modified != r.modified)"
        " FROM records r LEFT JOIN record_sets s ON s.record_id = r.id GROUP BY r.id"
    )
    for rid, iri, source, status, themes, _modified, specs, stale_dates in cur:
        have = set(str(specs).split()) if specs else set()
        want = set(record_set_specs(str(source), str(themes or "")))
        if status == "active":
            right = have == want
        elif status == "withdrawn":
            right = {"source", f"source:{source}"} <= have and all(
                s in want or s.startswith("theme") for s in have
            )
        else:
            right = not have
        if not right or stale_dates:
            bad.append(int(rid))
            report.findings.append(
                Finding(SETS, str(iri), f"in sets {sorted(have)}; its {status} row says otherwise")
            )
    strays = conn.execute(
        "SELECT DISTINCT record_id FROM record_sets WHERE record_id NOT IN (SELECT id FROM records)"
    ).fetchall()
    for (rid,) in strays:
        bad.append(int(rid))
        report.findings.append(Finding(SETS, f"record id {rid}", "set rows of no record"))
    counts = conn.execute(
        "SELECT coalesce(c.set_spec, s.set_spec), c.n, s.n FROM set_counts c"
        " FULL OUTER JOIN (SELECT set_spec, count(*) AS n FROM record_sets GROUP BY set_spec) s"
        " ON s.set_spec = c.set_spec WHERE coalesce(c.n, 0) != coalesce(s.n, 0)"
    ).fetchall()
    for spec, kept, real in counts:
        detail = f"counted {kept or 0}, holds {real or 0} record(s)"
        report.findings.append(Finding(SET_COUNTS, str(spec), detail))
    return bad


def _put_sets(db: StateDB, ids: list[int]) -> None:
    """Give the records of ``ids`` their set rows again (a withdrawn one keeps the theme sets
    it had), in one transaction of the writer's connection; rows of no record go."""
    with db.serial:
        db.begin()
        try:
            for rid in ids:
                row = db.conn.execute(
                    "SELECT source, status, themes, modified FROM records WHERE id = ?", (rid,)
                ).fetchone()
                if row is None:
                    db.conn.execute("DELETE FROM record_sets WHERE record_id = ?", (rid,))
                    continue
                source, status, themes, modified = row
                db.sets.put(rid, source, status, themes or "", modified)
            db.commit()
        except BaseException:
            db.rollback()
            raise


def _count_sets(db: StateDB) -> None:
    with db.serial:
        db.begin()
        try:
            db.sets.count_all()
            db.commit()
        except BaseException:
            db.rollback()
            raise


def repair_sets(db: StateDB, bad: list[int], report: CheckReport) -> None:
    """Rebuild the set rows of the records of ``bad`` and count every set afresh."""
    for start in range(0, len(bad), CHUNK):
        _put_sets(db, bad[start : start + CHUNK])
    _count_sets(db)
    fixed = sum(1 for f in report.findings if f.kind in (SETS, SET_COUNTS))
    if fixed:
        report.repaired[SETS] = fixed


def rebuild_sets(db: StateDB) -> int:
    """Rebuild the whole set index from the records, a chunk of records per transaction
    (each keeps ``set_counts`` in step), then count every set afresh; returns the records."""
    done = 0
    for rows in records_in_chunks(db):
        _put_sets(db, [row.id for row in rows])
        done += len(rows)
    strays = db.conn.execute(
        "SELECT DISTINCT record_id FROM record_sets WHERE record_id NOT IN (SELECT id FROM records)"
    ).fetchall()
    _put_sets(db, [int(r[0]) for r in strays])
    _count_sets(db)
    return done


def pending_marks(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT count(*) FROM journal").fetchone()
    return int(row[0])
