"""``aggregator serve`` as it runs: a supervisor and real serving processes on a shared socket,
over a store filled by the real pipeline. Runaway SPARQL queries are stopped by ending the
process that runs them; the others keep answering and the supervisor replaces it."""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from test_serve_sparql import COUNT_DATASETS, EXPLOSIVE, N_RECORDS, Harvested, item

from aggregator.config import ServeSettings
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
    assert not sup.shelf.root.exists()
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
                sup.url + "sparql", params={"query": EXPLOSIVE}, timeout=60
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


def _partial_post(port: int) -> tuple[socket.socket, bytes]:
    """A request whose body is still on its way: in flight in the process that read it."""
    conn = socket.create_connection(("127.0.0.1", port))
    body = "query=" + quote("ASK {}")
    head = (
        "POST /sparql HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    conn.sendall(head.encode() + body[:3].encode())
    return conn, body[3:].encode()


def test_runaway_query_in_a_busy_process_retires_it_gracefully(harvested: Harvested) -> None:
    sup = supervised(harvested, processes=1, sparql_timeout=1.0, sparql_concurrency=2)
    try:
        (pid,) = sup.pids
        slow_upload, rest = _partial_post(sup.port)
        time.sleep(0.3)  # the process has read the head: that request is in flight
        conn = http.client.HTTPConnection("127.0.0.1", sup.port, timeout=60)
        conn.request("GET", "/sparql?query=" + quote(EXPLOSIVE))
        r = conn.getresponse()  # ran in a thread (the process was busy): 503 at the deadline
        assert r.status == 503 and r.getheader("Retry-After") == "1"
        assert b"limit" in r.read()
        # the retiring process still finishes the request in flight
        slow_upload.sendall(rest)
        answer = slow_upload.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        slow_upload.close()
        wait_for(lambda: sup.restarts == 1, 30, "the retired process was not replaced")
        assert sup.exit_codes == [EXIT_RETIRED]
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 5, "the retired process is there")
        assert count(sup) == str(N_RECORDS)
    finally:
        sup.stop()


def test_refresh_reaches_every_process_and_old_snapshots_go(tmp_path: Path) -> None:
    h = Harvested(tmp_path, 5)
    sup = supervised(h, processes=2)
    try:
        first = sup.shelf.root / str(sup.shelf.current)
        sessions = [requests.Session() for _ in range(4)]  # spread over both processes
        assert {count(sup, s) for s in sessions} == {"5"}
        h.items.put(*(item(i) for i in range(5, 8)))
        h.run()
        assert {count(sup, s) for s in sessions} == {"5"}  # the snapshot, until refreshed
        sup.refresh()
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
