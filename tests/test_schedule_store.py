"""The scheduler running real jobs: OAI-PMH peers on 127.0.0.1, a real store, parallel jobs
sharing one writer and one per-host limit; ``aggregator scheduler`` killed mid-job and
restarted; ``aggregator serve`` running the scheduler and ending it with itself."""

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
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from storecheck import assert_consistent

from aggregator.config import load_settings
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import generated_items
from aggregator.demo.peers.sample_data import generate_dataset
from aggregator.demo.peers.server import PeerServer
from aggregator.schedule.book import Book
from aggregator.schedule.liveness import scheduler_running
from aggregator.schedule.runner import SchedulerLock, StoreJobs
from aggregator.schedule.scheduler import Scheduler
from aggregator.schedule.status import request_harvest, schedule_status
from aggregator.store.records import RecordStore


def items(n: int, prefix: str) -> Any:
    return generated_items(
        n,
        generate_dataset,
        identifier=f"oai:{prefix}:dataset-{{:06d}}",
        start=datetime(2024, 1, 1, tzinfo=UTC),
        step=timedelta(minutes=1),
    )


class InFlight:
    """WSGI middleware counting the requests a peer answers at once."""

    def __init__(self, app: Callable[..., list[bytes]]) -> None:
        self.app = app
        self.now = 0
        self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            return self.app(environ, start_response)
        finally:
            with self.lock:
                self.now -= 1


def write_config(
    tmp_path: Path, sources: dict[str, str], extra: str = "", retry_delay: int = 0
) -> Path:
    config = tmp_path / "aggregator.toml"
    blocks = "".join(
        f'[sources.{name}]\ntype = "oai-pmh"\nurl = "{url}"\nschedule = "manual"\n\n'
        for name, url in sources.items()
    )
    config.write_text(
        f"""[store]
path = "store"
base_iri = "http://127.0.0.1:8000/"

[http]
allow_private = true
retries = 0

[harvest]
workers = 0
batch_size = 20

[schedule]
window = ""
retry_delay = {retry_delay}
{extra}

{blocks}""",
        encoding="utf-8",
    )
    return config


def test_parallel_jobs_share_the_store_and_the_per_host_limit(tmp_path: Path) -> None:
    with ExitStack() as stack:
        peers = {}
        urls = {}
        for name in ("one", "two"):
            peer = OaiPmhPeer(items(120, name), page_size=20)
            peer.faults.delay = 0.02
            counted = InFlight(peer)
            server = stack.enter_context(PeerServer(counted))
            peers[name], urls[name] = counted, f"{server.url}oai"
        # a third source on the host of the first: the per-host limit of 1 holds across jobs
        urls["three"] = urls["one"]
        urls["down"] = "http://127.0.0.1:9/oai"  # nothing listens: connection refused
        config = write_config(tmp_path, urls, "parallel = 3", retry_delay=3600)
        text = config.read_text().replace("retries = 0", "retries = 0\nper_host_concurrency = 1")
        config.write_text(text)
        settings = load_settings(config)
        book = Book(settings.store_path)
        sched = Scheduler(settings, book, StoreJobs(settings))
        for name in urls:
            request_harvest(settings, name)
        assert sorted(sched.tick()) == ["down", "one", "three"]  # three at once at most
        status = {s.source: s for s in schedule_status(settings)}
        assert status["one"].running and not status["two"].running
        sched.wait(120)
        assert sched.tick() == ["two"]
        sched.wait(120)
        assert peers["one"].peak == 1  # "one" and "three" ran at once on one host
        runs = {r.source: r for r in book.runs(limit=10)}
        assert {n: r.status for n, r in runs.items()} == {
            "one": "succeeded",
            "two": "succeeded",
            "three": "succeeded",
            "down": "failed",
        }
        assert "127.0.0.1:9" in runs["down"].message
        down = book.state("down")
        assert down is not None and down.failures == 1 and down.retry_at is not None
        book.close()
        with RecordStore(settings.store_path, settings.base_iri) as store:
            assert store.db.counts_by_status("one") == {"active": 120}
            assert store.db.counts_by_status("three") == {"active": 120}
            assert store.db.counts_by_status("two") == {"active": 120}
            assert_consistent(store)


def _book_rows(store: Path, sql: str) -> list[tuple[Any, ...]]:
    path = store / "schedule.sqlite3"
    if not path.exists():
        return []
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute(sql).fetchall()
    except sqlite3.Error:
        return []
    finally:
        con.close()


def _progress(store: Path) -> int:
    path = store / "state.sqlite3"
    if not path.exists():
        return -1
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        row = con.execute("SELECT counters FROM jobs ORDER BY id DESC LIMIT 1").fetchone()
    except sqlite3.Error:
        return -1
    finally:
        con.close()
    return sum(json.loads(row[0]).values()) if row else -1


