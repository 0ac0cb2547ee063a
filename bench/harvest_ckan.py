"""End-to-end CKAN harvest benchmark (not a test): N generated CKAN packages served by the local
CKAN peer (in its own process, like a remote portal), harvested into a fresh on-disk store
through the real pipeline: the ckan harvester (package_search, paged by metadata_modified keys),
the ckan mapper, the categorisation, SHACL, the journaled record store.

    python bench/harvest_ckan.py --records 50000
    python bench/harvest_ckan.py --records 20000 --workers 1     # beside harvest_oaipmh.py

Prints records/s for the first harvest, for a re-harvest with nothing changed (a full
listing whose packages the store holds at their metadata_modified: listed, not mapped), and
for a forced re-harvest (mapped and hashed, found unchanged), the peak RSS of the harvesting
process and its RSS at each quarter of the run (flat in N when the listing streams). The peer
makes its packages before the clock starts (``--peer-generates``: while serving).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import resource
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from harvest_oaipmh import RssSampler, _cpu, _proc_stats, disk_usage, rss_mb

from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore


def _serve(count: int, prebuild: bool, port_q: Any, stop: Any) -> None:
    """The peer process: a CKAN-like portal of ``count`` generated packages."""
    from aggregator.demo.peers.ckan import CkanPeer, GeneratedCatalogue
    from aggregator.demo.peers.ckan_data import generate_package
    from aggregator.demo.peers.server import PeerServer

    make = generate_package
    if prebuild:
        make = [generate_package(i) for i in range(count)].__getitem__
    before = resource.getrusage(resource.RUSAGE_SELF)
    with PeerServer(CkanPeer(GeneratedCatalogue(count, make))) as server:
        port_q.put(server.port)
        stop.wait()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    port_q.put(usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--workers", type=int, default=1, help="mapping/validation processes")
    ap.add_argument("--rows", type=int, default=1000, help="packages per package_search page")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--dir", type=Path, default=None, help="store directory (default: temp)")
    ap.add_argument("--skip-forced", action="store_true", help="skip the forced re-harvest")
    ap.add_argument("--peer-generates", action="store_true", help="make packages while serving")
    args = ap.parse_args()

    ctx = mp.get_context("spawn")
    port_q = ctx.Queue()
    stop = ctx.Event()
    peer = ctx.Process(target=_serve, args=(args.records, not args.peer_generates, port_q, stop))
    peer.start()
    port = port_q.get(timeout=900)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="agg-bench-ckan-"))
    source = SourceConfig(
        name="bench",
        type="ckan",
        url=f"http://127.0.0.1:{port}/",
        format="ckan",
        options={"rows": args.rows},
    )
    settings = Settings(
        config_path=None,
        store_path=workdir / "store",
        base_iri="http://127.0.0.1:8000/",
        http=HttpSettings(allow_private=True, timeout=120),
        harvest=HarvestSettings(workers=args.workers, batch_size=args.batch_size),
        sources={"bench": source},
    )
    http = HttpClient(settings.http)
    results: dict[str, Any] = {"records": args.records, "workers": args.workers}
    sampler = RssSampler()
    sampler.start()
    try:
        with RecordStore(settings.store_path, settings.base_iri) as store:
            runs = [("first", RunOptions(full=True)), ("unchanged", RunOptions(full=True))]
            if not args.skip_forced:
                runs.append(("forced", RunOptions(full=True, force=True)))
            worker_peak = 0
            for name, opts in runs:
                pool = ProcessPoolExecutor(
                    max_workers=max(args.workers, 1), mp_context=mp.get_context("forkserver")
                )
                executor = pool if args.workers > 0 else None
                cpu0 = _cpu()
                start_sample = len(sampler.samples)
                t0 = time.perf_counter()
                job = run_source(settings, store, "bench", opts, http=http, executor=executor)
                dt = time.perf_counter() - t0
                own = _cpu()[0] - cpu0[0]
                worker_cpu = 0.0
                for proc in list(getattr(pool, "_processes", {}).values()):
                    w_cpu, w_peak = _proc_stats(proc.pid)
                    worker_cpu += w_cpu
                    worker_peak = max(worker_peak, w_peak)
                pool.shutdown()
                counts = {k: v for k, v in job.counters.items() if v}
                samples = [s[1] for s in sampler.samples[start_sample:]]
                quarter = max(1, len(samples) // 4)
                results[name] = {
                    "seconds": round(dt, 1),
                    "records_per_s": round(args.records / dt),
                    "status": job.status,
                    "counters": counts,
                    "cpu_us_per_record": {
                        "harvester": round(own / args.records * 1e6),
                        "workers": round(worker_cpu / args.records * 1e6),
                    },
                    "rss_mb_at_quarters": samples[quarter - 1 :: quarter][:4],
                }
                print(
                    f"{name:10} {args.records / dt:8.0f} records/s  {dt:7.1f} s  {job.status}"
                    f" {counts}  RSS at quarters {results[name]['rss_mb_at_quarters']} MB"
                )
                if name == "first":
                    t1 = time.perf_counter()
                    store.graphs.store.optimize()  # type: ignore[attr-defined]
                    results["compaction_seconds"] = round(time.perf_counter() - t1, 1)
        own, _ = rss_mb()
        sampler.stop.set()
        results["peak_rss_mb"] = own
        results["peak_rss_workers_mb"] = worker_peak
        du, _pinned = disk_usage(workdir / "store")
        results["store_mb"] = du // 2**20
        print(f"peak RSS: harvester {own} MB, workers {worker_peak} MB; store {du // 2**20} MB")
        stop.set()
        with contextlib.suppress(Exception):
            results["peer_cpu_s"] = round(port_q.get(timeout=10), 1)
        print(json.dumps(results))
    finally:
        stop.set()
        peer.join(timeout=10)
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
