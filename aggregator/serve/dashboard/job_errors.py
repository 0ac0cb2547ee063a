"""A job's per-record errors: grouped by step and rule with counts, filtered, exported as CSV,
and the dead-letter entry (payload and findings) of a rejected record (framework-neutral)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aggregator.store.rejections import REJECTION_COLUMNS

PAGE = 200  # error rows shown at once (the CSV has them all)


@dataclass(frozen=True, slots=True)
class ErrorFilter:
    stage: str = ""
    rule: str = ""
    severity: str = ""
    text: str = ""  # substring of the record id or the message

    def where(self, job_id: int) -> tuple[str, list[Any]]:
        clauses: list[str] = ["job_id = ?"]
        args: list[Any] = [job_id]
        for col in ("stage", "rule", "severity"):
            value = getattr(self, col)
            if value:
                clauses.append(f"{col} = ?")
                args.append(value)
        if self.text:
            clauses.append("(instr(lower(local_id), ?) > 0 OR instr(lower(message), ?) > 0)")
            args += [self.text.lower(), self.text.lower()]
        return " AND ".join(clauses), args

    def params(self) -> dict[str, str]:
        return {
            k: v
            for k, v in (
                ("stage", self.stage),
                ("rule", self.rule),
                ("severity", self.severity),
                ("q", self.text),
            )
            if v
        }


@dataclass(frozen=True, slots=True)
class ErrorGroup:
    stage: str
    rule: str
    severity: str
    count: int
    records: int
    example: str


@dataclass(frozen=True, slots=True)
class ErrorRow:
    seq: int
    local_id: str
    stage: str
    severity: str
    rule: str
    message: str
    location: str | None
    rejection_id: int | None


def groups(db: sqlite3.Connection, job_id: int, flt: ErrorFilter) -> list[ErrorGroup]:
    """Most frequent first."""
    where, args = flt.where(job_id)
    rows = db.execute(
        f"SELECT stage, rule, severity, count(*), count(DISTINCT local_id), min(message)"
        f" FROM job_errors WHERE {where} GROUP BY stage, rule, severity"
        f" ORDER BY count(*) DESC, stage, rule",
        args,
    )
    return [ErrorGroup(*r) for r in rows]


def _rows(
    db: sqlite3.Connection, job_id: int, flt: ErrorFilter, limit: int | None
) -> Iterator[Any]:
    where, args = flt.where(job_id)
    # the rejection this job made of the record (through the rejections_job index); a record
    # that failed again later has its rejection on that later job
    link = (
        "(SELECT r.id FROM rejections r WHERE r.job_id = e.job_id AND r.local_id = e.local_id"
        " ORDER BY r.id DESC LIMIT 1)"
        if limit is not None
        else "NULL"
    )
    sql = (
        f"SELECT e.seq, e.local_id, e.stage, e.severity, e.rule, e.message, e.location, {link}"
        f" FROM job_errors e WHERE {where.replace('job_id', 'e.job_id', 1)} ORDER BY e.seq"
    )
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return iter(db.execute(sql, args))


def rows(
    db: sqlite3.Connection, job_id: int, flt: ErrorFilter, limit: int = PAGE
) -> list[ErrorRow]:
    return [ErrorRow(*r) for r in _rows(db, job_id, flt, limit)]


def count(db: sqlite3.Connection, job_id: int, flt: ErrorFilter) -> int:
    where, args = flt.where(job_id)
    return int(db.execute(f"SELECT count(*) FROM job_errors WHERE {where}", args).fetchone()[0])


CSV_FIELDS = ("job", "record", "stage", "severity", "rule", "message", "location")


def csv_chunks(db: sqlite3.Connection, job_id: int, flt: ErrorFilter) -> Iterator[str]:
    """The filtered errors as CSV, a chunk per 500 rows (memory stays flat)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(CSV_FIELDS)
    for n, r in enumerate(_rows(db, job_id, flt, None), 1):
        writer.writerow([job_id, r[1], r[2], r[3], r[4], _defuse(r[5]), r[6] or ""])
        if n % 500 == 0:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def csv_stream(state_db: Path, job_id: int, flt: ErrorFilter) -> Iterator[str]:
    """:func:`csv_chunks` on a read-only connection of its own, closed at the end (a stream is
    read from other threads than the request's)."""
    conn = sqlite3.connect(f"file:{state_db}?mode=ro", uri=True, check_same_thread=False)
    try:
        yield from csv_chunks(conn, job_id, flt)
    finally:
        conn.close()


def rule_label(rule: str) -> str:
    """A rule in words: ``<shape IRI>|sh:DatatypeConstraintComponent`` -> ``Distribution-byteSize:
    datatype constraint`` (the full rule stays in the CSV and the link's title)."""
    import re

    parts = []
    for part in rule.split("|"):
        if part.startswith("sh:") and part.endswith("ConstraintComponent"):
            words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", part[3 : -len("ConstraintComponent")])
            parts.append(f"{words.lower()} constraint")
        elif "://" in part:
            parts.append(re.split(r"[/#]", part.rstrip("/#"))[-1] or part)
        else:
            parts.append(part)
    return ": ".join(parts)


def _defuse(text: str) -> str:
    """A cell a spreadsheet would run as a formula gets a leading quote (CSV injection)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@dataclass(frozen=True, slots=True)
class RejectionView:
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
    findings: list[dict[str, Any]]
    created: str
    superseded_by: int | None
    payload_text: str | None  # the payload as text when it decodes and is not huge
    payload_size: int


_FIELDS = [c.strip() for c in REJECTION_COLUMNS.split(",")]
SHOW_PAYLOAD = 256 * 1024


def rejection(db: sqlite3.Connection, rejection_id: int) -> RejectionView | None:
    from aggregator.store.packing import unpack

    row = db.execute(
        f"SELECT {REJECTION_COLUMNS} FROM rejections WHERE id = ?", (rejection_id,)
    ).fetchone()
    if row is None:
        return None
    values = dict(zip(_FIELDS, row, strict=True))
    payload = db.execute(
        "SELECT size, data FROM payloads WHERE sha256 = ?", (values["payload_sha"],)
    ).fetchone()
    text, size = None, 0
    if payload is not None:
        size = int(payload[0])
        if size <= SHOW_PAYLOAD:
            try:
                text = unpack(payload[1]).decode("utf-8")
            except UnicodeDecodeError:
                text = None
    return RejectionView(
        id=int(values["id"]),
        source=values["source"],
        local_id=values["local_id"],
        job_id=int(values["job_id"]),
        stage=values["stage"],
        payload_sha=values["payload_sha"],
        media_type=values["media_type"],
        format=values["format"],
        url=values["url"],
        datestamp=values["datestamp"],
        findings=json.loads(values["findings"]),
        created=values["created"],
        superseded_by=values["superseded_by"],
        payload_text=text,
        payload_size=size,
    )


def job_rejections(db: sqlite3.Connection, job_id: int, limit: int = PAGE) -> list[tuple[Any, ...]]:
    """(id, local_id, stage, open) of the rejections a job made or updated, newest first."""
    return db.execute(
        "SELECT id, local_id, stage, superseded_by IS NULL FROM rejections WHERE job_id = ?"
        " ORDER BY id DESC LIMIT ?",
        (job_id, limit),
    ).fetchall()
