"""Jobs handed to the scheduler that runs for a store, and followed to their end.

When a scheduler runs for the store (``serve``, ``aggregator scheduler``), it is the store's
writer whenever it runs jobs; a second writer would be refused. ``aggregator harvest`` then
does not compete with it: it queues a "harvest now" request per source in the scheduler's
book (with its ``--full``, ``--force`` and ``--allow-mass-withdrawal``), and follows each to
the run that took it and that run to its end, reading the job's row from the state database
as any reader does. Interrupted, it withdraws what was not started yet and asks the
scheduler to cancel what was (the scheduler does within a second and does not run it again).

:class:`Followed` is one request as it goes: ``queued`` (waiting for a free slot, or for a
job of that source already running), ``running`` (``run_id`` set), ``ended`` (``run`` is
the scheduler's record: status, job id, message). A run that ends ``busy`` (another process
wrote the store: ``quality``, ``rejected revalidate``) is asked for again by
:meth:`HandOff.retry_busy`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from aggregator.schedule.book import Book, Run


@dataclass(eq=False)
class Followed:
    source: str
    request_id: int
    full: bool
    force: bool
    allow_mass_withdrawal: bool
    run_id: int | None = None
    run: Run | None = None  # set when the run ended
    ignored: bool = False  # taken without a run: the scheduler knows no such source
    withdrawn: bool = False  # withdrawn before it started (interrupted)
    since: float = field(default_factory=time.monotonic)  # when it was asked for

    @property
    def state(self) -> str:
        if self.run is not None:
            return "ended"
        if self.ignored or self.withdrawn:
            return "gone"
        return "queued" if self.run_id is None else "running"


class HandOff:
    """Requests queued in the scheduler's book of the store at ``store_path``."""

    def __init__(self, store_path: Path, by: str = "cli:harvest") -> None:
        self.book = Book(store_path)
        self.by = by

    def close(self) -> None:
        self.book.close()

    def submit(
        self, source: str, *, full: bool, force: bool = False, allow_mass_withdrawal: bool = False
    ) -> Followed:
        rid = self.book.request(
            source,
            full,
            self.by,
            datetime.now(UTC),
            force=force,
            allow_mass_withdrawal=allow_mass_withdrawal,
        )
        return Followed(source, rid, full, force, allow_mass_withdrawal)

    def poll(self, f: Followed) -> Followed:
        """Bring ``f`` up to date from the book; return it."""
        if f.state in ("ended", "gone"):
            return f
        if f.run_id is None:
            taken, run_id = self.book.request_taken(f.request_id)
            if not taken:
                return f
            if run_id is None:
                f.ignored = True
                return f
            f.run_id = run_id
        run = self.book.run(f.run_id)
        if run is not None and run.status != "running":
            f.run = run
        return f

    def running_since(self, source: str) -> datetime | None:
        """When the scheduler's run of ``source`` that runs now started (a request for it
        waits for its end), if one runs."""
        for run in self.book.running():
            if run.source == source:
                return run.started
        return None

    def retry_busy(self, f: Followed) -> Followed:
        """Ask again for a run that ended ``busy``: a fresh request, followed in its place."""
        return self.submit(
            f.source,
            full=f.full,
            force=f.force,
            allow_mass_withdrawal=f.allow_mass_withdrawal,
        )

    def cancel(self, f: Followed) -> None:
        """Withdraw ``f`` if no run took it yet, else ask the scheduler to cancel its run."""
        now = datetime.now(UTC)
        if f.run_id is None and self.book.withdraw_request(f.request_id, now):
            f.withdrawn = True
            return
        self.poll(f)
        if f.run_id is not None and f.run is None:
            self.book.request_cancel(f.run_id, now)
