"""`aggregator source probe` and `source add --probe` for CSW sources: GetCapabilities read at
registration, checked to be a CSW 2.0.2, and cached in the source's checkpoint, where the
harvester finds it (it does not read GetCapabilities again)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from aggregator.cli import main
from aggregator.config.sources_file import add_source
from aggregator.demo.peers.csw import CswFaults, CswPeer
from aggregator.demo.peers.gemini_samples import generate_gemini_record
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.csw.client import load_checkpoint

N = 7


@pytest.fixture
def peer() -> CswPeer:
    return CswPeer.of_documents(generate_gemini_record(i) for i in range(N))


@pytest.fixture
def server(peer: CswPeer) -> Iterator[PeerServer]:
    with PeerServer(peer) as running:
        yield running


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "aggregator.toml"
    path.write_text("[http]\nallow_private = true\nretries = 0\ntimeout = 5.0\n", encoding="utf-8")
    return path


def run(config: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["-c", str(config), *args])


def checkpoint(config: Path, name: str) -> str | None:
    shown = run(config, "source", "show", name)
    assert shown.exit_code == 0, shown.output
    value = json.loads(shown.output)["checkpoint"]
    return value if isinstance(value, str) else None


def test_probe_reads_capabilities_and_the_harvest_uses_the_cached_copy(
    config: Path, peer: CswPeer, server: PeerServer
) -> None:
    add_source(config, "csw", {"type": "csw", "url": server.url, "options": {"mode": "full"}})
    probed = run(config, "source", "probe", "csw")
    assert probed.exit_code == 0, probed.output
    lines = probed.output.splitlines()
    assert "service: Local CSW fixture (CSW 2.0.2)" in lines
    assert "operation GetRecords: GET/POST" in lines
    assert "GetRecords binding used: POST" in lines
    assert "MaxRecordDefault: 10" in lines and "page size used: 10" in lines
    assert "Modified queryable: apiso:Modified" in lines
    assert "output schema: http://www.isotc211.org/2005/gmd" in lines
    assert "kept in the checkpoint of csw for its next harvest" in lines
    assert peer.requests["GetCapabilities"] == 1
    since, caps = load_checkpoint(checkpoint(config, "csw"))
    assert since is None and caps is not None
    assert caps.version == "2.0.2" and caps.max_record_default == 10
    assert caps.modified_queryable == "apiso:Modified" and caps.supports("GetRecords", "post")

    harvested = run(config, "harvest", "csw")
    assert harvested.exit_code == 0, harvested.output
    assert peer.requests["GetCapabilities"] == 1  # the harvest took the probe's copy
    since, caps = load_checkpoint(checkpoint(config, "csw"))
    assert since is not None and caps is not None  # the run's since, beside the capabilities

    again = run(config, "source", "probe", "csw")
    assert again.exit_code == 0, again.output
    assert peer.requests["GetCapabilities"] == 2
    assert load_checkpoint(checkpoint(config, "csw"))[0] == since  # a probe keeps the since


def test_probe_without_modified_or_post_says_so(config: Path) -> None:
    faults = CswFaults(bindings=("get",), modified_queryable=False, max_record_default=None)
    peer = CswPeer.of_documents([generate_gemini_record(0)], faults)
    with PeerServer(peer) as server:
        add_source(config, "csw", {"type": "csw", "url": server.url, "options": {"mode": "full"}})
        probed = run(config, "source", "probe", "csw")
    assert probed.exit_code == 0, probed.output
    lines = probed.output.splitlines()
    assert "operation GetRecords: GET" in lines
    assert "GetRecords binding used: GET" in lines
    assert "MaxRecordDefault: not given" in lines and "page size used: 50" in lines
    assert "Modified queryable: none (every full-mode run lists everything)" in lines


def test_add_with_probe_registers_and_caches(config: Path, server: PeerServer) -> None:
    added = run(config, "source", "add", "csw", "--type", "csw", "--url", server.url, "--probe")
    assert added.exit_code == 0, added.output
    assert "service: Local CSW fixture (CSW 2.0.2)" in added.output
    assert f"source csw added to {config}" in added.output
    _, caps = load_checkpoint(checkpoint(config, "csw"))
    assert caps is not None and caps.title == "Local CSW fixture"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_add_with_probe_refuses_an_unreachable_service(config: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/csw"
    added = run(config, "source", "add", "csw", "--type", "csw", "--url", url, "--probe")
    assert added.exit_code == 1, added.output
    assert "error:" in added.output and "127.0.0.1" in added.output
    assert "[sources" not in config.read_text(encoding="utf-8")  # nothing registered


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        (CswFaults(version="3.0.0"), "version '3.0.0'; the csw harvester needs a CSW 2.0.2"),
        (CswFaults(exception_on_capabilities=True), "error:"),
    ],
)
def test_add_with_probe_refuses_what_is_not_a_csw_2_0_2(
    config: Path, faults: CswFaults, message: str
) -> None:
    peer = CswPeer.of_documents([generate_gemini_record(0)], faults)
    with PeerServer(peer) as server:
        added = run(config, "source", "add", "c", "--type", "csw", "--url", server.url, "--probe")
    assert added.exit_code == 1, added.output
    assert message in added.output
    assert "[sources" not in config.read_text(encoding="utf-8")


def test_add_with_probe_refuses_a_document_that_is_not_capabilities(config: Path) -> None:
    from aggregator.demo.peers.oaipmh import OaiPmhPeer

    with PeerServer(OaiPmhPeer()) as server:
        added = run(config, "source", "add", "c", "--type", "csw", "--url", server.url, "--probe")
    assert added.exit_code == 1, added.output
    assert "not a Capabilities document" in added.output
