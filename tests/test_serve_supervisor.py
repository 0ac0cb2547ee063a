"""``aggregator serve`` as it runs: a supervisor and real serving processes on a shared socket,
over a store filled by the real pipeline. Runaway SPARQL queries are stopped by ending the
process that runs them; the others (a standby among them) keep answering and the supervisor
replaces it."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from test_serve_sparql import COUNT_DATASETS, EXPLOSIVE, N_RECORDS, Harvested, item, quad_count

from aggregator.config import ServeSettings
from aggregator.serve.dashboard.search import SearchIndex
from aggregator.serve.supervisor import EXIT_OVERRUN, EXIT_RETIRED, Supervisor

pytestmark = pytest.mark.slow


def supervised(h: Harvested, processes: int = 2, **serve: Any) -> Supervisor:
    settings = replace(h.settings, serve=replace(ServeSettings(), **serve))
    sup = Supervisor(h.store, settings, "127.0.0.1", 0, processes=processes)
    sup.start()
    return sup


def count(sup: Supervisor, session: requests.Session | None = None) -> str:
    r = (session or requests).get(
        sup.url + "sparql",
        params={"query": COUNT_DATASETS},
        headers={"Accept": "application/json"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return str(r.json()["results"]["bindings"][0]["n"]["value"])


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def wait_for(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture(scope="module")
def harvested(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harvested]:
    h = Harvested(tmp_path_factory.mktemp("supervised"), N_RECORDS)
    yield h
    h.close()


def test_serves_every_route_from_several_processes(harvested: Harvested) -> None:
    sup = supervised(harvested, processes=2)
    try:
        assert len(set(sup.pids)) == 2
        assert count(sup) == str(N_RECORDS)
        oai = requests.get(sup.url + "oai", params={"verb": "Identify"}, timeout=30)
        assert oai.status_code == 200 and b"<Identify>" in oai.content
        assert requests.get(sup.url + "catalog.ttl", timeout=30).status_code == 200
        if os.uname().machine in ("x86_64", "aarch64") and os.uname().sysname == "Linux":
            assert sup.sandboxed  # serving processes cannot open IP sockets
    finally:
        sup.stop()
    # the shelf is the store's (writers publish on it); only the current snapshot is left
    assert [p.name for p in sup.shelf.root.glob("gen-*") if p.is_dir()] == [sup.shelf.current]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", sup.port), timeout=2)


def test_runaway_inline_query_ends_its_process_and_the_server_goes_on(
    harvested: Harvested,
) -> None:
    sup = supervised(harvested, processes=1, sparql_timeout=1.0)
    try:
        (pid,) = sup.pids
        session = requests.Session()  # a keep-alive connection to the same process
        assert count(sup, session) == str(N_RECORDS)
        results: dict[str, requests.Response] = {}

        def runaway() -> None:
            results["runaway"] = requests.get(
                sup.url + "sparql",
                params={"query": EXPLOSIVE},
                # as a reverse proxy on the same host sends it: the deadline's 503 must still
                # reach this connection (the watchdog finds it by the socket's peer address)
                headers={"X-Forwarded-For": "203.0.113.9"},
                timeout=60,
            )

        t = threading.Thread(target=runaway)
        started = time.monotonic()
        t.start()
        time.sleep(0.3)  # the runaway now blocks the process; this request waits behind it
        pending = session.get(sup.url + "sparql", params={"query": COUNT_DATASETS}, timeout=60)
        fresh = count(sup)  # a new connection: waits in the backlog, served by the new process
        t.join()
        r = results["runaway"]
        assert r.status_code == 503
        assert r.headers["Retry-After"] == "1"
        assert "limit" in r.text
        assert time.monotonic() - started < 10
        assert pending.status_code == 503  # answered, not dropped: "retry"
        assert pending.headers["Retry-After"] == "1"
        assert fresh == str(N_RECORDS)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 5, "the runaway process is still there")
        wait_for(lambda: sup.restarts == 1, 30, "no replacement was started")
        assert sup.exit_codes == [EXIT_OVERRUN]
        (new_pid,) = sup.pids
        assert new_pid != pid
        before = cpu_ticks(new_pid)
        time.sleep(0.5)
        assert cpu_ticks(new_pid) - before <= 3  # idle: nothing left running
    finally:
        sup.stop()


BIG = (  # about 3 MB of JSON: more than the socket buffers of a client that does not read
    "SELECT ?s ?p ?o ?x WHERE { ?s ?p ?o VALUES ?x { 1 2 3 4 5 6 7 8 9 10 } }"
)


def _slow_reader(port: int) -> socket.socket:
    """A client that asks for a big result and does not read it yet: its response is
    half-sent (most of it waits in the server's write buffer)."""
    conn = socket.socket()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn.connect(("127.0.0.1", port))
    conn.sendall(
        f"GET /sparql?query={quote(BIG)} HTTP/1.1\r\nHost: x\r\n"
        "Accept: application/json\r\n\r\n".encode()
    )
    return conn


def _read_response(conn: socket.socket) -> tuple[bytes, bytes]:
    conn.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head, body


def test_runaway_query_in_a_busy_process_retires_it_gracefully(harvested: Harvested) -> None:
    """A response is half-sent, so the runaway runs in a thread: its client gets the 503 at
    the deadline, the half-sent response is completed, then the process retires."""
    sup = supervised(harvested, processes=1, sparql_timeout=1.0, sparql_concurrency=2)
    try:
        (pid,) = sup.pids
        reader = _slow_reader(sup.port)
        time.sleep(0.5)  # answered inline; most of the answer sits in the write buffer
        conn = http.client.HTTPConnection("127.0.0.1", sup.port, timeout=60)
        conn.request("GET", "/sparql?query=" + quote(EXPLOSIVE))
        r = conn.getresponse()
        assert r.status == 503 and r.getheader("Retry-After") == "1"
        assert b"limit" in r.read()
        head, body = _read_response(reader)  # complete, not cut
        assert head.startswith(b"HTTP/1.1 200")
        rows = json.loads(body)["results"]["bindings"]
        assert len(rows) == 10 * quad_count(harvested.store)
        reader.close()
        wait_for(lambda: sup.restarts == 1, 30, "the retired process was not replaced")
        assert sup.exit_codes == [EXIT_RETIRED]
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 5, "the retired process is there")
        assert count(sup) == str(N_RECORDS)
    finally:
        sup.stop()


