"""What every republishing module gets: the store, the settings, and safe read access.

``store`` is the ``RecordStore`` when the app runs in the process that writes the store, or
only its names (:class:`StoreNames`) in a serving process of ``aggregator serve``, which then
also gets the OAI token key and the folder where writers publish SPARQL snapshots.

The web layer runs handlers in several threads. SQLite connections are not shared between
threads, so :meth:`read_db` gives each thread its own read-only connection (WAL mode lets
readers run beside the writer).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

from aggregator.config import Settings
from aggregator.store.names import StoreNames


@dataclass
class ServeContext:
    store: StoreNames
    settings: Settings
    oai_key: bytes | None = None  # None: read (or made) from the store by the OAI module
    snapshot_root: Path | None = None  # the store's snapshot shelf (default: found from store)
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
