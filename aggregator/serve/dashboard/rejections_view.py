"""Every open rejection across sources, newest first, for the Rejections page
(framework-neutral): a record that could not be stored and has not been stored since.

Paged by keys (``id`` below the last one shown), never by offset, so a page costs the same at
any depth and rejections added meanwhile do not shift the pages; filterable by source (the
``rejections_open (source, id)`` partial index) and by the step that rejected the record.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

PAGE = 50


@dataclass(frozen=True, slots=True)
class OpenRejection:
    id: int
    source: str
    local_id: str
    job_id: int
    stage: str
    created: str  # first rejected (an open rejection is brought up to date when it fails again)
    reason: str  # the first violation's rule and message


@dataclass(frozen=True, slots=True)
class RejectionPage:
    rows: list[OpenRejection]
    total: int  # open rejections matching the filter
    next_before: int | None  # the key of the next (older) page, None on the last page


def _reason(findings: str) -> str:
    try:
        items: list[dict[str, Any]] = json.loads(findings)
    except ValueError:
        return ""
    first = next((f for f in items if f.get("severity") == "violation"), None)
    if first is None:
        return ""
    return str(first.get("message") or first.get("rule") or "")


def open_rejections(
    db: sqlite3.Connection,
    *,
    source: str = "",
    stage: str = "",
    before: int | None = None,
    limit: int = PAGE,
) -> RejectionPage:
    where = ["superseded_by IS NULL"]
    args: list[Any] = []
    if source:
        where.append("source = ?")
        args.append(source)
    if stage:
        where.append("stage = ?")
        args.append(stage)
    clause = " AND ".join(where)
    total = int(db.execute(f"SELECT count(*) FROM rejections WHERE {clause}", args).fetchone()[0])
    if before is not None:
        clause += " AND id < ?"
        args.append(before)
    rows = db.execute(
        "SELECT id, source, local_id, job_id, stage, created, findings FROM rejections"
        f" WHERE {clause} ORDER BY id DESC LIMIT ?",
        (*args, limit + 1),
    ).fetchall()
    more = len(rows) > limit
    shown = [
        OpenRejection(int(r[0]), r[1], r[2], int(r[3]), r[4], r[5], _reason(r[6]))
        for r in rows[:limit]
    ]
    return RejectionPage(shown, total, shown[-1].id if more and shown else None)


def open_facets(db: sqlite3.Connection) -> tuple[list[str], list[str]]:
    """(sources, steps) that have open rejections, for the filter's choices."""
    sources = [
        r[0]
        for r in db.execute(
            "SELECT DISTINCT source FROM rejections WHERE superseded_by IS NULL ORDER BY 1"
        )
    ]
    stages = [
        r[0]
        for r in db.execute(
            "SELECT DISTINCT stage FROM rejections WHERE superseded_by IS NULL ORDER BY 1"
        )
    ]
    return sources, stages
