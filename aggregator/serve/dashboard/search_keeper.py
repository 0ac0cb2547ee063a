"""The search keeper: a thread of the ``serve`` supervisor that keeps the full-text index
(``search.py``) caught up with the state database, so that no visitor pays for it.

The index is brought up to date from the records changed since its watermark. A search
used to do all of it before answering, so the first visit of ``/datasets`` after a large
harvest waited for every changed record to be indexed: minutes after a million. Now a
search spends at most ``REQUEST_BUDGET`` on it and answers from what is indexed (the page
says how many changed records are not searchable yet), and the keeper does the rest: every
``interval`` seconds it looks for changed records and indexes them, one ``STEP`` at a time
so that it stops promptly. It runs in the supervisor, which otherwise only watches its
serving processes; the keeper and the searches of the serving processes take turns batch
by batch (``BEGIN IMMEDIATE`` on the index), so none of them indexes a record twice.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

from aggregator.serve.dashboard.search import SearchIndex

log = logging.getLogger(__name__)

STEP = 1.0  # seconds of indexing between two looks at the stop flag


class SearchKeeper:
    """Keeps the search index of the store in ``store_path`` caught up, in a thread."""

    def __init__(self, store_path: Path, interval: float = 2.0) -> None:
        self.store_path = store_path
        self.interval = interval
        self.indexed = 0  # records looked at since start (caught up or not)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="search-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        state = self.store_path / "state.sqlite3"
        index = SearchIndex(self.store_path, state)
        conn: sqlite3.Connection | None = None
        failing = False
        try:
            while not self._stop.is_set():
                behind = 0
                try:
                    if conn is None and state.exists():
                        conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
                        conn.execute("PRAGMA busy_timeout = 10000")
                    if conn is not None:
                        self.indexed += index.catch_up(conn, STEP)
                        behind = index.behind(conn, cap=1)
                    failing = False
                except (sqlite3.Error, OSError) as err:
                    if not failing:  # once per spell of failures, not every interval
                        log.warning("cannot keep the search index up to date: %s", err)
                    failing = True
                if not behind:
                    self._stop.wait(self.interval)
        finally:
            index.close()
            if conn is not None:
                conn.close()
