"""Harvest while serving: ``aggregator serve`` and ``aggregator harvest`` (and the read-only
commands) run at the same time on one data directory, as real processes over real HTTP.

The source is the fixture OAI-PMH peer, changed between harvests (records added, changed,
deleted). While each harvest runs, a client asks ``/sparql`` and ``/oai`` over and over: every
answer must be whole (no active catalogue record without its dataset) and every answer of
one generation (the ``Aggregator-Generation`` header) must show the same number of datasets,
whichever endpoint gave it. A gate in front of the peer holds the harvest in the middle of
its listing, so the read-only commands and a second harvest are known to run beside it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from aggregator.cli.context import job_line
from aggregator.config.sources_file import add_source
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.store.journal import JobRow

pytestmark = pytest.mark.slow

T0 = datetime(2024, 3, 1, tzinfo=UTC)
# The pipeline writes once 5 chunks of 100 records are listed: enough records that batches are
# committed (and published) while the listing goes on. The peer lists by datestamp, so the
# changes of the second harvest are spread over the listing (30 minutes newer each).
FIRST = 700  # records of the first harvest
CHANGED = range(0, FIRST, 10)  # a new revision in the second
DELETED = range(5, FIRST, 50)  # deleted headers in the second
ADDED = range(FIRST, FIRST + 40)  # new in the second
PAGE = 100
DCAT = "http://www.w3.org/ns/dcat#"
STATE = """
PREFIX dcat: <http://www.w3.org/ns/dcat#>
PREFIX foaf: <http://xmlns.com/foaf/0.1/>
PREFIX agg: <https://w3id.org/ld-aggregator/ns#>
SELECT ?datasets ?half ?newer WHERE {
  { SELECT (COUNT(DISTINCT ?d) AS ?datasets) WHERE { ?d a dcat:Dataset } }
  { SELECT (COUNT(?r) AS ?half) WHERE { GRAPH ?g {
      ?r agg:status agg:Active ; foaf:primaryTopic ?t FILTER NOT EXISTS { ?t a dcat:Dataset } } } }
  { SELECT (COUNT(?n) AS ?newer) WHERE {
      ?n agg:status agg:Active ; agg:sourceDatestamp ?s FILTER (MINUTES(?s) = 30) } }
}
"""
CONFIG = """
[store]
path = "data"
base_iri = "http://127.0.0.1:{port}/"

[http]
allow_private = true
timeout = 300

[harvest]
workers = 0
batch_size = 10