def _wait(what: Callable[[], bool], timeout: float = 60, proc: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        if proc is not None:
            assert proc.poll() is None, "the process ended"
        time.sleep(0.05)


def _cli(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "aggregator.cli", "-c", str(config), *args]


@pytest.mark.slow
def test_scheduler_killed_mid_job_fails_it_and_retries_after_restart(tmp_path: Path) -> None:
    peer = OaiPmhPeer(items(400, "portal"), page_size=20)
    peer.faults.delay = 0.03
    with PeerServer(peer) as server:
        config = write_config(tmp_path, {"portal": f"{server.url}oai"})
        store = tmp_path / "store"
        proc = subprocess.Popen(_cli(config, "scheduler"), stderr=subprocess.PIPE, text=True)
        try:
            _wait(lambda: scheduler_running(store), proc=proc)  # else `schedule now` refuses
            subprocess.run(_cli(config, "schedule", "now", "portal"), check=True)
            _wait(lambda: _progress(store) >= 40, proc=proc)
            proc.kill()
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert _book_rows(store, "SELECT status FROM runs") == [("running",)]
        peer.faults.delay = 0
        proc = subprocess.Popen(_cli(config, "scheduler"), stderr=subprocess.PIPE, text=True)
        try:
            _wait(
                lambda: (
                    len(_book_rows(store, "SELECT 1 FROM runs WHERE status = 'succeeded'")) == 1
                ),
                proc=proc,
            )
            # a second scheduler for the same store is refused, naming the first
            second = subprocess.run(_cli(config, "scheduler"), capture_output=True, text=True)
            assert second.returncode == 1
            assert f"a scheduler already runs for the store at {store}" in second.stderr
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0 and "Traceback" not in err, err
        runs = _book_rows(store, "SELECT reason, status, message FROM runs ORDER BY id")
        assert [r[:2] for r in runs] == [("manual", "failed"), ("retry", "succeeded")]
        assert "process ended during this job" in runs[0][2]
        out = subprocess.run(
            _cli(config, "schedule", "status", "--json"), capture_output=True, text=True, check=True
        )
        [state] = json.loads(out.stdout)
        assert state["last_status"] == "succeeded" and state["failures"] == 0
        listed = subprocess.run(
            _cli(config, "source", "list"), capture_output=True, text=True, check=True
        ).stdout
        assert "schedule: manual; last job 2 succeeded at" in listed, listed
        assert "no run scheduled" in listed
        settings = load_settings(config)
        with RecordStore(settings.store_path, settings.base_iri) as rs:
            assert rs.db.counts_by_status("portal") == {"active": 400}
            assert_consistent(rs)


@contextmanager
def serving(config: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        _cli(config, "serve", "--port", str(port), "--processes", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        yield proc, line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.slow
def test_serve_runs_the_scheduler_and_it_ends_with_serve(tmp_path: Path) -> None:
    peer = OaiPmhPeer(items(30, "portal"), page_size=10)
    with PeerServer(peer) as server:
        config = write_config(tmp_path, {"portal": f"{server.url}oai"})
        store = tmp_path / "store"
        with serving(config) as (proc, _):
            _wait(
                lambda: any(
                    "aggregator.schedule.service" in _cmdline(p) for p in _children(proc.pid)
                ),
                proc=proc,
            )
            [child] = [
                p for p in _children(proc.pid) if "aggregator.schedule.service" in _cmdline(p)
            ]
            _wait(lambda: scheduler_running(store), proc=proc)  # it holds its lock
            subprocess.run(_cli(config, "schedule", "now", "portal"), check=True)
            _wait(
                lambda: _book_rows(store, "SELECT status FROM runs") == [("succeeded",)],
                proc=proc,
            )
            proc.kill()  # SIGKILL: the scheduler still hears of it
            proc.wait(10)
            _wait(
                lambda: (
                    not Path(f"/proc/{child}").exists()
                    or "Z" in Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
                ),
                timeout=30,
            )
        settings = load_settings(config)
        with RecordStore(settings.store_path, settings.base_iri) as rs:
            assert rs.db.counts_by_status("portal") == {"active": 30}


def test_one_scheduler_per_store(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path, {"portal": "http://127.0.0.1:9/oai"}))
    lock = SchedulerLock(settings.store_path)  # taken: a second one is refused
    try:
        with pytest.raises(Exception, match="a scheduler already runs"):
            SchedulerLock(settings.store_path)
    finally:
        lock.release()
    SchedulerLock(settings.store_path).release()  # released: free again
