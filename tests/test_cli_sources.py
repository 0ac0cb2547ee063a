"""Retiring and editing sources through the command line, against a fixture OAI-PMH peer, an
on-disk store and `aggregator serve` itself."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner
from lxml import etree
from storecheck import assert_consistent

from aggregator.cli import main
from aggregator.config import load_settings
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem, generated_items
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.store.records import RecordStore

T0 = datetime(2024, 5, 1, tzinfo=UTC)
OAI = "{http://www.openarchives.org/OAI/2.0/}"
BAD = b"<rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'/>"


@pytest.fixture
def oai() -> Iterator[str]:
    items = MemoryItems(
        OaiItem(generate_identifier(i), T0 + timedelta(hours=i), (), False, generate_dataset(i))
        for i in range(12)
    )
    items.put(OaiItem("oai:x:bad", T0, (), False, BAD))  # rejected: a dead letter
    with PeerServer(OaiPmhPeer(items, page_size=5)) as server:
        yield f"{server.url}oai"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "aggregator.toml"
    path.write_text(
        "# operator comment that must survive edits\n"
        '[store]\npath = "data"\n'
        "[http]\nallow_private = true\nretries = 0\n[harvest]\nworkers = 0\n"
        f"[serve]\nport = {free_port()}\n",
        encoding="utf-8",
    )
    return path


def run(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["-c", str(config), *args], catch_exceptions=False)
    return result.exit_code, result.output


def add_and_harvest(config: Path, url: str) -> None:
    code, out = run(config, "source", "add", "portal", "--type", "oai-pmh", "--url", url)
    assert code == 0, out
    code, out = run(config, "harvest", "portal")
    assert code == 3 and "added=12" in out and "rejected=1" in out, out


@contextmanager
def serving(config: Path) -> Iterator[str]:
    """`aggregator serve` as an operator starts it; yields the base URL it prints."""
    proc = subprocess.Popen(
        # no scheduler: these tests harvest from the CLI beside the server
        [
            sys.executable,
            "-m",
            "aggregator.cli",
            "-c",
            str(config),
            "serve",
            "--processes",
            "1",
            "--no-scheduler",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving http://"), (line, proc.stderr and proc.stderr.read())
        base = line.split()[1]
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"{base}oai?verb=Identify", timeout=5).raise_for_status()
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline and proc.poll() is None, "serve did not start"
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def oai_headers(base: str) -> list[etree._Element]:
    body = requests.get(
        f"{base}oai",
        params={"verb": "ListIdentifiers", "metadataPrefix": "dcat_ap"},
        timeout=10,
    ).content
    return etree.fromstring(body).findall(f".//{OAI}header")


def sparql_count(base: str, pattern: str) -> int:
    resp = requests.get(
        f"{base}sparql",
        params={"query": f"SELECT (COUNT(*) AS ?n) WHERE {{ {pattern} }}"},
        headers={"Accept": "application/sparql-results+json"},
        timeout=10,
    )
    resp.raise_for_status()
    return int(resp.json()["results"]["bindings"][0]["n"]["value"])


def state(config: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(config.parent / "data" / "state.sqlite3") as conn:
        return conn.execute(sql).fetchall()


def test_purge_withdraws_everything_as_persistent_deletions_then_drops_state(
    config: Path, oai: str
) -> None:
    add_and_harvest(config, oai)
    with serving(config) as base:
        port = config.read_text().split("port = ")[1].split()[0]
        assert base == f"http://127.0.0.1:{port}/"  # [serve] port of aggregator.toml
        assert len(oai_headers(base)) == 12
        assert sparql_count(base, "?d a <http://www.w3.org/ns/dcat#Dataset>") == 12
    before = config.read_text()

    code, out = run(config, "source", "remove", "portal")
    assert code == 2
    assert "12 active record(s)" in out and "--purge" in out and "--keep-records" in out
    assert config.read_text() == before  # refused: nothing changed

    code, out = run(config, "source", "remove", "portal", "--purge")
    assert code == 0, out
    assert "withdrew 12 record(s)" in out and "1 dead letter(s)" in out
    assert "1 rejected record(s)" in out and "the checkpoint" in out
    assert "[sources.portal]" not in config.read_text()
    assert "# operator comment that must survive edits" in config.read_text()

    code, out = run(config, "jobs", "portal")
    assert "job 2 portal: succeeded  withdrawn=12 - source retired: withdrew 12" in out
    assert state(config, "SELECT status, count(*) FROM records GROUP BY status") == [
        ("withdrawn", 12)
    ]
    assert state(config, "SELECT count(*) FROM rejections") == [(0,)]
    assert state(config, "SELECT count(*) FROM checkpoints") == [(0,)]
    # the rejected record's payload went with it; the withdrawn records keep theirs
    assert state(config, "SELECT count(*) FROM payloads") == [(12,)]
    assert state(config, "SELECT count(DISTINCT payload_sha) FROM records") == [(12,)]
    code, out = run(config, "rejected", "list")
    assert code == 0 and "oai:x:bad" not in out
    code, out = run(config, "source", "list")
    assert "retired source portal: 12 withdrawn record(s)" in out
    code, out = run(config, "config", "check")
    assert code == 0 and "orphaned source" not in out

    with serving(config) as base:
        headers = oai_headers(base)
        assert len(headers) == 12
        assert all(h.get("status") == "deleted" for h in headers)
        assert all(h.findtext(f"{OAI}datestamp") for h in headers)
        ident = headers[0].findtext(f"{OAI}identifier")
        body = requests.get(
            f"{base}oai",
            params={"verb": "GetRecord", "identifier": ident, "metadataPrefix": "dcat_ap"},
            timeout=10,
        ).content
        record = etree.fromstring(body).find(f".//{OAI}record")
        assert record is not None
        assert record.find(f"{OAI}header").get("status") == "deleted"  # type: ignore[union-attr]
        assert record.find(f"{OAI}metadata") is None
        assert sparql_count(base, "?d a <http://www.w3.org/ns/dcat#Dataset>") == 0
        withdrawn = "<https://w3id.org/ld-aggregator/ns#Withdrawn>"
        assert sparql_count(base, f"?r ?status {withdrawn}") == 12  # catalogue records stay


def test_orphaned_records_are_reported_and_can_be_purged(config: Path, oai: str) -> None:
    add_and_harvest(config, oai)
    code, out = run(config, "source", "remove", "portal", "--keep-records")
    assert code == 0 and "its 12 active record(s) stay published" in out
    code, out = run(config, "config", "check")
    assert code == 0
    assert "orphaned source portal" in out and "12 record(s) still published" in out
    assert "aggregator source remove portal --purge" in out
    code, out = run(config, "source", "list")
    assert "no sources" in out and "orphaned source portal" in out
    code, out = run(config, "source", "remove", "portal")
    assert code == 2 and "--purge" in out  # only in the store: purging is the one way
    code, out = run(config, "source", "remove", "portal", "--purge")
    assert code == 0 and "withdrew 12 record(s)" in out, out
    code, out = run(config, "config", "check")
    assert code == 0 and "orphaned source" not in out
    code, out = run(config, "source", "remove", "nothing-here")
    assert code == 2 and "no source named 'nothing-here'" in out


def test_a_source_without_records_is_removed_without_asking(config: Path, oai: str) -> None:
    code, out = run(config, "source", "add", "portal", "--type", "oai-pmh", "--url", oai)
    assert code == 0, out
    code, out = run(config, "source", "remove", "portal")
    assert code == 0 and "removed" in out and "[sources.portal]" not in config.read_text()
    assert not (config.parent / "data").exists()  # nothing was harvested, nothing created


def test_edit_changes_a_source_in_place_and_checks_it_first(config: Path, oai: str) -> None:
    code, out = run(
        config, "source", "add", "portal", "--type", "oai-pmh", "--url", oai,
        "--option", "metadata_prefix=dcat_ap", "--publisher", "Old",
    )  # fmt: skip
    assert code == 0, out
    text = config.read_text().replace(
        "[sources.portal]", "# the national portal, agreed 2024\n[sources.portal]"
    )
    config.write_text(text)
    code, out = run(
        config, "source", "edit", "portal", "--url", f"{oai}2", "--publisher", "New Agency",
        "--schedule", "weekly", "--lenient", "--disable", "--option", "set=datasets",
        "--remove-option", "metadata_prefix", "--secret", "token=PORTAL_TOKEN",
    )  # fmt: skip
    assert code == 0, out
    assert "# the national portal, agreed 2024" in config.read_text()
    assert "# operator comment that must survive edits" in config.read_text()
    code, out = run(config, "source", "show", "portal")
    shown = json.loads(out)
    assert shown["url"] == f"{oai}2" and shown["publisher"] == "New Agency"
    assert shown["schedule"] == "weekly" and shown["lenient"] and not shown["enabled"]
    assert shown["options"] == {"set": "datasets"}
    assert shown["secrets"] == {"token": "$PORTAL_TOKEN"}
    before = config.read_text()
    for args, message in (
        (("--url", "file:///etc/passwd"), "http(s) URL"),
        (("--schedule", "sometimes"), "schedule"),
        (("--format", "nope"), "unknown format"),
        (("--remove-option", "absent"), "no option 'absent'"),
        ((), "nothing to change"),
    ):
        code, out = run(config, "source", "edit", "portal", *args)
        assert code == 2 and message in out, (args, out)
        assert config.read_text() == before
    code, out = run(config, "source", "edit", "nope", "--url", oai)
    assert code == 2 and "no source named 'nope'" in out
    code, out = run(
        config, "source", "edit", "portal", "--publisher", "", "--strict", "--enable",
        "--remove-secret", "token", "--remove-option", "set",
    )  # fmt: skip
    assert code == 0, out
    shown = json.loads(run(config, "source", "show", "portal")[1])
    assert shown["publisher"] is None and not shown["lenient"] and shown["enabled"]
    assert shown["strict"] is True and shown["violations"] == "strict"
    assert shown["options"] == {} and shown["secrets"] == {}
    code, out = run(config, "source", "edit", "portal", "--violations", "flag")
    assert code == 0, out
    shown = json.loads(run(config, "source", "show", "portal")[1])
    assert (shown["strict"], shown["lenient"], shown["violations"]) == (False, False, "flag")


@pytest.mark.slow
def test_a_purge_killed_midway_leaves_a_consistent_store_and_finishes_when_run_again(
    tmp_path: Path,
) -> None:
    n = 100
    items = generated_items(
        n,
        generate_dataset,
        identifier="oai:data.example.org:dataset-{:06d}",
        start=T0,
        step=timedelta(minutes=1),
    )
    with PeerServer(OaiPmhPeer(items, page_size=100)) as server:
        config = tmp_path / "aggregator.toml"
        config.write_text(
            '[store]\npath = "store"\n[http]\nallow_private = true\n'
            "[harvest]\nworkers = 0\nbatch_size = 500\n"
            f'[sources.portal]\ntype = "oai-pmh"\nurl = "{server.url}oai"\n',
            encoding="utf-8",
        )
        code, out = run(config, "harvest", "portal")
        assert code == 0 and f"added={n}" in out, out
    # purge in many small journalled batches, so that the kill lands in the middle
    config.write_text(config.read_text().replace("batch_size = 500", "batch_size = 2"))
    db = tmp_path / "store" / "state.sqlite3"
    cmd = [sys.executable, "-m", "aggregator.cli", "-c", str(config)]
    proc = subprocess.Popen(
        [*cmd, "source", "remove", "portal", "--purge"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while withdrawn_by(db, 2) < 10 and time.monotonic() < deadline:
        assert proc.poll() is None, "the purge ended before it could be killed"
        time.sleep(0.002)
    assert proc.poll() is None, "the purge ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert "[sources.portal]" in config.read_text()  # still registered: run it again

    settings = load_settings(config)
    with RecordStore(settings.store_path, settings.base_iri) as store:
        assert_consistent(store)  # every record wholly active or wholly withdrawn
        counts = store.db.counts_by_status("portal")
        assert 0 < counts["withdrawn"] < n and counts["withdrawn"] + counts["active"] == n
        assert store.jobs.get(2).status == "failed"
    code, out = run(config, "source", "remove", "portal", "--purge")
    assert code == 0 and f"withdrew {counts['active']} record(s)" in out, out
    with RecordStore(settings.store_path, settings.base_iri) as store:
        assert_consistent(store)
        assert store.db.counts_by_status("portal") == {"withdrawn": n}
    assert "[sources.portal]" not in config.read_text()


def withdrawn_by(db: Path, job_id: int) -> int:
    """Records the given job has withdrawn so far (its counters, written with each batch)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            row = con.execute("SELECT counters FROM jobs WHERE id = ?", (job_id,)).fetchone()
    except sqlite3.Error:
        return -1
    return int(json.loads(row[0]).get("withdrawn", 0)) if row else -1
