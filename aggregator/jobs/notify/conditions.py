"""Open error conditions per source, and their escalation and recovery.

A condition opens on one of its ``raise_on`` events, escalates once when it has lasted its
duration (checked on every event and on :meth:`ConditionTracker.tick`), and closes on one of
its ``clear_on`` events. The open conditions are kept in a small JSON file, when one is
given, so that a monitor run by cron every few minutes still knows since when a service has
been down; the file is read and written under an exclusive ``flock``, so processes sharing it
(the scheduler in ``serve``, a CLI harvest) do not lose each other's updates.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from aggregator.config.notify import Condition


@dataclass(frozen=True, slots=True)
class Transition:
    """What an event or a tick did to a condition of a source."""

    condition: Condition
    source: str
    what: str  # opened, joined (another raising kind), repeated, escalated, cleared
    since: datetime
    reason: str  # the message of the event that opened it


class ConditionTracker:
    def __init__(
        self,
        conditions: Sequence[Condition],
        clock: Callable[[], datetime],
        state_file: Path | None = None,
    ) -> None:
        self.conditions = list(conditions)
        self.clock = clock
        self.state_file = state_file
        self._memory: dict[str, dict[str, Any]] = {}

    def add(self, condition: Condition) -> None:
        self.conditions.append(condition)

    @contextmanager
    def _state(self) -> Iterator[dict[str, dict[str, Any]]]:
        if self.state_file is None:
            yield self._memory
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_file, os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            text = fh.read()
            try:
                state: dict[str, dict[str, Any]] = json.loads(text) if text.strip() else {}
            except json.JSONDecodeError:
                state = {}  # a damaged file loses only the open conditions' start times
            before = json.dumps(state, sort_keys=True)
            yield state
            after = json.dumps(state, sort_keys=True, indent=1)
            if after != before:
                fh.seek(0)
                fh.truncate()
                fh.write(after)
                fh.flush()
                os.fsync(fh.fileno())

    def observe(self, kinds: Sequence[str], source: str, reason: str) -> list[Transition]:
        """The transitions an event of these kinds from ``source`` causes."""
        now = self.clock()
        out: list[Transition] = []
        with self._state() as state:
            for cond in self.conditions:
                if not cond.applies(source):
                    continue
                key = f"{cond.name}|{source}"
                entry = state.get(key)
                if any(k in cond.clear_on for k in kinds):
                    if entry is not None:
                        del state[key]
                        out.append(Transition(cond, source, "cleared", _at(entry), entry["reason"]))
                elif raising := [k for k in kinds if k in cond.raise_on]:
                    if entry is None:
                        state[key] = {
                            "since": now.isoformat(),
                            "reason": reason,
                            "escalated": 0,
                            "kinds": raising,
                        }
                        out.append(Transition(cond, source, "opened", now, reason))
                    elif set(raising) <= set(entry.get("kinds", ())):
                        out.append(Transition(cond, source, "repeated", _at(entry), reason))
                    else:  # another kind of the same condition (the DB after the CMS)
                        entry["kinds"] = sorted({*entry.get("kinds", ()), *raising})
                        out.append(Transition(cond, source, "joined", _at(entry), reason))
            out.extend(self._due(state, now, only=source))
        return out

    def tick(self) -> list[Transition]:
        """Escalate every open condition that has lasted its duration."""
        with self._state() as state:
            return self._due(state, self.clock(), only=None)

    def _due(
        self, state: dict[str, dict[str, Any]], now: datetime, only: str | None
    ) -> list[Transition]:
        out: list[Transition] = []
        for key, entry in sorted(state.items()):
            name, _, source = key.partition("|")
            cond = next((c for c in self.conditions if c.name == name and c.applies(source)), None)
            if cond is None or entry.get("escalated") or (only is not None and source != only):
                continue
            since = _at(entry)
            if now - since >= cond.duration(source):
                entry["escalated"] = 1
                out.append(Transition(cond, source, "escalated", since, entry["reason"]))
        return out


def _at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["since"])
