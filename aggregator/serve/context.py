"""What every republishing module gets: the store, the settings, and safe read access.

The web layer runs handlers in several threads. The graph store (pyoxigraph) is safe to query
from any thread; SQLite connections are not shared between threads, so :meth:`read_db` gives
each thread its own read-only connection (WAL mode lets readers run beside the writer).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field

from aggregator.config import Settings
from aggregator.store.records import RecordStore


@dataclass
class ServeContext:
    store: RecordStore
    settings: Settings
    _local: threading.local = field(default_factory=threading.local, repr=False)

    @property
    def base_url(self) -> str:
        """The public base URL (ends with '/')."""
        url = self.settings.serve.public_base_url or self.settings.base_iri
        return url if url.endswith("/") else url + "/"

    def read_db(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            path = self.store.path / "state.sqlite3"
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 10000")
            self._local.conn = conn
        return conn
