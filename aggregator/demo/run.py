"""``aggregator demo``: bundled sources on 127.0.0.1, harvested into a fresh store, then served
with the scheduler, as ``aggregator serve`` serves.

Nothing here is special to the demo except the data: the sources are the same peer servers the
test suite uses, the harvest goes through :func:`aggregator.jobs.pipeline.run_source`, and the
configuration is an ordinary ``aggregator.toml`` written into the demo directory, so the
operator can keep using the directory with the other commands afterwards: while the demo
serves, its scheduler takes ``schedule now`` and the jobs ``aggregator harvest`` hands it.
The first harvest counts as each source's last run, so the scheduler next harvests a source
when its schedule says, not at once.
"""

from __future__ import annotations

import os
import shutil
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from aggregator.config import load_settings
from aggregator.config.sources_file import add_source
from aggregator.core.errors import ConfigError
from aggregator.demo.peers.ckan import CkanPeer, MemoryCatalogue
from aggregator.demo.peers.ckan_data import load_bundled_packages
from aggregator.demo.peers.csw import CswPeer
from aggregator.demo.peers.gemini_samples import bundled_gemini_records
from aggregator.demo.peers.mdr import MdrService
from aggregator.demo.peers.mdr_pages import iso, load_sample_pages
from aggregator.demo.peers.metashare import bundled_node
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.ogc_records import OgcRecordsPeer, RecordCollection
from aggregator.demo.peers.ogc_records_data import load_bundled_records
from aggregator.demo.peers.rdf_files import RdfFilesApp
from aggregator.demo.peers.sample_data import bundled_dump_path, load_bundled_oai_records
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.waf import WafApp
from aggregator.jobs.pipeline import RunOptions, exit_code, run_source
from aggregator.net.client import HttpClient
from aggregator.schedule.status import note_outside_job
from aggregator.store.names import StoreNames
from aggregator.store.records import RecordStore

MARKER = ".aggregator-demo"
MDR_USER, MDR_PASSWORD_ENV, MDR_PASSWORD = "demomdr", "AGGREGATOR_DEMO_MDR_PASSWORD", "demo-only"
# the demo META-SHARE node's synchronisation user: credentials come from the environment
METASHARE_ENV = ("DEMO_METASHARE_USER", "DEMO_METASHARE_PASSWORD")
METASHARE_LOGIN = ("demo-sync", "demo-sync-password")

CONFIG = """\
# Written by `aggregator demo`. An ordinary configuration: try
#   aggregator -c {config} jobs
#   aggregator -c {config} records --source demo-oai
#   AGGREGATOR_DEMO_MDR_PASSWORD=demo-only aggregator -c {config} mdc-monitor --once
[store]
path = "data"
base_iri = "http://127.0.0.1:{port}/"

[http]
# The demo's sources run on 127.0.0.1; the SSRF guard refuses such targets unless told not to.
allow_private = true
timeout = 30

[harvest]
workers = 0
"""


def _fresh_dir(directory: Path) -> None:
    if directory.exists():
        if not (directory / MARKER).exists() and any(directory.iterdir()):
            raise ConfigError(
                f"{directory} exists and was not made by the demo; choose another --dir"
            )
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    (directory / MARKER).write_text("made by aggregator demo; emptied on the next run\n")


def start_sources(stack: ExitStack) -> dict[str, str]:
    """Start the bundled peers; return source name -> URL."""
    items = MemoryItems()
    for identifier, datestamp, payload in load_bundled_oai_records():
        items.put(OaiItem(identifier, datestamp, ("demo",), False, payload))
    oai = stack.enter_context(PeerServer(OaiPmhPeer(items, page_size=5)))
    files = RdfFilesApp()
    files.put_file("/catalog.ttl", bundled_dump_path(), "text/turtle")
    dump = stack.enter_context(PeerServer(files))
    ckan = stack.enter_context(PeerServer(CkanPeer(MemoryCatalogue(load_bundled_packages()))))
    records = RecordCollection("metadata", "Demo records", features=load_bundled_records())
    ogc = stack.enter_context(PeerServer(OgcRecordsPeer([records])))
    # the MDR service's sample pages, published over the last hours
    pages = load_sample_pages()
    now = datetime.now(UTC).replace(microsecond=0)
    for i, page in enumerate(pages):
        page.published = now - timedelta(hours=len(pages) - i)
        page.metadata["datePublished"] = iso(page.published)
    mdr = stack.enter_context(PeerServer(MdrService({MDR_USER: MDR_PASSWORD}, pages)))
    # ISO 19139 / GEMINI: the bundled records from a CSW catalogue and from a WAF
    gemini = bundled_gemini_records()
    csw = stack.enter_context(PeerServer(CswPeer.of_documents(doc for _, doc in gemini)))
    folder = WafApp()
    for name, doc in gemini:
        folder.put(name, doc, datetime(2026, 3, 14, 9, 30, tzinfo=UTC))
    waf = stack.enter_context(PeerServer(folder))
    node, _ = bundled_node()  # one LR of each META-SHARE resource type
    node.users = {METASHARE_LOGIN[0]: METASHARE_LOGIN[1]}
    node.sync_users = {METASHARE_LOGIN[0]}
    meta_share = stack.enter_context(PeerServer(node))
    return {
        "demo-oai": f"{oai.url}oai",
        "demo-dump": f"{dump.url}catalog.ttl",
        "demo-mdr": f"{mdr.url}mdr/services/MdrService",
        "demo-csw": f"{csw.url}csw",
        "demo-waf": f"{waf.url}waf/",
        "demo-meta-share": meta_share.url.rstrip("/"),
        "demo-ckan": ckan.url,
        "demo-records": ogc.url,
    }


