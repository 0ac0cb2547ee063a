"""The scheduler's per-second tick with many sources (docs/benchmarks.md, "Scheduler").

    python bench/schedule_tick.py --sources 1000 --ticks 50

Every source is due but the window is closed (the costliest steady state: each tick must
decide, for each source, that it may not start yet); a third use a cron expression, all have
a blackout. Prints the mean tick in milliseconds as JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from aggregator.config import Settings, SourceConfig
from aggregator.schedule.book import Book
from aggregator.schedule.scheduler import JobResult, Scheduler


class Clock:
    def now(self) -> datetime:
        return datetime(2026, 11, 23, 12, tzinfo=UTC)  # outside the 22:00-06:00 window


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sources", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=50)
    args = parser.parse_args()
    sources = {
        f"s{i}": SourceConfig(
            name=f"s{i}",
            type="oai-pmh",
            url="http://127.0.0.1:9/oai",
            schedule="30 2 * * *" if i % 3 == 0 else "daily",
            blackout=("Sat 00:00-06:00",),
        )
        for i in range(args.sources)
    }
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(None, Path(tmp) / "store", "http://x.example/", sources=sources)
        book = Book(settings.store_path)
        sched = Scheduler(settings, book, lambda *a: JobResult("succeeded"), clock=Clock())
        t0 = time.perf_counter()
        sched.tick()  # the first sees every source: one book row each
        first = time.perf_counter() - t0
        sched.wait(60)
        t0 = time.perf_counter()
        for _ in range(args.ticks):
            sched.tick()
        mean = (time.perf_counter() - t0) / args.ticks
        book.close()
    print(
        json.dumps(
            {
                "sources": args.sources,
                "first tick ms": round(first * 1000, 1),
                "tick ms": round(mean * 1000, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
