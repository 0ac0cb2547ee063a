"""``aggregator harvest`` run by cron or systemd: plain output off a terminal, a summary that
lists each failure once, transport errors in words, Ctrl-C cancelling cleanly, and worker
processes that end with the harvest even when it is killed."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from storecheck import assert_consistent

from aggregator.config import HttpSettings, load_settings
from aggregator.core.errors import TransportError
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import generated_items
from aggregator.demo.peers.sample_data import generate_dataset
from aggregator.demo.peers.server import PeerServer
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore


def _peer(n: int, delay: float = 0.0) -> OaiPmhPeer:
    items = generated_items(
        n,
        generate_dataset,
        identifier="oai:data.example.org:dataset-{:06d}",
        start=datetime(2024, 1, 1, tzinfo=UTC),
        step=timedelta(minutes=1),
    )
    peer = OaiPmhPeer(items, page_size=20)
    peer.faults.delay = delay
    return peer


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(tmp_path: Path, sources: dict[str, str], workers: int = 0) -> Path:
    config = tmp_path / "aggregator.toml"
    blocks = "".join(
        f'[sources.{n}]\ntype = "oai-pmh"\nurl = "{u}"\n\n' for n, u in sources.items()
    )
    config.write_text(
        '[store]\npath = "store"\nbase_iri = "http://127.0.0.1:8000/"\n\n'
        "[http]\nallow_private = true\nretries = 1\nbackoff = 0.05\n\n"
        f"[harvest]\nworkers = {workers}\nbatch_size = 20\n\n{blocks}",
        encoding="utf-8",
    )
    return config


def _cli(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "aggregator.cli", "-c", str(config), *args]


def _progress(store: Path) -> int:
    db = store / "state.sqlite3"
    if not db.exists():
        return -1
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            row = con.execute("SELECT counters FROM jobs ORDER BY id DESC LIMIT 1").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return -1
    return sum(json.loads(row[0]).values()) if row else -1


def _wait(what: Callable[[], bool], proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert proc.poll() is None, "the harvest ended too early"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_harvest_all_off_a_terminal_prints_lines_and_one_summary(tmp_path: Path) -> None:
    port = _closed_port()
    with PeerServer(_peer(30)) as server:
        config = _config(
            tmp_path,
            {"good": f"{server.url}oai", "down": f"http://127.0.0.1:{port}/oai"},
        )
        out = subprocess.run(
            _cli(config, "harvest", "--all"), capture_output=True, text=True, timeout=120
        )
    assert out.returncode == 1  # a job failed
    both = out.stdout + out.stderr
    assert "\x1b[" not in both and "\r" not in both  # no live progress off a terminal
    assert "Traceback" not in both
    assert "Z good: harvesting" in out.stderr  # timestamped progress lines instead
    summary = out.stdout[out.stdout.index("summary:") :]
    assert "summary: 2 job(s): 1 succeeded, 1 failed" in summary
    assert "records: added=30" in summary
    reason = f"could not connect to 127.0.0.1:{port}: connection refused"
    assert both.count(reason) == 1, both  # listed once, in the summary
    assert f"failed: down (job 2): GET http://127.0.0.1:{port}/oai failed after 2" in summary
    assert "Errno" not in both and "HTTPConnection" not in both  # no library internals


@contextmanager
def _raw_server(handle: Callable[[socket.socket], None]) -> Iterator[str]:
    """A TCP server on 127.0.0.1 whose connections ``handle`` deals with."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            handle(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/oai"
    finally:
        stop.set()
        thread.join()
        listener.close()


def _fetch_error(url: str, **http: object) -> str:
    settings = HttpSettings(allow_private=True, retries=0, **http)  # type: ignore[arg-type]
    with pytest.raises(TransportError) as info:
        HttpClient(settings).get(url)
    return info.value.message


def test_transport_errors_are_told_in_words() -> None:
    port = _closed_port()
    assert _fetch_error(f"http://127.0.0.1:{port}/x") == (
        f"GET http://127.0.0.1:{port}/x failed after 1 attempt(s): could not connect to"
        f" 127.0.0.1:{port}: connection refused (nothing listens on that port)"
    )
    held: list[socket.socket] = []
    with _raw_server(held.append) as url:  # accepts, never answers
        message = _fetch_error(url, timeout=0.3)
    assert message.endswith(
        "127.0.0.1:"
        + url.split(":")[2].split("/")[0]
        + " accepted the connection but did not answer in time"
    ), message
    for conn in held:
        conn.close()
    with _raw_server(lambda conn: conn.close()) as url:  # closes at once
        message = _fetch_error(url)
    assert "closed the connection without answering" in message or "reset" in message, message
    message = _fetch_error("http://no-such-host.invalid/oai")
    assert "cannot resolve no-such-host.invalid: the host name could not be resolved" in message
    assert isinstance(requests.ConnectionError(), Exception)


@pytest.mark.slow
def test_ctrl_c_cancels_the_job_cleanly(tmp_path: Path) -> None:
    with PeerServer(_peer(1000, delay=0.2)) as server:
        config = _config(
            tmp_path, {"portal": f"{server.url}oai", "later": f"{server.url}oai"}, workers=2
        )
        proc = subprocess.Popen(
            _cli(config, "harvest", "--all"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )
        try:
            _wait(lambda: _progress(tmp_path / "store") >= 20, proc)
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole group
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "cancelling: the running job stops after its current batch" in err
    assert "job 1 portal: cancelled (see the summary)" in out
    assert "cancelled: portal (job 1): cancelled: the records stored so far are kept" in out
    assert "not harvested (cancelled before their turn): later" in out
    settings = load_settings(config)
    with RecordStore(settings.store_path, settings.base_iri) as store:
        [job] = store.jobs.recent("portal")
        assert job.status == "cancelled"
        active = store.db.counts_by_status("portal").get("active", 0)
        assert 0 < active < 1000
        assert_consistent(store)


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_worker_processes_end_with_a_killed_harvest(tmp_path: Path) -> None:
    with PeerServer(_peer(400, delay=0.03)) as server:
        config = _config(tmp_path, {"portal": f"{server.url}oai"}, workers=2)
        proc = subprocess.Popen(
            _cli(config, "harvest", "portal"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            _wait(lambda: _progress(tmp_path / "store") >= 40, proc)
            workers = _descendants(proc.pid)
            assert len(workers) >= 3  # the forkserver and two mapping workers
            proc.kill()
            proc.wait(10)
            deadline = time.monotonic() + 20
            while any(_alive(p) for p in workers) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not [p for p in workers if _alive(p)]
        finally:
            if proc.poll() is None:
                proc.kill()
