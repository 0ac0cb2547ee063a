"""Run by tests/test_crash.py as a subprocess: harvest one source with the real pipeline and
the real record store, whose graph store is wrapped so that the process kills itself
(SIGKILL) at one exact point of the journal protocol.

    python tests/crash_child.py CONFIG SOURCE GRAPH_IRI NEWER_DATESTAMP MARKER

The graph write of the batch that holds ``GRAPH_IRI`` is held back until the state database
holds that record's next write (``source_datestamp = NEWER_DATESTAMP``, journalled by a later
batch of the same job); then it goes through, the applier clears the batch's pending marks,
and the next graph write kills the process before it touches the graph store. ``MARKER`` is
written just before the kill, so the test can tell the kill came from here.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from pyoxigraph import QueryBoolean, QuerySolutions, QueryTriples

from aggregator.config import load_settings
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.graphs import GraphBackend, GraphContent, OxigraphGraphs
from aggregator.store.records import RecordStore


class KillBetweenGraphWrites:
    """A :class:`GraphBackend` around the real one (see the module docstring)."""

    def __init__(
        self, inner: GraphBackend, db: Path, graph_iri: str, newer: str, marker: Path
    ) -> None:
        self.inner = inner
        self.db = db
        self.graph_iri = graph_iri
        self.newer = newer
        self.marker = marker
        self.armed = False

    def _wait_for_next_write(self) -> None:
        con = sqlite3.connect(f"file:{quote(str(self.db))}?mode=ro", uri=True, timeout=10)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                row = con.execute(
                    "SELECT source_datestamp FROM records WHERE record_iri = ?", (self.graph_iri,)
                ).fetchone()
                if row is not None and row[0] == self.newer:
                    return
                time.sleep(0.01)
        finally:
            con.close()
        self.marker.write_text("timeout: the next write of the record never came")
        os._exit(3)

    def replace(
        self, contents: Sequence[GraphContent], added: bytes = b"", removed: bytes = b""
    ) -> None:
        if self.armed:
            self.marker.write_text("killed before the graph write of the next batch")
            os.kill(os.getpid(), signal.SIGKILL)
        if any(c.graph_iri == self.graph_iri for c in contents):
            self._wait_for_next_write()
            self.armed = True
        self.inner.replace(contents, added, removed)

    def remove(self, graph_iris: Sequence[str]) -> None:
        self.inner.remove(graph_iris)

    def query(self, sparql: str) -> QuerySolutions | QueryTriples | QueryBoolean:
        return self.inner.query(sparql)

    def graph_names(self) -> set[str]:
        return self.inner.graph_names()

    def close(self) -> None:
        self.inner.close()


def main(config: str, source: str, graph_iri: str, newer: str, marker: str) -> None:
    settings = load_settings(Path(config))
    path = settings.store_path
    path.mkdir(parents=True, exist_ok=True)
    graphs = KillBetweenGraphWrites(
        OxigraphGraphs(path / "graphs"), path / "state.sqlite3", graph_iri, newer, Path(marker)
    )
    # batch by batch (no gathering of batches into one load): the kill point is between two
    with RecordStore(path, settings.base_iri, graphs=graphs, gather_records=1) as store:
        run_source(settings, store, source, RunOptions(full=True), http=HttpClient(settings.http))
    Path(marker).write_text("the harvest ended without reaching the kill point")
    sys.exit(4)


if __name__ == "__main__":
    main(*sys.argv[1:6])
