"""CSW harvest benchmark (not a test): N generated GEMINI records served by the local CSW
fixture (in its own process, like a remote server), harvested with the ``csw`` harvester.

    python bench/harvest_csw.py --records 20000
    python bench/harvest_csw.py --records 20000 --listing-only

End to end (the default, when an ``iso19139`` mapper is registered): the records go through
the real pipeline into a fresh on-disk store: the chain a configured iso19139 source gets
(the ``gemini`` profile: ISO 19139 XSD, Table A.1 and GEMINI 2.3 Schematron; then SHACL;
``--profile none`` for SHACL only), the mapper, the journaled record store. It prints
records/s for the first harvest and for a re-harvest with nothing changed (every record
listed, skipped by its metadata date before mapping, its payload not even serialised), the
CPU per record (the harvesting process and, read from /proc, its mapping workers) and the
peak RSS of the harvesting process, sampled at each quarter of the runs. ``--listing-only``
measures the harvester alone (pages fetched, parsed, records
serialised), which is also what runs when no ``iso19139`` mapper is installed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import descendants, process_cpu, process_table

from aggregator.config import (
    HarvestSettings,
    HttpSettings,
    Settings,
    SourceConfig,
    ValidationSettings,
    ValidationStep,
)
from aggregator.config.profiles import profile_steps
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.csw import CswHarvester
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.plugin import mappers
from aggregator.store.records import RecordStore


def _serve(count: int, port_q: Any, stop: Any) -> None:
    """The peer process: every record made (and parsed once for its facts) before the clock
    starts, as a real catalogue has them stored."""
    from aggregator.demo.peers.csw import CswFaults, CswPeer, GeneratedCatalogue
    from aggregator.demo.peers.server import PeerServer

    items = list(GeneratedCatalogue(count))
    size = sum(len(i.payload) for i in items) // max(count, 1)
    with PeerServer(CswPeer(items, CswFaults(max_record_default=100))) as server:
        port_q.put((server.port, size))
        stop.wait()


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the mapping workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class WorkerCpu(threading.Thread):
    """CPU seconds of this process's descendants (the forkserver's mapping workers, which
    RUSAGE_CHILDREN never sees: their parent is the forkserver), the peer's excepted: the
    last value seen of each, read every 0.1 s (a worker's final 0.1 s may be missed). The
    process tree is walked twice a second and only the known descendants are read between
    (walking all of /proc ten times a second cost the harvesting process ~120 us/record)."""

    def __init__(self, exclude: int) -> None:
        super().__init__(daemon=True)
        self.exclude = exclude
        self.seen: dict[int, float] = {}
        self.known: set[int] = set()
        self.walked = 0.0
        self.stop = threading.Event()

    def _walk(self) -> None:
        self.known = descendants(os.getpid(), process_table(), {self.exclude})
        self.walked = time.monotonic()

    def sample(self, walk: bool = False) -> None:
        if walk or time.monotonic() - self.walked > 0.5:
            self._walk()
        for pid in list(self.known):
            cpu = process_cpu(pid)
            if cpu:
                self.seen[pid] = cpu

    def total(self) -> float:
        self.sample(walk=True)
        return sum(self.seen.values())

    def run(self) -> None:
        while not self.stop.wait(0.1):
            self.sample()


def rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def current_rss_mb() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() // 2**20


class RssSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.samples.append(current_rss_mb())


def listing_only(source: SourceConfig, http: HttpClient, held: bool) -> tuple[int, float]:
    """The harvester alone: every record yielded (with its payload, or ``held``: listed as
    already stored)."""
    harvester = CswHarvester(source, http.session(source))
    listing = Listing(incremental=False)
    up_to_date = (lambda listed: frozenset(i for i, _ in listed)) if held else None
    request = HarvestRequest(full=True, checkpoint=None, up_to_date=up_to_date)
    t0 = time.perf_counter()
    count = sum(1 for _ in harvester.list_records(request, listing))
    if not listing.complete:
        raise SystemExit(f"listing not complete: {listing.truncated_reason}")
    return count, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=1, help="mapping/validation processes")
    ap.add_argument("--page-size", type=int, default=100)
    ap.add_argument("--binding", choices=("get", "post"), default="post")
    ap.add_argument("--dir", type=Path, default=None, help="store directory (default: temp)")
    ap.add_argument("--listing-only", action="store_true", help="the harvester alone")
    ap.add_argument("--profile", choices=("gemini", "iso19139", "none"), default="gemini")
    args = ap.parse_args()

    ctx = mp.get_context("spawn")
    port_q = ctx.Queue()
    stop = ctx.Event()
    peer = ctx.Process(target=_serve, args=(args.records, port_q, stop))
    peer.start()
    port, size = port_q.get(timeout=1200)
    source = SourceConfig(
        name="bench",
        type="csw",
        url=f"http://127.0.0.1:{port}/csw",
        format="iso19139",
        options={"mode": "full", "page_size": args.page_size, "binding": args.binding},
        validation=(
            *profile_steps(args.profile, ValidationSettings()),
            ValidationStep("shacl"),
        ),
    )
    http = HttpClient(HttpSettings(allow_private=True, timeout=120))
    end_to_end = not args.listing_only and "iso19139" in mappers.names()
    results: dict[str, Any] = {
        "records": args.records,
        "record_bytes": size,
        "binding": args.binding,
        "end_to_end": end_to_end,
        "profile": args.profile,
    }
    if not end_to_end and not args.listing_only:
        print("no iso19139 mapper installed: measuring the harvester alone")
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="agg-bench-csw-"))
    sampler = RssSampler()
    sampler.start()
    workers_cpu = WorkerCpu(exclude=peer.pid or 0)
    workers_cpu.start()
    try:
        runs = [("first", False), ("unchanged", True)]
        if end_to_end:
            settings = Settings(
                config_path=None,
                store_path=workdir / "store",
                base_iri="http://127.0.0.1:8000/",
                http=http.settings,
                harvest=HarvestSettings(workers=args.workers),
                sources={"bench": source},
            )
            with RecordStore(settings.store_path, settings.base_iri) as store:
                for name, _ in runs:
                    t0, c0, w0 = time.perf_counter(), cpu_seconds(), workers_cpu.total()
                    p0 = process_cpu(peer.pid or 0)
                    job = run_source(settings, store, "bench", RunOptions(full=True), http=http)
                    dt, cpu = time.perf_counter() - t0, cpu_seconds() - c0
                    wcpu = workers_cpu.total() - w0
                    pcpu = process_cpu(peer.pid or 0) - p0
                    counts = {k: v for k, v in job.counters.items() if v}
                    results[name] = {
                        "seconds": round(dt, 2),
                        "records_per_s": round(args.records / dt),
                        "status": job.status,
                        "counters": counts,
                        "cpu_us_per_record": round((cpu + wcpu) / args.records * 1e6),
                        "harvest_process_cpu_us_per_record": round(cpu / args.records * 1e6),
                        "workers_cpu_us_per_record": round(wcpu / args.records * 1e6),
                        "peer_cpu_us_per_record": round(pcpu / args.records * 1e6),
                    }
                    print(
                        f"{name:10} {args.records / dt:8.0f} records/s  {dt:7.2f} s"
                        f"  {job.status} {counts}"
                        f"  CPU us/record: {(cpu + wcpu) / args.records * 1e6:.0f} in all ="
                        f" {cpu / args.records * 1e6:.0f} harvesting process"
                        f" + {wcpu / args.records * 1e6:.0f} workers"
                        f" (+ {pcpu / args.records * 1e6:.0f} the CSW peer)"
                    )
        else:
            for name, held in runs:
                c0 = cpu_seconds()
                count, dt = listing_only(source, http, held)
                cpu_us = round((cpu_seconds() - c0) / count * 1e6)
                results[name] = {
                    "seconds": round(dt, 2),
                    "records_per_s": round(count / dt),
                    "cpu_us_per_record": cpu_us,
                }
                print(
                    f"{name:10} {count / dt:8.0f} records/s  {dt:7.2f} s  (harvester alone)"
                    f"  CPU {cpu_us} us/record"
                )
        sampler.stop.set()
        workers_cpu.stop.set()
        results["peak_rss_mb"] = rss_mb()
        quarter = max(1, len(sampler.samples) // 4)
        results["rss_mb_at_quarters"] = sampler.samples[quarter - 1 :: quarter][:4]
        print(
            f"record size {size} bytes; peak RSS {results['peak_rss_mb']} MB;"
            f" RSS at each quarter {results['rss_mb_at_quarters']} MB"
        )
        print(json.dumps(results))
    finally:
        stop.set()
        peer.join(timeout=10)
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
