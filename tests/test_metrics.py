"""``/metrics`` of a real ``aggregator serve``: harvest figures from the state database and
the book, request counters summed over the serving processes (a replaced process's counts
stay), read back with prometheus_client's own parser."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import generated_items
from aggregator.demo.peers.sample_data import generate_dataset
from aggregator.demo.peers.server import PeerServer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "aggregator.cli", "-c", str(config), *args]


@contextmanager
def serving(config: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    # the output goes to a file, never to a pipe nobody reads (a full pipe stops the
    # supervisor's log writes), and is shown when the test fails
    log_path = config.parent / "serve.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            _cli(
                config,
                "--log-level",
                "INFO",
                "serve",
                "--port",
                str(port),
                "--processes",
                "2",
                "--no-scheduler",
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # every serving process has started (the first answers while the second starts: a
        # test that kills them all before that kills ``serve`` with it, "did not start")
        deadline = time.monotonic() + 120
        while "serving on http://" not in log_path.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
        yield proc
    except BaseException:
        sys.stderr.write(f"--- aggregator serve output\n{log_path.read_text(errors='replace')}")
        raise
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = _get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _serving_pids(pid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"aggregator.serve.worker" in cmd:
            pids.append(int(entry))
    return pids


@pytest.mark.slow
def test_metrics_of_a_served_store(tmp_path: Path) -> None:
    items = generated_items(25, generate_dataset, identifier="oai:x:d-{:04d}")
    port = _free_port()
    with PeerServer(OaiPmhPeer(items, page_size=10)) as server:
        config = tmp_path / "aggregator.toml"
        config.write_text(
            '[store]\npath = "store"\nbase_iri = "http://127.0.0.1:8000/"\n'
            "[http]\nallow_private = true\nretries = 0\n[harvest]\nworkers = 0\n"
            f'[sources.portal]\ntype = "oai-pmh"\nurl = "{server.url}oai"\n'
            f'[sources.down]\ntype = "oai-pmh"\nurl = "http://127.0.0.1:{_free_port()}/oai"\n',
            encoding="utf-8",
        )
        subprocess.run(_cli(config, "harvest", "--all"), capture_output=True, check=False)
        subprocess.run(_cli(config, "harvest", "portal"), capture_output=True, check=True)
    with serving(config, port) as proc:
        base = f"http://127.0.0.1:{port}"
        assert _get(f"{base}/oai?verb=Identify")[0] == 200
        assert _get(f"{base}/oai?verb=Nope")[0] == 200  # an OAI error, badVerb
        assert _get(f"{base}/oai?verb=ListRecords&metadataPrefix=dcat_ap&from=2099-01-01")[0] == 200
        query = urllib.parse.quote("SELECT (count(*) AS ?n) WHERE { ?s ?p ?o }")
        assert _get(f"{base}/sparql?query={query}")[0] == 200
        assert _get(f"{base}/sparql?query=SELEC")[0] == 400
        m = _scrape(port)
        assert (
            m[("aggregator_harvest_jobs_total", (("source", "portal"), ("status", "succeeded")))]
            == 2
        )
        assert m[("aggregator_harvest_jobs_total", (("source", "down"), ("status", "failed")))] == 1
        added = ("aggregator_harvest_records_total", (("outcome", "added"), ("source", "portal")))
        assert m[added] == 25
        assert m[("aggregator_records", (("source", "portal"), ("status", "active")))] == 25
        last = m[("aggregator_harvest_last_success_timestamp_seconds", (("source", "portal"),))]
        assert abs(last - time.time()) < 600
        assert ("aggregator_harvest_last_success_timestamp_seconds", (("source", "down"),)) not in m
        assert m[("aggregator_harvest_jobs_in_progress", (("source", "portal"),))] == 0
        assert m[("aggregator_harvest_duration_seconds_total", (("source", "portal"),))] > 0
        oai_ok = ("aggregator_oai_requests_total", (("outcome", "ok"), ("verb", "Identify")))
        assert m[oai_ok] == 1
        assert (
            m[("aggregator_oai_requests_total", (("outcome", "badVerb"), ("verb", "invalid")))] == 1
        )
        no_match = (("outcome", "noRecordsMatch"), ("verb", "ListRecords"))
        assert m[("aggregator_oai_requests_total", no_match)] == 1
        assert m[("aggregator_sparql_requests_total", (("status", "200"),))] == 1
        assert m[("aggregator_sparql_requests_total", (("status", "400"),))] == 1
        # a serving process dies and is replaced: the counts it made stay counted
        before = set(_serving_pids(proc.pid))
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 180  # started one after the other; slow on a busy box
        while len(set(_serving_pids(proc.pid)) - before) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        m = _scrape(port)
        assert m[oai_ok] == 1
        assert _get(f"{base}/oai?verb=Identify")[0] == 200
        assert _get(f"{base}/sparql?query={query}")[0] == 200
        m = _scrape(port)
        assert m[oai_ok] == 2
        assert m[("aggregator_sparql_requests_total", (("status", "200"),))] == 2
