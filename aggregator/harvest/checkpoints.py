"""The checkpoint of the JSON API harvesters (``ckan``, ``ogc-records``) and when a full run is due.

A successful run saves ``{"since": ..., "full_at": ...}``: ``since`` is the newest
modification time the source reported in that run (the source's own clock, so no skew between
machines), ``full_at`` when the last complete full run ended. The next run is incremental from
``since`` unless a full run is due: ``full_every_days`` after ``full_at`` (never, with 0). A
full run is the only one that withdraws records gone from the source, so this is what catches
deletions; the harvester decides it from the checkpoint in the state database, whoever starts
the job (the CLI or a scheduler).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True)
class Checkpoint:
    since: str | None
    full_at: str | None

    @classmethod
    def read(cls, text: str | None) -> Checkpoint | None:
        if not text:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(data, dict):
            return None
        since, full_at = data.get("since"), data.get("full_at")
        return cls(
            since if isinstance(since, str) else None,
            full_at if isinstance(full_at, str) else None,
        )

    def dump(self) -> str:
        return json.dumps({"since": self.since, "full_at": self.full_at}, sort_keys=True)

    def full_due(self, every_days: int, now: datetime) -> bool:
        """Whether ``every_days`` have passed since the last full run (0: never due)."""
        if every_days == 0:
            return False
        if self.full_at is None:
            return True
        try:
            last = datetime.fromisoformat(self.full_at)
        except ValueError:
            return True
        return now - last >= timedelta(days=every_days)
