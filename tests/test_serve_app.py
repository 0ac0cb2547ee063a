"""The assembled app, as `aggregator serve` and the demo run it: every published route answers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import requests
import uvicorn
from SPARQLWrapper import JSON, SPARQLWrapper

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
    tmp: Path = tmp_path_factory.mktemp("app")
    port = _free_port()
    config = tmp / "aggregator.toml"
    config.write_text(CONFIG.format(config=config, port=port), encoding="utf-8")
    with ExitStack() as stack:
        urls = start_sources(stack)
        add_source(config, "demo-oai", {"type": "oai-pmh", "url": urls["demo-oai"]})
        add_source(config, "demo-dump", {"type": "rdf-dump", "url": urls["demo-dump"]})
        settings = load_settings(config)
        store = stack.enter_context(RecordStore(settings.store_path, settings.base_iri))
        for name in settings.sources:
            run_source(settings, store, name, http=HttpClient(settings.http))
        aggregate = create_app(store, settings)
        server = uvicorn.Server(
            uvicorn.Config(aggregate.app, host="127.0.0.1", port=port, log_level="warning")
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


def test_overview_links_every_service(served: str) -> None:
    page = requests.get(served, timeout=10)
    assert page.status_code == 200
    for link in ("catalog.html", "sparql", "oai?verb=Identify", "jobs/1"):
        assert link in page.text


def test_every_service_answers_on_the_harvested_data(served: str) -> None:
    sparql = SPARQLWrapper(f"{served}sparql")
    sparql.setQuery("SELECT (COUNT(?d) AS ?n) WHERE { ?d a <http://www.w3.org/ns/dcat#Dataset> }")
    sparql.setReturnFormat(JSON)
    result = sparql.query().convert()
    assert int(result["results"]["bindings"][0]["n"]["value"]) >= 15  # type: ignore[index,call-overload]
    oai = requests.get(
        f"{served}oai", params={"verb": "ListIdentifiers", "metadataPrefix": "dcat_ap"}, timeout=10
    )
    assert oai.status_code == 200 and "<identifier>" in oai.text
    cat = requests.get(f"{served}catalog.ttl", timeout=10)
    assert cat.status_code == 200 and "dcat:Catalog" in cat.text
    src = requests.get(f"{served}source/demo-oai", headers={"Accept": "text/turtle"}, timeout=10)
    assert src.status_code == 200 and "activeRecords" in src.text
    job = requests.get(f"{served}job/1", headers={"Accept": "application/n-triples"}, timeout=10)
    assert job.status_code == 200 and "http://www.w3.org/ns/prov#Activity" in job.text
    assert requests.get(f"{served}job/999", timeout=10).status_code == 404
    assert requests.get(f"{served}source/nope", timeout=10).status_code == 404
