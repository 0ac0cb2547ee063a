"""A downstream harvester never misses a record: a real OAI-PMH harvester (sickle) polls
``ListIdentifiers from=<the responseDate of its previous listing>`` against a real
``aggregator serve`` while its scheduler harvests two sources in parallel, as the OAI-PMH
guidelines tell harvesters to do. The union of what it saw must be the final state: every
active record seen as active last, every withdrawn or deleted one seen as deleted last.
Beside it, a client of the Hydra catalogue walks ``/catalog?modified_since=<the time it
noted before its previous walk>`` and must meet every active dataset."""

from __future__ import annotations

import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from sickle import Sickle
from sickle.oaiexceptions import NoRecordsMatch

from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset
from aggregator.demo.peers.server import PeerServer

pytestmark = pytest.mark.slow

N = 1200  # records per source
OAI = "{http://www.openarchives.org/OAI/2.0/}"
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def item(source: str, i: int, revision: int = 0) -> OaiItem:
    return OaiItem(
        f"oai:{source}:dataset-{i:06d}",
        T0 + timedelta(minutes=i, seconds=revision),
        (),
        False,
        generate_dataset(i, revision=revision),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Poller:
    """The downstream harvester: incremental ListIdentifiers in a loop, each from the
    responseDate of the previous listing's first request; keeps each record's last state."""

    def __init__(self, url: str) -> None:
        self.sickle = Sickle(url, max_retries=3, timeout=60)
        self.last: dict[str, bool] = {}  # identifier -> deleted, as last seen
        self.since: str | None = None
        self.rounds = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def poll_once(self) -> None:
        params = {"metadataPrefix": "dcat_ap"}
        if self.since:
            params["from"] = self.since
        try:
            headers = self.sickle.ListIdentifiers(**params)
        except NoRecordsMatch:
            self.rounds += 1
            return  # nothing new: ask from the same date again
        response = headers.oai_response.xml
        date = response.find(f"{OAI}responseDate")
        assert date is not None and date.text
        for header in headers:
            self.last[header.identifier] = header.deleted
        self.since = date.text
        self.rounds += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except BaseException as err:
                self.errors.append(err)
                return
            time.sleep(0.05)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self.errors, self.errors


class CatalogPoller:
    """Walks the catalogue's pages (``hydra:next``) from ``modified_since`` = the time noted
    just before its previous walk; keeps every dataset IRI it met."""

    DATASET = re.compile(r"^<[^>]+> <http://www\.w3\.org/ns/dcat#dataset> <([^>]+)> \.$", re.M)
    NEXT = re.compile(r"<http://www\.w3\.org/ns/hydra/core#next> <([^>]+)>")

    def __init__(self, base: str) -> None:
        self.base = base
        self.seen: set[str] = set()
        self.since: str | None = None
        self.rounds = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._session = requests.Session()

    def walk_once(self) -> None:
        noted = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # before the walk begins
        url: str | None = self.base + "catalog.nt?limit=500"
        if self.since:
            url += f"&modified_since={self.since}"
        while url:
            r = self._session.get(url, timeout=60)
            assert r.status_code == 200, r.text[:500]
            self.seen.update(self.DATASET.findall(r.text))
            found = self.NEXT.search(r.text)
            url = found.group(1) if found else None
        self.since = noted
        self.rounds += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.walk_once()
            except BaseException as err:
                self.errors.append(err)
                return
            time.sleep(0.3)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self.errors, self.errors


class Site:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.items = {s: MemoryItems(item(s, i) for i in range(N)) for s in ("one", "two")}
        self.servers = {}
        for name, items in self.items.items():
            peer = OaiPmhPeer(items, page_size=100)
            peer.faults.delay = 0.02  # a remote source: the listing takes a while
            self.servers[name] = PeerServer(peer)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/"
        self.config = tmp / "aggregator.toml"
        blocks = "".join(
            f'[sources.{n}]\ntype = "oai-pmh"\nurl = "{s.url}oai"\nschedule = "manual"\n\n'
            for n, s in self.servers.items()
        )
        self.config.write_text(
            f"""[store]
path = "data"
base_iri = "{self.base}"

[http]
allow_private = true

[harvest]
workers = 0
batch_size = 300

[schedule]
window = ""
parallel = 2

[serve]
processes = 1
oai_page_size = 500

{blocks}""",
            encoding="utf-8",
        )
        self.serve: subprocess.Popen[str] | None = None

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "aggregator.cli", "-c", str(self.config), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def start_serving(self) -> None:
        log = open(self.tmp / "serve.log", "w")  # noqa: SIM115 - the process's own
        self.serve = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aggregator.cli",
                "-c",
                str(self.config),
                "serve",
                "--port",
                str(self.port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        log.close()
        deadline = time.monotonic() + 120
        while True:
            assert self.serve.poll() is None, (self.tmp / "serve.log").read_text()
            try:
                if requests.get(self.base + "oai?verb=Identify", timeout=5).ok:
                    return
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "serve did not answer"
            time.sleep(0.1)

    def finished_jobs(self) -> int:
        path = self.tmp / "data" / "state.sqlite3"
        if not path.exists():
            return 0
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            row = con.execute("SELECT count(*) FROM jobs WHERE status != 'running'").fetchone()
            return int(row[0])
        except sqlite3.Error:
            return 0
        finally:
            con.close()

    def harvest_both(self, *, full: bool, done_before: int) -> None:
        for name in ("one", "two"):
            r = self.cli("schedule", "now", name, *(["--full"] if full else []))
            assert r.returncode == 0, r.stdout + r.stderr
        deadline = time.monotonic() + 300
        while self.finished_jobs() < done_before + 2:
            assert time.monotonic() < deadline, (self.tmp / "serve.log").read_text()[-3000:]
            time.sleep(0.2)

    def final_states(self) -> dict[str, bool]:
        """identifier -> deleted: one complete listing once everything is committed, checked
        against the state database's counts."""
        listing = Sickle(self.base + "oai", timeout=60).ListIdentifiers(metadataPrefix="dcat_ap")
        states = {h.identifier: h.deleted for h in listing}
        con = sqlite3.connect(f"file:{self.tmp / 'data' / 'state.sqlite3'}?mode=ro", uri=True)
        try:
            rows = con.execute(
                "SELECT status = 'active', count(*) FROM records WHERE status != 'rejected'"
                " GROUP BY status = 'active'"
            ).fetchall()
        finally:
            con.close()
        counts = {bool(active): int(n) for active, n in rows}
        assert sum(not d for d in states.values()) == counts.get(True, 0)
        assert sum(states.values()) == counts.get(False, 0)
        return states

    def active_datasets(self) -> set[str]:
        con = sqlite3.connect(f"file:{self.tmp / 'data' / 'state.sqlite3'}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT dataset_iri FROM records WHERE status = 'active'")
            return {str(r[0]) for r in rows}
        finally:
            con.close()

    def close(self) -> None:
        if self.serve is not None and self.serve.poll() is None:
            self.serve.send_signal(signal.SIGINT)
            try:
                self.serve.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.serve.kill()
                self.serve.wait()
        for server in self.servers.values():
            server.stop()


def test_a_harvester_polling_by_responsedate_sees_every_record_and_deletion(
    tmp_path: Path,
) -> None:
    site = Site(tmp_path)
    try:
        site.start_serving()
        poller = Poller(site.base + "oai")
        poller.start()
        catalog = CatalogPoller(site.base)
        catalog.start()
        # two sources harvested at once by serve's scheduler
        site.harvest_both(full=True, done_before=0)
        rounds, walks = poller.rounds, catalog.rounds
        # two listings and walks that began after the jobs ended
        while poller.rounds < rounds + 2 or catalog.rounds < walks + 2:
            time.sleep(0.1)
        catalog.stop()
        missed_datasets = site.active_datasets() - catalog.seen
        assert not missed_datasets, f"{len(missed_datasets)} datasets never met in the catalogue"
        final = site.final_states()
        assert len(final) == 2 * N and not any(final.values())
        missed = sorted(set(final) - {i for i, d in poller.last.items() if not d})
        assert not missed, f"{len(missed)} records never seen, e.g. {missed[:3]}"

        # the next runs: 150 records gone from "one" (withdrawn after its complete listing),
        # 150 deleted headers and 150 new revisions at "two"
        for i in range(0, 300, 2):
            site.items["one"].remove(f"oai:one:dataset-{i:06d}")
            site.items["two"].delete(f"oai:two:dataset-{i:06d}")
            site.items["two"].put(item("two", i + 1, revision=1))
        site.harvest_both(full=True, done_before=2)
        rounds = poller.rounds
        while poller.rounds < rounds + 2:
            time.sleep(0.1)
        poller.stop()
        final = site.final_states()
        assert sum(final.values()) == 300
        wrong = sorted(i for i, deleted in final.items() if poller.last.get(i) != deleted)
        assert not wrong, f"{len(wrong)} records last seen in another state, e.g. {wrong[:3]}"
    finally:
        site.close()