def test_a_harvest_reaches_every_process_and_old_snapshots_go(tmp_path: Path) -> None:
    h = Harvested(tmp_path, 5)
    sup = supervised(h, processes=2)
    try:
        first = sup.shelf.root / str(sup.shelf.current)
        sessions = [requests.Session() for _ in range(4)]  # the standby follows while idle
        assert {count(sup, s) for s in sessions} == {"5"}
        h.items.put(*(item(i) for i in range(5, 8)))
        h.run()  # the writer publishes its batches: every process reads them at once
        assert {count(sup, s) for s in sessions} == {"8"}
        sup.refresh()  # nothing more to publish
        assert {count(sup, s) for s in sessions} == {"8"}
        wait_for(lambda: not first.exists(), 10, "the old snapshot was not deleted")
    finally:
        sup.stop()
        h.close()


def test_a_killed_serving_process_is_replaced(harvested: Harvested) -> None:
    sup = supervised(harvested, processes=2)
    try:
        victim = sup.pids[0]
        os.kill(victim, 9)
        wait_for(lambda: sup.restarts == 1, 30, "no replacement was started")
        assert sup.exit_codes == [-9]
        assert victim not in sup.pids and len(sup.pids) == 2
        assert count(sup) == str(N_RECORDS)
    finally:
        sup.stop()


