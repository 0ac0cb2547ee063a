"""Datestamps that readers can trust: records are stamped inside the commit that shows them.

A downstream harvester polls ``ListIdentifiers from=T`` with T the ``responseDate`` of its
previous request, as the OAI-PMH guidelines tell it to. That is safe only if no record can
become visible later with a datestamp earlier than T. So a record's ``modified`` (its
datestamp, the catalogue's ``modified_since`` key, the search index's watermark) is not the
moment the record was decided but the moment its batch commits, and readers wait for a commit
in flight before they read:

- the writer takes an exclusive ``flock`` on ``<store>/commit.lock``, then draws the stamp,
  writes the batch with it and commits, then lets the lock go (:class:`CommitStamper`);
- a reader notes its time first (the ``responseDate``, the ``Date`` header), then takes and
  drops a shared lock on that file (:func:`wait_for_commits`), then opens its read
  transaction.

Either the writer's lock came first, and the reader's transaction sees the commit, or the
reader's came first, and the stamp was drawn after the reader's time: a record the reader
does not see has a datestamp after the reader's time, so the next ``from`` finds it. A reader
waits at most for one batch's commit, and only when it arrives during one.

Stamps strictly increase from commit to commit (a clock set back does not make them go
back), so ordering by ``(modified, id)`` is commit order and a watermark on it never passes a
record that is not visible yet.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

BARRIER_FILE = "commit.lock"
_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # as every stored time (jobs.journal.now_iso)


class CommitStamper:
    """The writer's side: draws one stamp per commit under the exclusive lock."""

    def __init__(self, store_path: Path, last_stamp: str | None = None) -> None:
        self._fd = os.open(store_path / BARRIER_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        self._last = last_stamp or ""

    @contextmanager
    def stamping(self) -> Iterator[str]:
        """Hold the barrier while the caller writes rows with the stamp and commits them."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield self._next()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _next(self) -> str:
        now = datetime.now(UTC)
        stamp = now.strftime(_FORMAT)
        if stamp <= self._last:  # same microsecond, or the clock went back
            last = datetime.strptime(self._last, _FORMAT).replace(tzinfo=UTC)
            stamp = (last + timedelta(microseconds=1)).strftime(_FORMAT)
        self._last = stamp
        return stamp

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def wait_for_commits(store_path: Path) -> None:
    """A reader's side: return once no commit that drew its stamp before this call is still
    in flight. Call it after taking the time the answer reports, before the read transaction.
    """
    try:
        fd = os.open(store_path / BARRIER_FILE, os.O_RDONLY)
    except FileNotFoundError:  # no writer has committed here with stamps at commit
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