def run_demo(directory: Path, *, port: int = 8000, serve: bool = True) -> int:
    from aggregator.serve.supervisor import bind_listener

    # the port first: a busy one is said in one line before anything is harvested
    sock = bind_listener("127.0.0.1", port, listen=False) if serve else None
    directory = directory.resolve()
    _fresh_dir(directory)
    config = directory / "aggregator.toml"
    config.write_text(CONFIG.format(config=config, port=port), encoding="utf-8")
    worst = 0
    with ExitStack() as stack:
        urls = start_sources(stack)
        add_source(
            config,
            "demo-oai",
            {
                "type": "oai-pmh",
                "url": urls["demo-oai"],
                "publisher": "Demo OAI-PMH portal",
                "options": {"metadata_prefix": "dcat_ap"},
            },
        )
        add_source(
            config,
            "demo-dump",
            {"type": "rdf-dump", "url": urls["demo-dump"], "publisher": "Demo open data portal"},
        )
        os.environ.setdefault(MDR_PASSWORD_ENV, MDR_PASSWORD)  # the demo service's own
        since = iso(datetime.now(UTC) - timedelta(days=1))
        add_source(
            config,
            "demo-mdr",
            {
                "type": "mdr",
                "url": urls["demo-mdr"],
                "format": "mdr",
                "publisher": "Demo State Portal (MDR service)",
                "validation": [{"validator": "mdr-metadata"}, "shacl"],
                "secrets": {"password": MDR_PASSWORD_ENV},
                "options": {"username": MDR_USER, "since": since, "chunk_minutes": 60},
            },
        )
        add_source(
            config,
            "demo-csw",
            {
                "type": "csw",
                "url": urls["demo-csw"],
                "format": "iso19139",
                "publisher": "Riverside Environment Agency",
                "options": {"mode": "identifiers"},
            },
        )
        add_source(
            config,
            "demo-waf",
            {"type": "waf", "url": urls["demo-waf"], "format": "iso19139"},
        )
        for env_name, value in zip(METASHARE_ENV, METASHARE_LOGIN, strict=True):
            os.environ.setdefault(env_name, value)
        add_source(
            config,
            "demo-meta-share",
            {
                "type": "meta-share",
                "url": urls["demo-meta-share"],
                "publisher": "Demo META-SHARE node",
                "secrets": {"username": METASHARE_ENV[0], "password": METASHARE_ENV[1]},
                "validation": ["meta-share", "shacl"],
            },
        )
        add_source(config, "demo-ckan", {"type": "ckan", "url": urls["demo-ckan"]})
        add_source(
            config,
            "demo-records",
            {
                "type": "ogc-records",
                "url": urls["demo-records"],
                "options": {"collection": "metadata"},
            },
        )
        settings = load_settings(config)
        click.echo(f"demo directory: {directory}")
        for name, url in urls.items():
            click.echo(f"source {name}: {url}")
        http = HttpClient(settings.http)
        from aggregator.jobs.notify import attach_default

        attach_default(settings)  # the MDR source's events (notifyWebSiteAdmin for a bad page)
        with RecordStore(settings.store_path, settings.base_iri) as store:
            for name in settings.sources:
                job = run_source(settings, store, name, RunOptions(), http=http)
                counts = " ".join(f"{k}={v}" for k, v in sorted(job.counters.items()) if v)
                click.echo(f"harvested {name}: job {job.id} {job.status} {counts} {job.message}")
                worst = max(worst, 1 if exit_code(job) == 1 else 0)  # rejections: the show
                full = not job.listing.get("incremental")
                note_outside_job(settings, name, job.status, job.id, full, datetime.now(UTC))
            totals = store.db.counts_by_status()
        click.echo(f"store: {totals}")
        if sock is None:
            return worst
        from aggregator.serve.app import run_server

        base = f"http://127.0.0.1:{port}/"
        click.echo(f"serving on {base}  (Ctrl-C to stop)")
        click.echo(f"  overview:        {base}")
        click.echo(f"  catalogue:       {base}catalog.html  ({base}catalog.ttl)")
        click.echo(f"  SPARQL endpoint: {base}sparql")
        click.echo(f"  OAI-PMH:         {base}oai?verb=ListRecords&metadataPrefix=dcat_ap")
        click.echo(f"  ISO 19139:       {base}oai?verb=ListRecords&metadataPrefix=iso19139")
        click.echo(f"  schedule:        aggregator -c {config} schedule status")
        click.echo(
            f"  harvest again meanwhile (the demo's scheduler runs the jobs):"
            f" aggregator -c {config} harvest --all"
        )
        names = StoreNames(settings.store_path, settings.base_iri)
        run_server(names, settings, "127.0.0.1", port, scheduler=True, sock=sock)
    return worst
