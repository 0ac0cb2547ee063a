"""The command line, invoked as operators do, against local peers and an on-disk store."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.config import load_settings
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import (
    bundled_dump_path,
    generate_dataset,
    generate_identifier,
)
from aggregator.demo.peers.server import PeerServer

T0 = datetime(2024, 5, 1, tzinfo=UTC)


@pytest.fixture
def oai() -> Iterator[tuple[OaiPmhPeer, str]]:
    items = MemoryItems(
        OaiItem(generate_identifier(i), T0 + timedelta(hours=i), (), False, generate_dataset(i))
        for i in range(12)
    )
    peer = OaiPmhPeer(items, page_size=5)
    with PeerServer(peer) as server:
        yield peer, f"{server.url}oai"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "aggregator.toml"
    path.write_text(
        '# operator comment that must survive edits\n[store]\npath = "data"\n'
        "[http]\nallow_private = true\nretries = 0\n[harvest]\nworkers = 0\n",
        encoding="utf-8",
    )
    return path


def run(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["-c", str(config), *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_source_lifecycle_and_harvest(config: Path, oai: tuple[OaiPmhPeer, str]) -> None:
    _, url = oai
    code, out = run(
        config,
        "source",
        "add",
        "portal",
        "--type",
        "oai-pmh",
        "--url",
        url,
        "--publisher",
        "Example Agency",
        "--option",
        "metadata_prefix=dcat_ap",
    )
    assert code == 0, out
    assert "# operator comment that must survive edits" in config.read_text()
    code, out = run(config, "source", "add", "portal", "--type", "oai-pmh", "--url", url)
    assert code == 2 and "exists already" in out
    code, out = run(config, "config", "check")
    assert code == 0 and "source portal: oai-pmh -> dcat" in out
    code, out = run(config, "harvest", "portal")
    assert code == 0, out
    assert "succeeded" in out and "added=12" in out
    code, out = run(config, "source", "list")
    assert "active=12" in out
    code, out = run(config, "jobs")
    assert "job 1 portal: succeeded" in out
    code, out = run(config, "job", "show", "1", "--json")
    job = json.loads(out)
    assert job["counters"]["added"] == 12 and job["errors"] == []
    code, out = run(config, "records", "--source", "portal", "--status", "active")
    assert len(out.strip().splitlines()) == 12
    ident = generate_identifier(3)
    code, out = run(config, "record", "show", "portal", ident)
    assert "http://www.w3.org/ns/dcat#CatalogRecord" in out
    result = CliRunner().invoke(main, ["-c", str(config), "record", "payload", "portal", ident])
    assert result.stdout_bytes == generate_dataset(3).rstrip(b"\n")
    code, out = run(config, "source", "show", "portal")
    shown = json.loads(out)
    assert shown["records"] == {"active": 12} and shown["checkpoint"]
    assert shown["workers"] == load_settings(config).harvest.workers  # the default: [harvest]
    code, out = run(config, "source", "remove", "portal", "--keep-records")
    assert code == 0 and "portal" not in config.read_text().split("comment")[1]
    assert "12 active record(s) stay published" in out


def test_exit_codes_separate_rejections_from_failures(
    config: Path, oai: tuple[OaiPmhPeer, str]
) -> None:
    peer, url = oai
    peer.items.put(
        OaiItem(
            "oai:x:bad",
            T0,
            (),
            False,
            b"<rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'/>",
        )
    )  # type: ignore[attr-defined]
    run(config, "source", "add", "portal", "--type", "oai-pmh", "--url", url)
    code, out = run(config, "harvest", "portal")
    assert code == 3, out  # ran, some records rejected
    code, out = run(config, "job", "show", "1")
    assert "oai:x:bad [map/" in out
    peer.faults.error_on_page = 1
    peer.faults.error_code = "badArgument"
    code, out = run(config, "harvest", "portal", "--full")
    assert code == 1 and "failed" in out  # the job failed
    # one command, a failed job then a job with rejections: the failure is not hidden
    peer.faults.error_on_page = None
    run(config, "source", "add", "gone", "--type", "oai-pmh", "--url", _closed_port_url())
    code, out = run(config, "harvest", "gone", "portal", "--full", "--force")
    assert code == 1 and "failed" in out and "rejected=1" in out, out


def _closed_port_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/oai"


def test_config_errors_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "aggregator.toml"
    bad.write_text('[sources.x]\ntype = "nope"\nurl = "http://example.org/"\n')
    code, out = run(bad, "config", "check")
    assert code == 2 and "unknown type 'nope'" in out
    bad.write_text(
        '[sources.x]\ntype = "oai-pmh"\nurl = "http://example.org/"\n'
        'secrets = { key = "AGG_TEST_UNSET_VAR" }\n'
    )
    code, out = run(bad, "config", "check")
    assert code == 2 and "AGG_TEST_UNSET_VAR" in out


def test_map_prints_the_normalised_graph() -> None:
    result = CliRunner().invoke(main, ["map", "--from", "dcat", str(bundled_dump_path())])
    assert result.exit_code == 0, result.output
    assert "# dataset " in result.output and "dcat:Dataset" in result.output
    assert "owl:versionInfo" not in result.output  # DCAT-AP 2 term rewritten


def test_validate_exit_status(tmp_path: Path) -> None:
    good = tmp_path / "good.rdf"
    good.write_bytes(generate_dataset(1))
    # as published, the sample leaves its vocabulary terms untyped: the class ranges (part of
    # the default shapes, as range.ttl is of the official ones) fail it; mapped, it conforms
    published = CliRunner().invoke(main, ["validate", str(good)])
    assert published.exit_code == 1, published.output
    assert "dcat-ap-3-ranges#Dataset-theme" in published.output
    result = CliRunner().invoke(main, ["validate", "--normalised", str(good)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("stored")
    bad = tmp_path / "bad.ttl"
    bad.write_text(
        "@prefix dcat: <http://www.w3.org/ns/dcat#> .\n<http://example.org/d> a dcat:Dataset .\n"
    )
    result = CliRunner().invoke(main, ["validate", str(bad)])
    assert result.exit_code == 1
    assert "violation" in result.output and "does not conform" in result.output


@pytest.mark.slow
def test_demo_runs_offline_and_harvests(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "aggregator.cli",
            "demo",
            "--dir",
            str(tmp_path / "demo"),
            "--no-serve",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "harvested demo-oai: job 1 succeeded" in out.stdout
    assert "harvested demo-dump: job 2 succeeded" in out.stdout
    assert "harvested demo-mdr: job 3 succeeded added=5 rejected=1" in out.stdout
    assert "harvested demo-csw: job 4 succeeded added=3" in out.stdout
    assert "harvested demo-waf: job 5 succeeded added=3" in out.stdout
    assert "harvested demo-meta-share: job 6 succeeded added=4" in out.stdout
    # every package conforms: the water-bodies package's EU dataset-type term gets its label
    # from the bundled table (mappings/dcat-ap-3-vocabularies.toml)
    assert "harvested demo-ckan: job 7 succeeded added=5 \n" in out.stdout
    assert "harvested demo-records: job 8 succeeded added=3" in out.stdout
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "aggregator.cli",
            "demo",
            "--dir",
            str(tmp_path / "demo"),
            "--no-serve",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert again.returncode == 0, again.stderr  # a demo directory is reused, emptied first
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "precious.txt").write_text("keep")
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "aggregator.cli",
            "demo",
            "--dir",
            str(tmp_path / "mine"),
            "--no-serve",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert refused.returncode == 2 and (tmp_path / "mine" / "precious.txt").exists()


def test_a_missing_configuration_is_an_error_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGGREGATOR_CONFIG", raising=False)
    missing = tmp_path / "typo.toml"
    for args in (["config", "check"], ["jobs"], ["source", "list"], ["harvest", "--all"]):
        code, out = run(missing, *args)
        assert code == 2 and f"-c names {missing}, which does not exist" in out, (args, out)
    result = CliRunner().invoke(main, ["-c", str(missing), "validate", str(bundled_dump_path())])
    assert result.exit_code == 2 and "does not exist" in result.output
    # no -c: outside a data directory, say what was looked for
    for args in (["jobs"], ["records"], ["serve"], ["harvest", "--all"], ["quality"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert f"no aggregator.toml in {tmp_path}" in result.output
        assert str(tmp_path / "aggregator.toml") in result.output
    monkeypatch.setenv("AGGREGATOR_CONFIG", str(missing))
    result = CliRunner().invoke(main, ["jobs"])
    assert result.exit_code == 2 and "$AGGREGATOR_CONFIG names" in result.output
    assert list(tmp_path.iterdir()) == []  # nothing created anywhere
    # the file commands need no configuration; `source add` creates one
    monkeypatch.delenv("AGGREGATOR_CONFIG")
    result = CliRunner().invoke(main, ["validate", str(bundled_dump_path())])
    assert result.exit_code in (0, 1) and "aggregator.toml" not in result.output
    assert (
        CliRunner().invoke(main, ["map", "--from", "dcat", str(bundled_dump_path())]).exit_code == 0
    )
    code, out = run(
        missing, "source", "add", "p", "--type", "oai-pmh", "--url", "http://example.org/oai"
    )
    assert code == 0 and missing.is_file()


def test_read_commands_do_not_create_a_store(config: Path) -> None:
    data = config.parent / "data"
    for args in (["jobs"], ["records"], ["rejected", "list"], ["job", "show", "1"]):
        code, out = run(config, *args)
        assert code == 2 and f"no store at {data} yet" in out, (args, out)
    code, out = run(
        config, "source", "add", "p", "--type", "oai-pmh", "--url", "http://example.org/oai"
    )
    code, out = run(config, "source", "list")
    assert code == 0 and "never harvested" in out
    code, out = run(config, "source", "show", "p")
    assert code == 0 and json.loads(out)["records"] == {}
    code, out = run(config, "config", "check")
    assert code == 0
    assert not data.exists()


def test_an_unset_secret_fails_only_its_source(
    config: Path, oai: tuple[OaiPmhPeer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = oai
    monkeypatch.delenv("AGG_TEST_UNSET_TOKEN", raising=False)
    run(config, "source", "add", "open", "--type", "oai-pmh", "--url", url)
    code, out = run(
        config, "source", "add", "locked", "--type", "oai-pmh", "--url", url,
        "--secret", "token=AGG_TEST_UNSET_TOKEN",
    )  # fmt: skip
    assert code == 0, out  # registering names the variable; its value is needed to harvest
    code, out = run(config, "config", "check")
    assert code == 2 and "1 source(s) cannot harvest" in out
    assert "source open: oai-pmh" in out and "source locked: oai-pmh" in out
    assert "secret 'token' needs environment variable 'AGG_TEST_UNSET_TOKEN'" in out
    code, out = run(config, "harvest", "open")
    assert code == 0 and "added=12" in out, out
    code, out = run(config, "harvest", "--all")
    assert code == 1
    assert "open: succeeded" in out
    assert "locked: failed" in out and "'AGG_TEST_UNSET_TOKEN', which is not set" in out
    code, out = run(config, "source", "list")
    assert "secret token unset ($AGG_TEST_UNSET_TOKEN)" in out
    monkeypatch.setenv("AGG_TEST_UNSET_TOKEN", "t0ken")
    code, out = run(config, "harvest", "locked")
    assert code == 0 and "added=12" in out, out


def test_a_source_answering_with_a_big_html_error_page_gets_a_short_job_message(
    config: Path,
) -> None:
    """The job message (``aggregator jobs``, the dashboard) keeps the status, its reason and
    the start of the page's text, not 100 kB of the remote server's markup."""
    from aggregator.demo.peers.http_faults import FaultApp

    with PeerServer(FaultApp()) as server:
        for name, kind in (("portal", "oai-pmh"), ("dump", "rdf-dump")):
            url = f"{server.url}error-page/500/{name}"  # a page of 100 kB
            assert run(config, "source", "add", name, "--type", kind, "--url", url)[0] == 0
        code, out = run(config, "harvest", "--all")
        assert code == 1, out
    code, out = run(config, "jobs")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2, out
    for line in lines:
        assert "returned HTTP 500 Internal Server Error: The server encountered an" in line
        assert "<" not in line and "font-family" not in line and "dataLayer" not in line
        message = line.split(" - ", 1)[1]
        assert len(message) < 400, message  # the URL, the status, ~200 characters of text


def test_the_demo_on_a_busy_port_says_so_before_it_harvests(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        demo = ["demo", "--dir", str(tmp_path / "demo"), "--port", str(port)]
        out = subprocess.run(
            [sys.executable, "-m", "aggregator.cli", *demo],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr == (
        f"error: cannot listen on 127.0.0.1:{port}: the port is in use (by another"
        " `aggregator serve`?): stop it or choose another --port\n"
    )
    assert not (tmp_path / "demo").exists()  # nothing made, nothing harvested
