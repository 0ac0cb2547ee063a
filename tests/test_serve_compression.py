"""Serving details: gzip when the client accepts it (catalogue, streamed OAI-PMH pages, SPARQL
results), and ``Vary: Accept`` on every negotiated answer, 406 included. The app is served as
``aggregator serve`` serves it (``Aggregate.asgi``) by uvicorn on 127.0.0.1."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import requests
import uvicorn

from aggregator.config import load_settings
from aggregator.config.sources_file import add_source
from aggregator.demo.run import CONFIG, start_sources
from aggregator.jobs.pipeline import run_source
from aggregator.net.client import HttpClient
from aggregator.serve.app import create_app
from aggregator.store.records import RecordStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("gzip")
    port = _free_port()
    config = tmp / "aggregator.toml"
    config.write_text(CONFIG.format(config=config, port=port), encoding="utf-8")
    with ExitStack() as stack:
        urls = start_sources(stack)
        add_source(config, "demo-oai", {"type": "oai-pmh", "url": urls["demo-oai"]})
        settings = load_settings(config)
        store = stack.enter_context(RecordStore(settings.store_path, settings.base_iri))
        run_source(settings, store, "demo-oai", http=HttpClient(settings.http))
        aggregate = create_app(store, settings)
        server = uvicorn.Server(
            uvicorn.Config(
                aggregate.asgi, interface="asgi3", host="127.0.0.1", port=port, log_level="warning"
            )
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}/"
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def _raw(url: str, **headers: str) -> requests.Response:
    """The response with its body as sent (not decoded by requests)."""
    resp = requests.get(url, headers=headers, stream=True, timeout=30)
    resp.raw.decode_content = False
    resp._content = resp.raw.read()
    return resp


def _vary(resp: requests.Response) -> set[str]:
    return {v.strip().lower() for v in resp.headers.get("vary", "").split(",") if v.strip()}


@pytest.mark.parametrize(
    ("path", "accept", "starts"),
    [
        ("catalog.ttl", "*/*", b"@prefix"),
        ("oai?verb=ListRecords&metadataPrefix=dcat_ap", "*/*", b"<?xml"),
        (
            "sparql?query=SELECT%20*%20WHERE%20%7B%3Fs%20%3Fp%20%3Fo%7D",
            "application/sparql-results+json",
            b"{",
        ),
    ],
)
def test_gzip_when_accepted(served: str, path: str, accept: str, starts: bytes) -> None:
    plain = _raw(served + path, Accept=accept, **{"Accept-Encoding": "identity"})
    packed = _raw(served + path, Accept=accept, **{"Accept-Encoding": "gzip, br"})
    assert plain.status_code == packed.status_code == 200
    assert "content-encoding" not in plain.headers
    assert plain.content.lstrip().startswith(starts)
    assert packed.headers["content-encoding"] == "gzip"
    assert "accept-encoding" in _vary(packed)
    body = gzip.decompress(packed.content)
    assert body.lstrip().startswith(starts)
    assert len(packed.content) < len(body) / 2
    if path.startswith("sparql"):
        assert "accept" in _vary(packed)  # negotiated: both


def test_small_answers_go_as_they_are(served: str) -> None:
    resp = _raw(served + "catalog", Accept="application/x-nothing", **{"Accept-Encoding": "gzip"})
    assert resp.status_code == 406
    assert "content-encoding" not in resp.headers and b"not acceptable" in resp.content


@pytest.mark.parametrize("path", ["catalog", "sparql", "source/demo-oai", "sparql?query=ASK%7B%7D"])
def test_406_says_vary_accept(served: str, path: str) -> None:
    resp = requests.get(served + path, headers={"Accept": "application/x-nothing"}, timeout=30)
    assert resp.status_code == 406, (path, resp.text)
    assert "accept" in _vary(resp), resp.headers


@pytest.mark.parametrize("path", ["catalog", "sparql", "source/demo-oai"])
def test_negotiated_answers_say_vary_accept(served: str, path: str) -> None:
    resp = requests.get(served + path, headers={"Accept": "text/turtle"}, timeout=30)
    assert resp.status_code == 200, (path, resp.text)
    assert "accept" in _vary(resp), resp.headers
