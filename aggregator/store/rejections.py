"""Rejections, the dead-letter side of the state database: a record that could not be
stored is kept with its payload and findings (one open rejection per record, brought up to
date when it fails again) and closed when a later batch stores the record
(docs/validation.md, :mod:`aggregator.jobs.deadletter` for reading them)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from aggregator.store.state import RecordWrite


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that could not be stored, kept with everything needed to try it again."""

    source: str
    local_id: str  # the record, or the page URL of a catalogue page that could not be read
    job_id: int
    stage: str  # the failing step: parse, map, xsd, schematron, shacl, check
    payload_sha: str  # the payload itself is in the payloads table
    media_type: str
    format: str
    url: str | None
    datestamp: str | None
    is_collection: bool
    findings: str  # JSON list of every finding (rule, severity, message, location, path)


REJECTION_COLUMNS = (
    "id, source, local_id, job_id, stage, payload_sha, media_type, format, url, datestamp,"
    " is_collection, findings, created, superseded_by"
)


def keep_dead_letters(conn: sqlite3.Connection, letters: Sequence[DeadLetter], ts: str) -> None:
    """Open a rejection per letter, or, when the record already has its one open rejection
    (same source and local_id, not superseded), bring that one up to date: job, stage,
    payload, datestamp and findings are the latest failure's; ``created`` stays the first's
    (the job errors keep what each failure said)."""
    conn.executemany(
        f"INSERT INTO rejections ({REJECTION_COLUMNS.partition(', ')[2]})"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL)"
        " ON CONFLICT (source, local_id) WHERE superseded_by IS NULL DO UPDATE SET"
        " job_id = excluded.job_id, stage = excluded.stage, payload_sha = excluded.payload_sha,"
        " media_type = excluded.media_type, format = excluded.format, url = excluded.url,"
        " datestamp = excluded.datestamp, is_collection = excluded.is_collection,"
        " findings = excluded.findings",
        [
            (
                d.source,
                d.local_id,
                d.job_id,
                d.stage,
                d.payload_sha,
                d.media_type,
                d.format,
                d.url,
                d.datestamp,
                int(d.is_collection),
                d.findings,
                ts,
            )
            for d in letters
        ],
    )


def close_rejections(conn: sqlite3.Connection, job_id: int, stored: Sequence[RecordWrite]) -> None:
    """These records were stored by ``job_id``: their open rejections are closed."""
    conn.executemany(
        "UPDATE rejections SET superseded_by = ?"
        " WHERE source = ? AND local_id = ? AND superseded_by IS NULL",
        [(job_id, w.source, w.local_id) for w in stored if w.status == "active"],
    )
