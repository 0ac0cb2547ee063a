"""A served aggregate for the dashboard tests: the demo sources plus a hostile one, harvested
into a store under tmp, served by a real uvicorn server reading the store as
``aggregator serve`` does, with the scheduler beside it (which takes "harvest now")."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from aggregator.config import Settings, load_settings
from aggregator.config.sources_file import add_source
from aggregator.core.errors import StoreBusyError
from aggregator.demo.peers.rdf_files import RdfFilesApp
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.run import CONFIG, start_sources
from aggregator.jobs.pipeline import run_source
from aggregator.net.client import HttpClient
from aggregator.schedule.service import run_scheduler
from aggregator.serve.app import create_app
from aggregator.serve.dashboard.auth import hash_secret
from aggregator.store.records import RecordStore, StoreNames

PASSWORD = "correct horse battery"
TOKEN = "t0ken-for-scripts"
HOSTILE_TITLE = "<script>alert(1)</script>"
HOSTILE = f"""
@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct: <http://purl.org/dc/terms/> .
@prefix gsp: <http://www.opengis.net/ont/geosparql#> .
<https://hostile.example.org/catalog> a dcat:Catalog ;
  dct:title "Hostile catalogue" ; dct:description "Titles that try to run code." ;
  dcat:dataset <https://hostile.example.org/ds/xss> .
<https://hostile.example.org/ds/xss> a dcat:Dataset ;
  dct:title "{HOSTILE_TITLE}"@en ;
  dct:description "Harvested text is hostile: <img src=x onerror=alert(2)> & more."@en ;
  dcat:keyword "injection" ;
  dcat:theme <http://publications.europa.eu/resource/authority/data-theme/ENVI> ;
  dct:spatial [ a dct:Location ;
    dcat:bbox "POLYGON((-5.5 49.9, 1.8 49.9, 1.8 55.8, -5.5 55.8, -5.5 49.9))"^^gsp:wktLiteral ] ;
  dcat:distribution <https://hostile.example.org/ds/xss/csv> .
<https://hostile.example.org/ds/xss/csv> a dcat:Distribution ;
  dcat:accessURL <javascript:alert(3)> ;
  dct:format <http://publications.europa.eu/resource/authority/file-type/CSV> ;
  dct:license <http://publications.europa.eu/resource/authority/licence/CC_BY_4_0> .
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Site:
    url: str
    config: Path
    settings: Settings
    sources: dict[str, str]  # name -> URL of its peer


@contextmanager
def served_site(
    tmp: Path, *, public: bool = True, scheduler: bool = True, serve_extra: str = ""
) -> Iterator[Site]:
    """``scheduler=False``: served like ``aggregator serve --no-scheduler`` (nothing takes
    "harvest now"); ``serve_extra``: more lines for the ``[serve]`` table."""
    port = free_port()
    config = tmp / "aggregator.toml"
    text = CONFIG.format(config=config, port=port)
    config.write_text(text, encoding="utf-8")
    with ExitStack() as stack:
        urls = start_sources(stack)
        hostile = RdfFilesApp()
        hostile.put("/hostile.ttl", HOSTILE.encode(), "text/turtle")
        urls["hostile"] = f"{stack.enter_context(PeerServer(hostile)).url}hostile.ttl"
        # manual: the scheduler below runs only what "harvest now" asks for
        manual = {"schedule": "manual"}
        add_source(config, "demo-oai", {"type": "oai-pmh", "url": urls["demo-oai"], **manual})
        # strict: the dump's dataset with a bad byte size is rejected (the rejection pages'
        # subject); by default it would be stored flagged
        add_source(
            config,
            "demo-dump",
            {"type": "rdf-dump", "url": urls["demo-dump"], "strict": True, **manual},
        )
        add_source(
            config,
            "hostile",
            {"type": "rdf-dump", "url": urls["hostile"], "lenient": True, **manual},
        )
        serve = (
            "\n[serve]\n"
            f"dashboard_public = {'true' if public else 'false'}\n"
            f'admin_password_hash = "{hash_secret(PASSWORD)}"\n'
            f'admin_token_hash = "{hash_secret(TOKEN)}"\n'
            f"{serve_extra}"
        )
        body = config.read_text(encoding="utf-8")
        if "[serve]" in body:  # the demo's table: add our keys to it
            body = body.replace("[serve]\n", serve.lstrip("\n"), 1)
        else:
            body += serve
        config.write_text(body, encoding="utf-8")
        settings = load_settings(config)
        with RecordStore(settings.store_path, settings.base_iri) as store:
            for name in settings.sources:
                run_source(settings, store, name, http=HttpClient(settings.http))
        with serving(settings, port, scheduler=scheduler):
            yield Site(f"http://127.0.0.1:{port}/", config, settings, urls)


@contextmanager
def serving(settings: Settings, port: int, *, scheduler: bool = True) -> Iterator[None]:
    """The app on 127.0.0.1:port under uvicorn, reading the store as a serving process of
    ``aggregator serve`` does, with the scheduler beside it as ``serve`` runs it. Serving the
    same store twice (``scheduler=False`` the second time) is two serving processes."""
    aggregate = create_app(StoreNames(settings.store_path, settings.base_iri), settings)
    server = uvicorn.Server(
        uvicorn.Config(
            aggregate.asgi,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            interface="asgi3",
            lifespan="on",
            proxy_headers=False,  # as the serving processes: the client is who connected
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    stop = threading.Event()
    scheduling = threading.Thread(
        target=run_scheduler, args=(settings, stop, 0.2), name="scheduler", daemon=True
    )
    if scheduler:
        scheduling.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield
    finally:
        stop.set()
        if scheduler:
            scheduling.join(timeout=30)
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def admin_site(tmp: Path, serve: str = "", *, admin: bool = True) -> Iterator[Site]:
    """The app with an administrator (password and token; none without ``admin``) over an
    empty store: what the tests of logging in need, without harvesting anything first.
    ``serve``: more lines of ``[serve]``."""
    port = free_port()
    config = tmp / "aggregator.toml"
    secrets = (
        f'admin_password_hash = "{hash_secret(PASSWORD)}"\n'
        f'admin_token_hash = "{hash_secret(TOKEN)}"\n'
        if admin
        else ""
    )
    config.write_text(
        "[store]\n"
        'path = "data"\n'
        f'base_iri = "http://127.0.0.1:{port}/"\n'
        f"\n[serve]\n{secrets}{serve}\n",
        encoding="utf-8",
    )
    settings = load_settings(config)
    RecordStore(settings.store_path, settings.base_iri).close()
    with serving(settings, port):
        yield Site(f"http://127.0.0.1:{port}/", config, settings, {})


def open_writer(settings: Settings, patience: float = 120) -> RecordStore:
    """The store opened as its writer by a test, waiting while the site's scheduler holds the
    writer lock for a moment (its upkeep, e.g. the first prune), as an operator would."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return RecordStore(settings.store_path, settings.base_iri)
        except StoreBusyError:
            assert time.monotonic() < deadline, "the scheduler kept the store"
            time.sleep(0.2)
