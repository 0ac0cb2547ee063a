"""The three peers of ``bench/million.py``, each in a process of its own like a remote server:
DCAT-AP over OAI-PMH, ISO 19139 (GEMINI) over CSW, CKAN. Record ``i`` is made deterministically
from its number, so no peer holds its records in memory (flat at a million):

- by default each peer makes its records before the clock starts, into a file of its own on
  disk (:class:`Shelf`, SQLite, reused by a later run with the same numbers), and serves them
  from there, as a real catalogue serves what it has stored;
- with ``shelf=None`` (``--peer-generates``) it makes each record when a page asks for it
  (the CPU of making it, 50-300 us, then shares the cores with the harvest).

Between harvests the benchmark raises the shared ``epoch`` to 1: from then on every record
whose number is a multiple of ``step`` is served at revision 1 (new content, a later date
that keeps the order by date the peers' paging relies on), the others as before.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

KINDS = ("oai", "csw", "ckan")
START = datetime(2024, 1, 1, tzinfo=UTC)


def changed_count(count: int, step: int) -> int:
    """How many of ``count`` records a change of every ``step``-th one changes."""
    return len(range(0, count, step)) if step > 0 else 0


def maker(kind: str) -> Callable[[int, int], Any]:
    """``make(i, revision)``: record ``i`` as the peer of ``kind`` serves it (an ``OaiItem``,
    a ``CswItem``, a CKAN package dict)."""
    if kind == "oai":
        from aggregator.demo.peers.oaipmh_items import OaiItem
        from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier

        def oai(i: int, rev: int) -> Any:
            stamp = START + timedelta(seconds=2 * i + rev)  # a change stays before record i + 1
            meta = generate_dataset(i, revision=rev)
            return OaiItem(generate_identifier(i), stamp, (("even", "odd")[i % 2],), False, meta)

        return oai
    if kind == "csw":
        from aggregator.demo.peers.csw import item_of
        from aggregator.demo.peers.gemini_samples import generate_gemini_record

        return lambda i, rev: item_of(f"gen-{i}", generate_gemini_record(i, rev))
    from aggregator.demo.peers.ckan_data import T0, generate_package, stamp

    def ckan(i: int, rev: int) -> Any:
        package = generate_package(i, rev)
        if rev:  # a later date that keeps metadata_modified growing with the number
            package["metadata_modified"] = stamp(T0 + timedelta(minutes=i, seconds=30))
        return package

    return ckan


class Shelf:
    """Records made once, kept in an SQLite file (pickled), read back by number and
    revision: one connection per serving thread, nothing cached in memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()

    def fill(self, count: int, step: int, make: Callable[[int, int], Any]) -> None:
        """Make records ``0..count-1`` at revision 0, and every ``step``-th at revision 1 too
        (a file already made for the same numbers is kept)."""
        want = f"{count}/{step}"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (made TEXT)")
            if conn.execute("SELECT made FROM meta").fetchone() == (want,):
                return
            conn.executescript(
                "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; DELETE FROM meta;"
                " DROP TABLE IF EXISTS items;"
                " CREATE TABLE items (i INTEGER, rev INTEGER, data BLOB, PRIMARY KEY (i, rev))"
                " WITHOUT ROWID;"
            )
            for lo in range(0, count, 5000):
                conn.execute("BEGIN")
                for i in range(lo, min(count, lo + 5000)):
                    revs = (0, 1) if step > 0 and i % step == 0 else (0,)
                    conn.executemany(
                        "INSERT INTO items VALUES (?, ?, ?)",
                        [(i, r, pickle.dumps(make(i, r), protocol=5)) for r in revs],
                    )
                conn.execute("COMMIT")
            conn.execute("INSERT INTO meta VALUES (?)", (want,))
        finally:
            conn.close()

    def get(self, i: int, rev: int) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        row = conn.execute("SELECT data FROM items WHERE i = ? AND rev = ?", (i, rev)).fetchone()
        return pickle.loads(row[0])


def _app(kind: str, count: int, item: Callable[[int], Any]) -> Any:
    if kind == "oai":
        from aggregator.demo.peers.oaipmh import OaiPmhPeer
        from aggregator.demo.peers.oaipmh_items import SequenceItems

        return OaiPmhPeer(SequenceItems(count, item, sets=("even", "odd")), page_size=100)
    if kind == "csw":
        from aggregator.demo.peers.csw import CswFaults, CswPeer, GeneratedCatalogue

        catalogue = GeneratedCatalogue(count, make=item)
        return CswPeer(catalogue, CswFaults(max_record_default=100))
    from aggregator.demo.peers.ckan import CkanPeer
    from aggregator.demo.peers.ckan import GeneratedCatalogue as CkanCatalogue

    return CkanPeer(CkanCatalogue(count, item))


def serve(
    kind: str, count: int, step: int, shelf: str | None, epoch: Any, port_q: Any, stop: Any
) -> None:
    """The peer process: serve ``count`` records of ``kind`` until ``stop`` is set."""
    from aggregator.demo.peers.server import PeerServer

    make = maker(kind)
    if shelf is not None:
        stored = Shelf(Path(shelf))
        stored.fill(count, step, make)
        make = stored.get

    def item(i: int) -> Any:
        return make(i, 1 if epoch.value and step > 0 and i % step == 0 else 0)

    with PeerServer(_app(kind, count, item)) as server:
        port_q.put((kind, server.port))
        stop.wait()


class Peers:
    """The peer processes of the kinds with records; ``url(kind)`` where each listens.
    ``shelves``: the folder of their files of records made before the clock (None: made
    while serving)."""

    def __init__(self, counts: dict[str, int], step: int, shelves: Path | None) -> None:
        ctx = mp.get_context("spawn")
        self.epoch = ctx.RawValue("i", 0)
        self.stop = ctx.Event()
        port_q = ctx.Queue()
        self.procs = []
        for kind, n in counts.items():
            if n:
                shelf = str(shelves / f"{kind}.sqlite3") if shelves else None
                args = (kind, n, step, shelf, self.epoch, port_q, self.stop)
                self.procs.append(ctx.Process(target=serve, args=args, daemon=True))
        for p in self.procs:
            p.start()
        self.ports: dict[str, int] = {}
        while len(self.ports) < len(self.procs):  # making a million records takes minutes
            try:
                kind, port = port_q.get(timeout=1)
                self.ports[kind] = port
            except queue.Empty:
                dead = [p.exitcode for p in self.procs if p.exitcode is not None]
                if dead:
                    self.close()
                    raise RuntimeError(f"a peer process ended (exit code {dead[0]})") from None

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self.procs if p.pid is not None}

    def url(self, kind: str) -> str:
        path = {"oai": "oai", "csw": "csw", "ckan": ""}[kind]
        return f"http://127.0.0.1:{self.ports[kind]}/{path}"

    def change(self) -> None:
        """From now on, serve every ``step``-th record at revision 1."""
        self.epoch.value = 1

    def close(self) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
