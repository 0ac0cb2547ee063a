"""What re-harvests that change every record leave on disk, and what the store's upkeep gives
back (not a test): N generated DCAT-AP records served by the local OAI-PMH peer, harvested,
then changed and re-harvested twice (every graph replaced), then ``store optimize``.

    python bench/store_churn.py --records 3000

Prints after each job the graph store's and the whole store's size, and the job's upkeep facts
(``graph_logs_released``: RocksDB's write-ahead logs dropped by reopening the graph store;
``stale_snapshot_released``: a snapshot holding compacted files alone replaced).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.optimize import graph_logs, optimize_store
from aggregator.store.records import RecordStore
from aggregator.store.stats import disk_total

T0 = datetime(2024, 3, 1, tzinfo=UTC)
UPKEEP = ("optimized", "graph_logs_released", "stale_snapshot_released")


def item(i: int, day: int) -> OaiItem:
    """Record ``i`` as the source has it on ``day``: other content every day."""
    content = generate_dataset(i + 100_000 * day)
    return OaiItem(generate_identifier(i), T0 + timedelta(days=day), (), False, content)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--days", type=int, default=3, help="harvests (the first adds, then changes)")
    ap.add_argument("--dir", type=Path, default=None, help="store directory (default: temp)")
    args = ap.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="agg-churn-"))
    root = workdir / "store"
    items = MemoryItems()
    items.put(*(item(i, 0) for i in range(args.records)))
    mb = 2**20
    try:
        with PeerServer(OaiPmhPeer(items, page_size=100)) as server:
            settings = Settings(
                config_path=None,
                store_path=root,
                base_iri="http://127.0.0.1:8000/",
                http=HttpSettings(allow_private=True),
                harvest=HarvestSettings(workers=1, optimize_after=0),  # no compaction by jobs
                sources={"p": SourceConfig(name="p", type="oai-pmh", url=f"{server.url}oai")},
            )
            http = HttpClient(settings.http)
            with RecordStore(root, settings.base_iri) as store:
                for day in range(args.days):
                    if day:
                        items.put(*(item(i, day) for i in range(args.records)))
                    job = run_source(settings, store, "p", RunOptions(full=True), http=http)
                    upkeep = {k: v for k, v in job.listing.items() if k in UPKEEP}
                    counts = {k: v for k, v in job.counters.items() if v}
                    print(
                        f"day {day}: {counts}; graph store {disk_total(root / 'graphs') // mb} MB"
                        f" (write-ahead logs {graph_logs(store) // mb} MB),"
                        f" store {disk_total(root) // mb} MB; upkeep {upkeep}"
                    )
                started = time.perf_counter()
                report = optimize_store(store)
                print(
                    f"store optimize {time.perf_counter() - started:.1f} s: graph store"
                    f" {disk_total(root / 'graphs') // mb} MB, store {disk_total(root) // mb} MB;"
                    f" {report.steps}"
                )
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
