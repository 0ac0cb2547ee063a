"""The three peers of ``bench/million.py``, each in a process of its own like a remote server:
DCAT-AP over OAI-PMH, ISO 19139 (GEMINI) over CSW, CKAN. Every record is made when a page asks
for it, deterministically from its number (the peers' memory stays flat at a million records),
so nothing is held between requests.

Between harvests the benchmark raises the shared ``epoch`` to 1: from then on, every record
whose number is a multiple of ``step`` is served at revision 1 (new content, a later date
that keeps the order by date the peers' paging relies on), the others as before.
"""

from __future__ import annotations

import multiprocessing as mp
from datetime import UTC, datetime, timedelta
from typing import Any

KINDS = ("oai", "csw", "ckan")
START = datetime(2024, 1, 1, tzinfo=UTC)


def changed_count(count: int, step: int) -> int:
    """How many of ``count`` records a change of every ``step``-th one changes."""
    return len(range(0, count, step)) if step > 0 else 0


def _oai_app(count: int, revision: Any) -> Any:
    from aggregator.demo.peers.oaipmh import OaiPmhPeer
    from aggregator.demo.peers.oaipmh_items import OaiItem, SequenceItems
    from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier

    sets = ("even", "odd")

    def make(i: int) -> OaiItem:
        rev = revision(i)
        stamp = START + timedelta(seconds=2 * i + rev)  # a change stays before record i + 1
        meta = generate_dataset(i, revision=rev)
        return OaiItem(generate_identifier(i), stamp, (sets[i % 2],), False, meta)

    return OaiPmhPeer(SequenceItems(count, make, sets=sets), page_size=100)


def _csw_app(count: int, revision: Any) -> Any:
    from aggregator.demo.peers.csw import CswFaults, CswPeer, GeneratedCatalogue

    return CswPeer(GeneratedCatalogue(count, revisions=revision), CswFaults(max_record_default=100))


def _ckan_app(count: int, revision: Any) -> Any:
    from aggregator.demo.peers.ckan import CkanPeer, GeneratedCatalogue
    from aggregator.demo.peers.ckan_data import T0, generate_package, stamp

    def make(i: int) -> dict[str, Any]:
        rev = revision(i)
        package = generate_package(i, rev)
        if rev:  # a later date that keeps metadata_modified growing with the number
            package["metadata_modified"] = stamp(T0 + timedelta(minutes=i, seconds=30))
        return package

    return CkanPeer(GeneratedCatalogue(count, make))


def serve(kind: str, count: int, step: int, epoch: Any, port_q: Any, stop: Any) -> None:
    """The peer process: serve ``count`` records of ``kind`` until ``stop`` is set."""
    from aggregator.demo.peers.server import PeerServer

    def revision(i: int) -> int:
        return 1 if epoch.value and step > 0 and i % step == 0 else 0

    app = {"oai": _oai_app, "csw": _csw_app, "ckan": _ckan_app}[kind](count, revision)
    with PeerServer(app) as server:
        port_q.put((kind, server.port))
        stop.wait()


class Peers:
    """The peer processes of the kinds with records; ``url(kind)`` where each listens."""

    def __init__(self, counts: dict[str, int], step: int) -> None:
        ctx = mp.get_context("spawn")
        self.epoch = ctx.RawValue("i", 0)
        self.stop = ctx.Event()
        port_q = ctx.Queue()
        self.procs = [
            ctx.Process(target=serve, args=(k, n, step, self.epoch, port_q, self.stop), daemon=True)
            for k, n in counts.items()
            if n
        ]
        for p in self.procs:
            p.start()
        self.ports = dict(port_q.get(timeout=300) for _ in self.procs)

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
