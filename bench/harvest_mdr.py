"""MDR replication benchmark (not a test): N generated pages published over the last days on
the local MDR service (in its own process, like a remote server), replicated into a fresh
on-disk store through the real pipeline: zeep with the WS-Security digest, the mdr-metadata
validator, the mdr mapper, SHACL, the journaled record store.

    python bench/harvest_mdr.py --pages 20000
    python bench/harvest_mdr.py --pages 2000 --chunk-minutes 30 --workers 0

Prints pages/s of the first replication (every window from the start), then publishes
``--new`` pages and times a second run, which fetches only the window since the first.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aggregator.config import (
    HarvestSettings,
    HttpSettings,
    Secret,
    Settings,
    SourceConfig,
    ValidationStep,
)
from aggregator.jobs.pipeline import run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

USER, PASSWORD = "benchmdr", "bench-password"


def _serve(count: int, days: float, port_q: Any, commands: Any) -> None:
    """The service process: ``count`` pages published evenly over the last ``days``; then it
    obeys ("publish", k) commands (k new pages, published now) until ("stop", 0)."""
    from aggregator.demo.peers.mdr import MdrService
    from aggregator.demo.peers.mdr_pages import generate_page
    from aggregator.demo.peers.server import PeerServer

    now = datetime.now(UTC)
    step = timedelta(days=days) / max(count, 1)
    start = now - timedelta(days=days) - timedelta(minutes=1)
    pages = [generate_page(i, start + i * step) for i in range(count)]
    service = MdrService({USER: PASSWORD}, pages)
    with PeerServer(service) as server:
        port_q.put(server.port)
        while True:
            command, k = commands.get()
            if command == "stop":
                break
            at = datetime.now(UTC) - timedelta(seconds=1)
            for i in range(count, count + k):
                service.publish(generate_page(i, at))
            count += k
            port_q.put(("published", k))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--days", type=float, default=7.0, help="published over the last days")
    parser.add_argument("--chunk-minutes", type=int, default=60, help="ChunkTimeDuration")
    parser.add_argument("--new", type=int, default=200, help="pages published before run 2")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: tmp)")
    args = parser.parse_args()

    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-mdr-"))
    shutil.rmtree(work / "store", ignore_errors=True)
    ctx = mp.get_context("spawn")
    port_q, commands = ctx.Queue(), ctx.Queue()
    server = ctx.Process(target=_serve, args=(args.pages, args.days, port_q, commands))
    server.start()
    try:
        port = port_q.get(timeout=600)
        since = datetime.now(UTC) - timedelta(days=args.days, minutes=2)
        source = SourceConfig(
            name="state-portal",
            type="mdr",
            url=f"http://127.0.0.1:{port}/mdr/services/MdrService",
            format="mdr",
            validation=(ValidationStep("mdr-metadata"), ValidationStep("shacl")),
            options={
                "username": USER,
                "since": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "chunk_minutes": args.chunk_minutes,
                # the service shares our clock: no margin, so that the second run finds
                # the pages published just before it (figures comparable with earlier runs)
                "end_margin_seconds": 0,
            },
            secrets={"password": Secret("BENCH_MDR_PASSWORD", PASSWORD)},
        )
        settings = Settings(
            config_path=None,
            store_path=work / "store",
            base_iri="http://127.0.0.1:8000/",
            http=HttpSettings(allow_private=True),
            harvest=HarvestSettings(workers=args.workers),
            sources={source.name: source},
        )
        figures: dict[str, Any] = {"pages": args.pages, "chunk_minutes": args.chunk_minutes}
        with RecordStore(settings.store_path, settings.base_iri) as store:
            began = time.perf_counter()
            first = run_source(settings, store, source.name, http=HttpClient(settings.http))
            took = time.perf_counter() - began
            assert first.status == "succeeded", first.message
            added = first.counters.get("added", 0)
            figures["first"] = {
                "seconds": round(took, 2),
                "pages/s": round(added / took, 1),
                "added": added,
                "rejected": first.counters.get("rejected", 0),
                "windows": first.listing.get("pages"),
                "notes": first.listing.get("notes"),
            }
            print(f"first replication: {added} pages in {took:.1f} s = {added / took:.0f} pages/s")
            # the new pages are stamped a second before they are published: wait until that
            # falls after the first run's window end, or a fast first run would hide them
            time.sleep(1.1)
            commands.put(("publish", args.new))
            _, published = port_q.get(timeout=600)
            began = time.perf_counter()
            second = run_source(settings, store, source.name, http=HttpClient(settings.http))
            took = time.perf_counter() - began
            assert second.status == "succeeded", second.message
            figures["second"] = {
                "seconds": round(took, 2),
                "added": second.counters.get("added", 0),
                "published": published,
                "window_from": second.listing.get("checkpoint_used"),
                "windows": second.listing.get("pages"),
            }
            print(
                f"second run: {figures['second']['added']} new pages in {took:.2f} s,"
                f" {figures['second']['windows']} window(s) from {figures['second']['window_from']}"
            )
        print(json.dumps(figures, indent=1))
    finally:
        commands.put(("stop", 0))
        server.join(timeout=30)
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
