"""The CLI beside a running scheduler (a real ``aggregator scheduler`` process on a real data
directory, OAI-PMH peers on 127.0.0.1): ``schedule now`` refuses when no scheduler would take
the request; ``harvest`` hands its jobs to the scheduler, which writes the store, and follows
them to their end with the output and exit codes of a harvest run in its own process."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_schedule_store import _book_rows, _cli, _progress, _wait, items, write_config

from aggregator.config import load_settings
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.server import PeerServer
from aggregator.schedule.liveness import scheduler_holder, scheduler_running
from aggregator.store.records import ReadOnlyStore

pytestmark = pytest.mark.slow


@contextmanager
def scheduler(config: Path) -> Iterator[subprocess.Popen[str]]:
    """``aggregator scheduler`` for ``config``, running once its lock is held."""
    store = load_settings(config).store_path
    proc = subprocess.Popen(_cli(config, "scheduler"), stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: scheduler_running(store), proc=proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def _run(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_cli(config, *args), capture_output=True, text=True, timeout=300)


def _active(config: Path, source: str) -> dict[str, int]:
    s = load_settings(config)
    with ReadOnlyStore(s.store_path, s.base_iri) as store:
        return store.db.counts_by_status(source)


def test_schedule_now_fails_when_no_scheduler_runs_for_the_store(tmp_path: Path) -> None:
    peer = OaiPmhPeer(items(10, "portal"), page_size=10)
    with PeerServer(peer) as server:
        config = write_config(tmp_path, {"portal": f"{server.url}oai"})
        store = tmp_path / "store"
        refused = _run(config, "schedule", "now", "portal")
        assert refused.returncode == 1
        assert refused.stdout == ""
        assert refused.stderr == (
            f"error: no scheduler is running for the store at {store}: start one with"
            " `aggregator serve` (or `aggregator scheduler`), or harvest in this process with"
            " `aggregator harvest NAME`\n"
        )
        assert _book_rows(store, "SELECT * FROM requests") == []  # nothing queued for later
        status = _run(config, "schedule", "status")
        assert status.returncode == 0
        assert status.stderr.startswith("note: no scheduler is running for the store at")
        with scheduler(config) as proc:
            assert scheduler_holder(store) == f"process {proc.pid}"
            assert _run(config, "schedule", "status").stderr == ""
            taken = _run(config, "schedule", "now", "portal")
            assert (taken.returncode, taken.stdout) == (0, "portal: harvest requested\n")
            _wait(lambda: _book_rows(store, "SELECT status FROM runs") == [("succeeded",)])
        # stopped: the lock is gone with it, and the request is refused again
        assert not scheduler_running(store)
        assert _run(config, "schedule", "now", "portal").returncode == 1
        # killed (SIGKILL): the kernel drops the lock at once
        proc = subprocess.Popen(_cli(config, "scheduler"), stderr=subprocess.PIPE, text=True)
        try:
            _wait(lambda: scheduler_running(store), proc=proc)
        finally:
            proc.kill()
            proc.communicate()
        assert not scheduler_running(store)
        assert _run(config, "schedule", "now", "portal").returncode == 1


def test_harvest_hands_its_jobs_to_the_running_scheduler_and_follows_them(tmp_path: Path) -> None:
    slow = OaiPmhPeer(items(400, "slow"), page_size=20)
    fast = OaiPmhPeer(items(30, "fast"), page_size=10)
    with PeerServer(slow) as slow_server, PeerServer(fast) as fast_server:
        config = write_config(
            tmp_path,
            {
                "slow": f"{slow_server.url}oai",
                "fast": f"{fast_server.url}oai",
                "dead": "http://127.0.0.1:9/oai",
            },
        )
        store = tmp_path / "store"
        with scheduler(config) as proc:
            # the scheduler writes the store (a slow job): a second writer would be refused
            slow.faults.delay = 0.1
            assert _run(config, "schedule", "now", "slow").returncode == 0
            _wait(lambda: _progress(store) > 0, proc=proc)
            one = _run(config, "harvest", "fast")
            assert "being written" not in one.stderr, one.stderr
            assert one.returncode == 0, one.stderr
            assert re.fullmatch(r"job \d+ fast: succeeded  added=30\n", one.stdout), one.stdout
            assert f"a scheduler runs for {store} (process {proc.pid})" in one.stderr
            assert _active(config, "fast") == {"active": 30}
            assert _book_rows(
                store,
                "SELECT reason, by FROM runs JOIN requests ON run_id = runs.id"
                " WHERE runs.source = 'fast'",
            ) == [("manual", "cli:harvest")]

            # --all: every job followed, the summary, and the exit code of the worst (failed)
            slow.faults.delay = 0
            every = _run(config, "harvest", "--all")
            assert every.returncode == 1, every.stderr
            lines = every.stdout.splitlines()
            assert re.search(r"^job \d+ dead: failed \(see the summary\)$", every.stdout, re.M)
            assert re.search(
                r"^job \d+ fast: succeeded  no records - incremental", every.stdout, re.M
            )
            assert "summary: 3 job(s): 2 succeeded, 1 failed" in lines
            assert any(
                re.match(r"  failed: dead \(job \d+\): .*could not connect to 127.0.0.1:9", x)
                for x in lines
            ), lines
            assert _active(config, "slow") == {"active": 400}

            # Ctrl-C: the scheduler cancels the job it runs, keeps what it stored, and does
            # not run it again; the command exits 130 as a local harvest does
            slow.faults.delay = 0.5  # 10 s or more: the Ctrl-C comes well before its end
            follower = subprocess.Popen(
                _cli(config, "harvest", "slow", "--full"),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            _wait(
                lambda: bool(
                    _book_rows(
                        store,
                        "SELECT 1 FROM runs WHERE source = 'slow' AND status = 'running'"
                        " AND full = 1",
                    )
                ),
                proc=follower,
            )
            follower.send_signal(signal.SIGINT)
            out, err = follower.communicate(timeout=120)
            assert follower.returncode == 130, err
            assert re.fullmatch(r"job \d+ slow: cancelled  .*\n", out), out
            assert "Traceback" not in err
            [(status, retry)] = _book_rows(
                store,
                "SELECT runs.status, sources.retry_at FROM runs JOIN sources USING (source)"
                " WHERE source = 'slow' ORDER BY runs.id DESC LIMIT 1",
            )
            assert (status, retry) == ("cancelled", None)
            assert proc.poll() is None  # the scheduler serves on