def test_one_process_accepts_and_the_standby_takes_over_while_it_is_stuck(
    harvested: Harvested,
) -> None:
    """With two processes the first accepts and the second stands by (idle, not woken by
    each new connection); while the first runs a query inline the standby answers new
    connections, and once a healthy first process is back the standby stops accepting."""
    sup = supervised(harvested, processes=2, sparql_timeout=4.0)
    try:
        assert sup.acceptors == 1
        wait_for(lambda: sup.accepting == [True, False], 10, "slot 0 alone should accept")
        standby = sup.pids[1]
        before = cpu_ticks(standby)
        for _ in range(30):  # new connections, all to the accepting process
            assert count(sup) == str(N_RECORDS)
        assert sup.accepting == [True, False]
        assert cpu_ticks(standby) - before <= 5  # it only beats: 50 wake-ups a second
        results: dict[str, requests.Response] = {}

        def runaway() -> None:
            results["runaway"] = requests.get(
                sup.url + "sparql", params={"query": EXPLOSIVE}, timeout=60
            )

        t = threading.Thread(target=runaway)
        started = time.monotonic()
        t.start()
        time.sleep(0.3)  # slot 0 is stuck in the engine
        assert count(sup) == str(N_RECORDS)  # answered by the standby, not after the deadline
        assert time.monotonic() - started < 2.0
        assert sup.accepting[1]
        t.join()
        assert results["runaway"].status_code == 503
        wait_for(lambda: sup.restarts == 1, 30, "no replacement was started")
        wait_for(lambda: sup.accepting == [True, False], 10, "the standby should stand by again")
        assert count(sup) == str(N_RECORDS)
    finally:
        sup.stop()


def test_the_standby_accepts_while_a_killed_process_is_replaced(harvested: Harvested) -> None:
    sup = supervised(harvested, processes=2)
    try:
        wait_for(lambda: sup.accepting == [True, False], 10, "slot 0 alone should accept")
        os.kill(sup.pids[0], signal.SIGSTOP)  # stuck: the standby takes over
        try:
            wait_for(lambda: sup.accepting[1], 5, "the standby did not take over")
            assert count(sup) == str(N_RECORDS)
        finally:
            os.kill(sup.pids[0], signal.SIGKILL)
        wait_for(lambda: sup.restarts == 1, 30, "no replacement was started")
        wait_for(lambda: sup.accepting == [True, False], 10, "the standby should stand by again")
    finally:
        sup.stop()


def test_a_second_serve_on_a_busy_port_says_so_in_one_line(tmp_path: Path) -> None:
    """The first ``serve`` holds the port; the second checks it before it prints or starts
    anything: one line on stderr, exit 2 (it printed "serving on ..." and a traceback)."""
    import subprocess
    import sys

    config = tmp_path / "aggregator.toml"
    config.write_text(
        '[store]\npath = "data"\nbase_iri = "http://127.0.0.1:8000/"\n'
        '[sources.portal]\ntype = "oai-pmh"\nurl = "http://127.0.0.1:9/oai"\n',
        encoding="utf-8",
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    cli = [sys.executable, "-m", "aggregator.cli", "-c", str(config)]
    serve = [*cli, "serve", "--port", port, "--processes", "1", "--no-scheduler"]
    first = subprocess.Popen(serve, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        assert first.stdout.readline().startswith(f"serving http://127.0.0.1:{port}/")

        def answers() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{port}/oai?verb=Identify", timeout=10).ok
            except requests.ConnectionError:
                return False

        wait_for(answers, 60, "the first serve did not answer")
        second = subprocess.run(serve, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert second.stdout == ""
        assert second.stderr == (
            f"error: cannot listen on 127.0.0.1:{port}: the port is in use (by another"
            " `aggregator serve`?): stop it or choose another --port\n"
        )
        assert first.poll() is None  # the first one serves on
        assert requests.get(f"http://127.0.0.1:{port}/oai?verb=Identify", timeout=10).ok
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            first.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            first.kill()
            first.communicate()


def test_the_supervisor_keeps_the_search_index_up_to_date_without_a_search(
    harvested: Harvested,
) -> None:
    folder = harvested.store.path
    for name in ("search.sqlite3", "search.sqlite3-wal", "search.sqlite3-shm"):
        (folder / name).unlink(missing_ok=True)  # an index no search has built
    sup = supervised(harvested, processes=1)
    state = sqlite3.connect(f"file:{folder / 'state.sqlite3'}?mode=ro", uri=True)
    try:
        wait_for(lambda: sup.search_keeper.indexed >= N_RECORDS, 60, "the keeper indexed nothing")
        index = SearchIndex(folder, folder / "state.sqlite3")
        assert index.behind(state) == 0
        docs = sqlite3.connect(folder / "search.sqlite3").execute("SELECT count(*) FROM docs")
        assert docs.fetchone()[0] == N_RECORDS
        index.close()
    finally:
        state.close()
        sup.stop()
