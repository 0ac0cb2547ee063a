"""The dead-letter store: records that could not be stored, kept with their payload, the
failing step and every finding; listed, exported, and revalidated after rules or mappings
change.

A record has at most one *open* rejection: a record that fails again brings it up to date
(the job, step, findings, payload and datestamp of the latest failure; each job's errors keep
what it said). A rejection is closed (``superseded_by``: that job) when a later job stores the
record. ``revalidate`` runs, per source, a job whose listing is the open
rejections: what now passes is stored and its rejection closed, what still fails updates its
rejection with the new findings. The harvester's own findings on a record (stage ``fetch``: a
META-SHARE checksum that does not match) are not the rules' to revise: they come with the
record again, and reject it again.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aggregator.config import Settings
from aggregator.core.errors import NotFoundError
from aggregator.core.models import Finding, RawRecord, Severity, Stage
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.journal import JobRow
from aggregator.store.records import RecordStore, StoreReads
from aggregator.store.rejections import REJECTION_COLUMNS

FIELDS = tuple(c.strip() for c in REJECTION_COLUMNS.split(","))


@dataclass(frozen=True, slots=True)
class Rejection:
    id: int
    source: str
    local_id: str
    job_id: int
    stage: str
    payload_sha: str
    media_type: str
    format: str
    url: str | None
    datestamp: str | None
    is_collection: bool
    findings: list[dict[str, Any]]
    created: str
    superseded_by: int | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Rejection:
        values = dict(zip(FIELDS, row, strict=True))
        values["findings"] = json.loads(values["findings"])
        values["is_collection"] = bool(values["is_collection"])
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in FIELDS}

    def cause(self) -> str:
        """What made the record fail: the first violation's rule and message (the findings
        also hold warnings and informational notes, which reject nothing)."""
        found = next((f for f in self.findings if f.get("severity") == "violation"), None)
        if found is None:
            found = self.findings[0] if self.findings else {}
        rule, message = found.get("rule") or "", found.get("message") or ""
        return f"{rule}: {message}" if rule and message else rule or message


def rejections(
    store: StoreReads,
    *,
    source: str | None = None,
    job_id: int | None = None,
    include_closed: bool = False,
    limit: int | None = None,
) -> list[Rejection]:
    clauses: list[str] = []
    args: list[Any] = []
    if source:
        clauses.append("source = ?")
        args.append(source)
    if job_id is not None:
        clauses.append("job_id = ?")
        args.append(job_id)
    if not include_closed:
        clauses.append("superseded_by IS NULL")
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    lim = f" LIMIT {int(limit)}" if limit else ""
    cur = store.db.conn.execute(
        f"SELECT {REJECTION_COLUMNS} FROM rejections {where} ORDER BY id{lim}", args
    )
    return [Rejection.from_row(r) for r in cur]


def rejection(store: StoreReads, rejection_id: int) -> Rejection:
    row = store.db.conn.execute(
        f"SELECT {REJECTION_COLUMNS} FROM rejections WHERE id = ?", (rejection_id,)
    ).fetchone()
    if row is None:
        raise NotFoundError(f"no rejection {rejection_id}")
    return Rejection.from_row(row)


def export(items: Sequence[Rejection], fmt: str) -> str:
    """CSV (one row per finding, for spreadsheets) or JSON (one object per rejection)."""
    if fmt == "json":
        return json.dumps([r.as_dict() for r in items], indent=2) + "\n"
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        [
            "id",
            "source",
            "local_id",
            "job_id",
            "stage",
            "severity",
            "rule",
            "message",
            "location",
            "path",
            "payload_sha",
            "created",
            "superseded_by",
        ]
    )
    for r in items:
        for f in r.findings or [{}]:
            writer.writerow(
                [
                    r.id,
                    r.source,
                    r.local_id,
                    r.job_id,
                    f.get("stage", r.stage),
                    f.get("severity"),
                    f.get("rule"),
                    f.get("message"),
                    f.get("location"),
                    f.get("path"),
                    r.payload_sha,
                    r.created,
                    r.superseded_by,
                ]
            )
    return out.getvalue()


def harvester_findings(r: Rejection) -> tuple[Finding, ...]:
    """The findings the harvester made on the record when it fetched it (stage ``fetch``):
    what was wrong with the record as received, which no rule or mapping change undoes."""
    return tuple(
        Finding(
            Stage.FETCH,
            Severity(f["severity"]),
            f.get("rule") or "",
            f.get("message") or "",
            f.get("location"),
            f.get("path"),
            f.get("step"),
        )
        for f in r.findings
        if f.get("stage") == Stage.FETCH.value
    )


def _lister(store: RecordStore, items: Sequence[Rejection]) -> Any:
    def list_records(request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        for r in items:
            found = store.payload(r.payload_sha)
            if found is None:
                listing.note(f"payload of rejection {r.id} is missing")
                continue
            listing.seen += 1
            yield RawRecord(
                source=r.source,
                local_id=r.local_id,
                format=r.format,
                payload=found[1],
                media_type=r.media_type,
                url=r.url,
                datestamp=datetime.fromisoformat(r.datestamp) if r.datestamp else None,
                is_collection=r.is_collection,
                findings=harvester_findings(r),
            )
        listing.pages = 1
        listing.mark_complete()

    return list_records


def revalidate(
    settings: Settings, store: RecordStore, *, source: str | None = None
) -> list[JobRow]:
    """Map and validate every open rejection again with today's rules; one job per source."""
    jobs = []
    by_source: dict[str, dict[tuple[str, str], Rejection]] = {}
    for r in rejections(store, source=source):
        # the newest rejection of each record (or catalogue page) is the one worth retrying
        by_source.setdefault(r.source, {})[(r.local_id, r.payload_sha)] = r
    for name, items in sorted(by_source.items()):
        src = settings.source(name)
        latest: dict[str, Rejection] = {}
        for r in items.values():
            latest[r.local_id] = r
        todo = sorted(latest.values(), key=lambda r: r.id)
        opts = RunOptions(force=True, lister=_lister(store, todo))
        job = run_source(settings, store, src, opts, http=HttpClient(settings.http))
        ids = [r.id for r in rejections(store, source=name) if r.job_id != job.id]
        store.db.begin()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            store.db.conn.execute(
                f"UPDATE rejections SET superseded_by = ? WHERE id IN ({marks})", (job.id, *chunk)
            )
        store.db.commit()
        jobs.append(job)
    return jobs