[serve]
processes = 2
oai_page_size = 1000
"""


def stamp(i: int, revision: int = 0) -> datetime:
    return T0 + timedelta(hours=i, minutes=30 * revision)


def item(i: int, revision: int = 0) -> OaiItem:
    dataset = generate_dataset(i, revision=revision)
    return OaiItem(generate_identifier(i), stamp(i, revision), (), False, dataset)


class Gate:
    """A WSGI wrapper in front of the peer that holds the listing from its ``hold_from``-th
    page on, until ``release`` is set."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.hold_from: int | None = None
        self.pages = 0
        self.holding = threading.Event()
        self.release = threading.Event()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        query = environ.get("QUERY_STRING", "")
        if "ListRecords" in query or "resumptionToken" in query:
            self.pages += 1
            if self.hold_from is not None and self.pages >= self.hold_from:
                self.holding.set()
                self.release.wait(300)
        return self.app(environ, start_response)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Site:
    """A data directory, the peer, and the CLI run as separate processes on it."""

    def __init__(self, tmp: Path) -> None:
        self.items = MemoryItems(item(i) for i in range(FIRST))
        self.peer = OaiPmhPeer(self.items, page_size=PAGE)
        self.gate = Gate(self.peer)
        self.server = PeerServer(self.gate)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/"
        self.config = tmp / "aggregator.toml"
        self.config.write_text(CONFIG.format(port=self.port), encoding="utf-8")
        add_source(self.config, "portal", {"type": "oai-pmh", "url": f"{self.server.url}oai"})
        self.serve: subprocess.Popen[str] | None = None

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "aggregator.cli", "-c", str(self.config), *args]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.cli(*args), capture_output=True, text=True, timeout=300, check=False
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.cli(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def start_serving(self) -> None:
        log = open(self.config.parent / "serve.log", "w")  # noqa: SIM115 - the process's own
        self.serve = subprocess.Popen(
            self.cli("serve", "--port", str(self.port), "--processes", "2", "--no-scheduler"),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        log.close()
        deadline = time.monotonic() + 120
        while True:
            assert self.serve.poll() is None, (self.config.parent / "serve.log").read_text()
            try:
                if requests.get(self.base + "oai?verb=Identify", timeout=5).ok:
                    return
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "serve did not answer"
            time.sleep(0.1)

    def close(self) -> None:
        if self.serve is not None and self.serve.poll() is None:
            self.serve.send_signal(signal.SIGINT)
            try:
                self.serve.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.serve.kill()
                self.serve.communicate()
        self.gate.release.set()
        self.server.stop()

    # -- what the endpoints answer ---------------------------------------------------------
    def sparql(self, session: requests.Session) -> tuple[int, dict[str, int]]:
        r = session.get(
            self.base + "sparql",
            params={"query": STATE},
            headers={"Accept": "application/sparql-results+json"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        row = r.json()["results"]["bindings"][0]
        return int(r.headers["aggregator-generation"]), {k: int(v["value"]) for k, v in row.items()}

    def oai(self, session: requests.Session) -> tuple[int, dict[str, int]]:
        r = session.get(
            self.base + "oai",
            params={"verb": "ListIdentifiers", "metadataPrefix": "dcat_ap"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert "resumptionToken>" not in r.text or "<resumptionToken/>" in r.text  # one page
        headers = r.text.count("<header")
        deleted = r.text.count('<header status="deleted"')
        return int(r.headers["aggregator-generation"]), {
            "datasets": headers - deleted,
            "deleted": deleted,
        }


class Watcher:
    """Asks both endpoints in a loop from a thread; keeps every answer with its generation."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.sparql: list[tuple[int, dict[str, int]]] = []
        self.oai: list[tuple[int, dict[str, int]]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        session = requests.Session()
        while not self._stop.is_set():
            try:
                self.sparql.append(self.site.sparql(session))
                self.oai.append(self.site.oai(session))
            except BaseException as err:
                self.errors.append(err)
                return

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def check(self) -> dict[int, int]:
        """Every answer whole and consistent; returns generation -> datasets."""
        assert not self.errors, self.errors
        by_generation: dict[int, set[int]] = defaultdict(set)
        for generation, state in self.sparql:
            assert state["half"] == 0, state  # no active record without its dataset
            by_generation[generation].add(state["datasets"])
        for generation, state in self.oai:
            by_generation[generation].add(state["datasets"])
        mixed = {g: n for g, n in by_generation.items() if len(n) > 1}
        assert not mixed, f"answers of one generation disagree: {mixed}"
        for answers in (self.sparql, self.oai):  # a client never goes back in time
            generations = [g for g, _ in answers]
            assert generations == sorted(generations)
        return {g: n.pop() for g, n in by_generation.items()}


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    s = Site(tmp_path)
    yield s
    s.close()


def settled(site: Site, datasets: int | None, newer: int | None, seconds: float = 5.0) -> int:
    """Wait (bounded) until both endpoints show the same final generation and state."""
    session = requests.Session()
    deadline = time.monotonic() + seconds
    while True:
        (g_sparql, sparql), (g_oai, oai) = site.sparql(session), site.oai(session)
        if g_sparql == g_oai and sparql["datasets"] == oai["datasets"]:
            assert sparql["datasets"] == datasets or datasets is None, (sparql, datasets)
            assert sparql["newer"] == newer or newer is None, (sparql, newer)
            assert sparql["half"] == 0
            return g_sparql
        assert time.monotonic() < deadline, (g_sparql, sparql, g_oai, oai)
        time.sleep(0.1)


def test_harvest_while_serving_every_answer_is_consistent(site: Site) -> None:
    site.start_serving()  # on a directory with no store yet: it makes one, empty
    assert site.sparql(requests.Session()) == (0, {"datasets": 0, "half": 0, "newer": 0})

    # the first harvest, while serving
    with Watcher(site) as first:
        done = site.run("harvest", "portal")
    assert done.returncode == 0, done.stderr
    seen = first.check()
    end_first = settled(site, FIRST, 0)
    assert end_first == FIRST // 10  # a generation per committed batch of 10
    assert len(seen) > 2, seen  # answers of the state in the middle of the harvest too

    change_the_source(site)
    with Watcher(site) as second:
        hold_last_page(site)
        harvest = site.start("harvest", "portal", "--full")
        assert site.gate.holding.wait(300), "the harvest did not reach its last page"
        try:
            # batches of this harvest are committed and published while it lists
            deadline = time.monotonic() + 60
            while site.sparql(requests.Session())[0] == end_first:
                assert time.monotonic() < deadline, "nothing published during the listing"
                time.sleep(0.05)
            commands = {
                "jobs": site.start("jobs"),
                "job show": site.start("job", "show", "2"),
                "rejected list": site.start("rejected", "list"),
                "records": site.start("records", "--limit", "5"),
                "quality": site.start("quality"),
                "second harvest": site.start("harvest", "portal"),
            }
            outputs = {name: (p.wait(300), *p.communicate()) for name, p in commands.items()}
            assert harvest.poll() is None  # it was running all along: the gate held it
        finally:
            site.gate.release.set()
        _, err = harvest.communicate(timeout=300)
        assert harvest.returncode == 0, err
    for name, (code, _, stderr) in outputs.items():
        if name != "second harvest":
            assert code == 0, (name, stderr)
            assert "Traceback" not in stderr and "lock" not in stderr.lower(), (name, stderr)
    assert re.search(r"job 2 portal: running", outputs["jobs"][1])
    assert "job 2 portal: running" in outputs["job show"][1]
    assert outputs["records"][1].count("portal\t") == 5
    assert "whole catalogue" in outputs["quality"][1]
    assert "measurements not stored" in outputs["quality"][2]
    assert f"is being written by process {harvest.pid}" in outputs["quality"][2]
    code, _, stderr = outputs["second harvest"]
    assert code == 1 and f"is being written by process {harvest.pid}" in stderr, stderr
    assert "harvest portal --full" in stderr  # it names the command holding the store
    assert "LOCK" not in stderr and "Traceback" not in stderr

    seen = second.check()
    assert len(seen) > 2, seen
    final = FIRST - len(DELETED) + len(ADDED)
    end_second = settled(site, final, len(CHANGED))
    assert end_second > end_first
    oai = site.oai(requests.Session())[1]
    assert oai["deleted"] == len(DELETED)  # withdrawn records stay as deleted headers

    # the jobs as the next writer finds them; quality keeps its measurements now
    jobs = site.run("jobs")
    assert jobs.returncode == 0 and "running" not in jobs.stdout, jobs.stdout
    quality = site.run("quality")
    assert quality.returncode == 0 and "not stored" not in quality.stderr, quality.stderr
    # a generation of its own, published for the readers at once
    g_after, state = site.sparql(requests.Session())
    assert g_after == end_second + 1 and state["datasets"] == final
    measured = requests.get(
        site.base + "sparql",
        params={"query": "ASK { ?m a <http://www.w3.org/ns/dqv#QualityMeasurement> }"},
        headers={"Accept": "application/sparql-results+json"},
        timeout=30,
    )
    assert measured.json()["boolean"] is True


def change_the_source(site: Site) -> None:
    """Records changed, deleted and added, spread over the listing."""
    site.items.put(*(item(i, revision=1) for i in CHANGED))
    for i in DELETED:
        site.items.delete(generate_identifier(i), stamp(i, revision=1))
    site.items.put(*(item(i) for i in ADDED))


def hold_last_page(site: Site) -> None:
    site.gate.pages, site.gate.release = 0, threading.Event()
    site.gate.hold_from = -(-(FIRST + len(ADDED)) // PAGE)


def test_a_harvest_killed_while_serving_is_caught_up_by_serve(site: Site) -> None:
    site.start_serving()
    assert site.run("harvest", "portal").returncode == 0
    end_first = settled(site, FIRST, 0)
    change_the_source(site)
    hold_last_page(site)
    harvest = site.start("harvest", "portal", "--full")
    try:
        assert site.gate.holding.wait(300), "the harvest did not reach its last page"
        deadline = time.monotonic() + 60
        while site.sparql(requests.Session())[0] == end_first:
            assert time.monotonic() < deadline, "nothing published during the listing"
            time.sleep(0.05)
        os.kill(harvest.pid, signal.SIGKILL)
        harvest.wait(30)
    finally:
        site.gate.release.set()
    # serve notices that nobody writes and the snapshot is behind: it replays and publishes
    with Watcher(site) as after_kill:
        killed_at = settled(site, None, None, seconds=30)
    after_kill.check()
    assert killed_at > end_first
    deadline = time.monotonic() + 30  # and marks the dead writer's job failed
    while "job 2 portal: failed" not in (jobs := site.run("jobs")).stdout:
        assert jobs.returncode == 0, jobs.stderr
        assert "its process is gone" in jobs.stdout, jobs.stdout  # until then
        assert time.monotonic() < deadline, jobs.stdout
    assert "died" in jobs.stdout
    done = site.run("harvest", "portal", "--full")
    assert done.returncode == 0, done.stderr
    assert settled(site, FIRST - len(DELETED) + len(ADDED), len(CHANGED)) > killed_at


def test_a_running_job_whose_process_is_gone_says_so_in_read_only_listings() -> None:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    job = JobRow(7, "portal", "t", None, "t", "running", False, {}, {"pid": finished.pid}, "")
    assert "its process is gone" in job_line(job)
    alive = JobRow(8, "portal", "t", None, "t", "running", False, {}, {"pid": os.getpid()}, "")
    assert "gone" not in job_line(alive)


def test_the_demo_harvests_then_serves_and_harvests_again_meanwhile(tmp_path: Path) -> None:
    port = free_port()
    demo_dir = str(tmp_path / "demo")
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aggregator.cli",
            "demo",
            "--port",
            str(port),
            "--dir",
            str(demo_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert demo.poll() is None, demo.communicate()
            try:
                if requests.get(base + "oai?verb=Identify", timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the demo did not serve"
            time.sleep(0.2)
        query = {
            "query": "SELECT (COUNT(?d) AS ?n) WHERE { ?d a <http://www.w3.org/ns/dcat#Dataset> }"
        }
        accept = {"Accept": "application/sparql-results+json"}
        before = requests.get(base + "sparql", params=query, headers=accept, timeout=30)
        assert int(before.json()["results"]["bindings"][0]["n"]["value"]) > 0
        config = tmp_path / "demo" / "aggregator.toml"
        # the demo META-SHARE node's credentials, from the environment as the demo prints them
        # and the demo's MDR service password, which the demo sets for itself
        env = {**os.environ, "DEMO_METASHARE_USER": "demo-sync"}
        env["DEMO_METASHARE_PASSWORD"] = "demo-sync-password"
        env["AGGREGATOR_DEMO_MDR_PASSWORD"] = "demo-only"
        again = subprocess.run(
            [sys.executable, "-m", "aggregator.cli", "-c", str(config), "harvest", "--all"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=env,
        )
        assert again.returncode in (0, 3), again.stderr  # the demo data has rejections
        # the demo serves with its scheduler: the jobs were handed to it, not refused
        assert "a scheduler runs for" in again.stderr, again.stderr
        after = requests.get(base + "sparql", params=query, headers=accept, timeout=30)
        assert int(after.headers["aggregator-generation"]) >= int(
            before.headers["aggregator-generation"]
        )
        jobs = subprocess.run(
            [sys.executable, "-m", "aggregator.cli", "-c", str(config), "jobs"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        # the demo's harvest and this one: two jobs of each demo source
        assert jobs.returncode == 0 and jobs.stdout.count(" demo-dump: ") == 2, jobs.stdout
        assert re.search(r"job \d+ demo-meta-share: succeeded  skipped=4", jobs.stdout), jobs.stdout
        # its scheduler takes "harvest now" (it answered "harvest requested" and ran nothing)
        now = subprocess.run(
            [
                sys.executable,
                "-m",
                "aggregator.cli",
                "-c",
                str(config),
                "schedule",
                "now",
                "demo-oai",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (now.returncode, now.stdout) == (0, "demo-oai: harvest requested\n"), now.stderr

        def oai_jobs() -> int:
            listed = subprocess.run(
                [sys.executable, "-m", "aggregator.cli", "-c", str(config), "jobs", "demo-oai"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            return len(re.findall(r"demo-oai: succeeded", listed))

        deadline = time.monotonic() + 120
        while oai_jobs() < 3:
            assert time.monotonic() < deadline, "the demo's scheduler did not run the request"
            time.sleep(0.5)
        status = subprocess.run(
            [sys.executable, "-m", "aggregator.cli", "-c", str(config), "schedule", "status"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        # the first harvest counted as each source's last run: none is due before tomorrow
        runs = re.findall(r"next run (\d{4}-\d\d-\d\d \d\d:\d\d) UTC", status)
        assert len(runs) == 8, status
        soon = datetime.now(UTC) + timedelta(hours=12)
        for when in runs:
            assert datetime.strptime(when, "%Y-%m-%d %H:%M").replace(tzinfo=UTC) > soon, status
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.communicate()
    assert demo.returncode == 0 or demo.returncode == -signal.SIGINT, demo.returncode
    assert os.path.exists(tmp_path / "demo" / "data" / "state.sqlite3")
