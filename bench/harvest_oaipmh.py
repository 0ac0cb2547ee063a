"""End-to-end harvest benchmark (not a test): N generated DCAT-AP datasets served by the local
OAI-PMH peer (in its own process, like a remote server), harvested into a fresh on-disk store
through the real pipeline: the OAI-PMH client, the dcat mapper, SHACL, the journaled record store.

    python bench/harvest_oaipmh.py --records 100000
    python bench/harvest_oaipmh.py --records 10000 --workers 0

Prints records/s for the first harvest, for a re-harvest with nothing changed (records skipped
by date before mapping), and for a forced re-harvest (mapped and hashed, found unchanged),
with the peak RSS of the harvesting process and of its worker processes. The peer makes its
records before the clock starts (``--peer-generates``: while serving); it still shares the two
cores with the harvest while it serves them.
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
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.optimize import optimize_store
from aggregator.store.records import RecordStore


def _serve(count: int, page_size: int, prebuild: bool, port_q: Any, stop: Any) -> None:
    """The peer process. With ``prebuild`` it makes every record before it starts listening,
    as a real provider has its records stored, so that the clock measures serving them and
    not generating them (~45 us each); it reports only the CPU it spent serving."""
    from aggregator.demo.peers.oaipmh import OaiPmhPeer
    from aggregator.demo.peers.oaipmh_items import generated_items
    from aggregator.demo.peers.sample_data import generate_dataset
    from aggregator.demo.peers.server import PeerServer

    metadata = generate_dataset
    if prebuild:
        metadata = [generate_dataset(i) for i in range(count)].__getitem__
    items = generated_items(count, metadata, identifier="oai:data.example.org:dataset-{:06d}")
    before = resource.getrusage(resource.RUSAGE_SELF)
    with PeerServer(OaiPmhPeer(items, page_size=page_size)) as server:
        port_q.put(server.port)
        stop.wait()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    port_q.put(usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime)


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS in MB) of a live process, from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = 0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) // 1024
    return cpu, peak


def _thread_times() -> dict[int, tuple[str, float]]:
    """{thread id: (name, CPU seconds)} of this process's live threads."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = name.rstrip("0123456789:-_ ") or name
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return out


def rss_mb() -> tuple[int, int]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    return own, children


class RssSampler(threading.Thread):
    """Current RSS of this process every 0.5 s, to show whether memory grows with N; and the
    CPU time of every thread seen (threads that end, such as the graph applier or RocksDB's
    bulk-load helpers, are kept at their last reading)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int]] = []
        self.threads: dict[int, tuple[str, float]] = {}
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def thread_cpu(self) -> dict[str, float]:
        """CPU seconds summed by thread name, over every thread seen so far."""
        self.threads.update(_thread_times())
        by_name: dict[str, float] = {}
        for name, cpu in self.threads.values():
            by_name[name] = by_name.get(name, 0.0) + cpu
        return by_name

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.threads.update(_thread_times())
            with open("/proc/self/statm") as fh:
                pages = int(fh.read().split()[1])
            self.samples.append((time.monotonic() - self.t0, pages * 4096 // 2**20))


def disk_usage(store: Path) -> tuple[int, int]:
    """Bytes on disk under ``store`` (a hard-linked file once), and the bytes of the files
    that only the snapshots under ``store/snapshots`` still link."""
    sizes: dict[int, int] = {}
    live: set[int] = set()
    for f in store.rglob("*"):
        if f.is_file():
            st = f.stat()
            sizes[st.st_ino] = st.st_size
            if "snapshots" not in f.relative_to(store).parts[:1]:
                live.add(st.st_ino)
    return sum(sizes.values()), sum(n for ino, n in sizes.items() if ino not in live)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=1, help="mapping/validation processes")
    ap.add_argument("--page-size", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--dir", type=Path, default=None, help="store directory (default: temp)")
    ap.add_argument("--skip-forced", action="store_true", help="skip the forced re-harvest")
    ap.add_argument(
        "--peer-generates",
        action="store_true",
        help="the peer makes each record when a page asks for it (~45 us of CPU each, on the"
        " same cores) instead of before the clock starts (~7 KB of memory per record)",
    )
    ap.add_argument(
        "--no-settle",
        action="store_true",
        help="re-harvest at once, while the store still compacts the first harvest's writes"
        " (by default the store is compacted first: by the first job itself when it wrote"
        " [harvest] optimize_after records, else as `aggregator store optimize` does)",
    )
    args = ap.parse_args()

    ctx = mp.get_context("spawn")
    port_q = ctx.Queue()
    stop = ctx.Event()
    peer = ctx.Process(
        target=_serve, args=(args.records, args.page_size, not args.peer_generates, port_q, stop)
    )
    peer.start()
    port = port_q.get(timeout=600)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="agg-bench-"))
    source = SourceConfig(name="bench", type="oai-pmh", url=f"http://127.0.0.1:{port}/oai")
    settings = Settings(
        config_path=None,
        store_path=workdir / "store",
        base_iri="http://127.0.0.1:8000/",
        http=HttpSettings(allow_private=True, timeout=120),
        harvest=HarvestSettings(
            workers=args.workers,
            batch_size=args.batch_size,
            optimize_after=0 if args.no_settle else HarvestSettings().optimize_after,
        ),
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
                threads0 = sampler.thread_cpu()
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
                threads = {
                    k: round((v - threads0.get(k, 0.0)) / args.records * 1e6)
                    for k, v in sampler.thread_cpu().items()
                }
                threads = {k: v for k, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v}
                cpu = [round(own / args.records * 1e6), round(worker_cpu / args.records * 1e6)]
                counts = {k: v for k, v in job.counters.items() if v}
                results[name] = {
                    "seconds": round(dt, 1),
                    "records_per_s": round(args.records / dt),
                    "status": job.status,
                    "counters": counts,
                    "cpu_us_per_record": {"harvester": cpu[0], "workers": cpu[1]},
                    "harvester_threads_us_per_record": threads,
                }
                print(
                    f"{name:10} {args.records / dt:8.0f} records/s  {dt:7.1f} s  {job.status}"
                    f" {counts}  CPU/record: harvester {cpu[0]} us, workers {cpu[1]} us"
                )
                print(f"{'':10} harvester threads, CPU us/record: {threads}")
                compacted = job.listing.get("optimized")
                if compacted:  # the job compacted the store at its end (a large harvest)
                    results["compaction_seconds"] = compacted["seconds"]
                    print(
                        f"the job compacted the store in {compacted['seconds']} s:"
                        f" {compacted['bytes_before'] // 2**20} ->"
                        f" {compacted['bytes_after'] // 2**20} MB (the graph store"
                        f" {compacted['graph_store_before'] // 2**20} ->"
                        f" {compacted['graph_store_after'] // 2**20} MB)"
                    )
                elif name == "first" and not args.no_settle:
                    t1 = time.perf_counter()
                    optimize_store(store)
                    results["compaction_seconds"] = round(time.perf_counter() - t1, 1)
                    print(f"compacted the store in {results['compaction_seconds']} s")
        own, _ = rss_mb()
        sampler.stop.set()
        results["peak_rss_mb"] = own
        results["peak_rss_workers_mb"] = worker_peak
        quarter = max(1, len(sampler.samples) // 4)
        results["rss_mb_at_quarters"] = [s[1] for s in sampler.samples[quarter - 1 :: quarter]][:4]
        du, pinned = disk_usage(workdir / "store")
        results["store_mb"] = du // 2**20
        results["snapshot_only_mb"] = pinned // 2**20
        print(
            f"peak RSS: harvester {own} MB, workers {worker_peak} MB;"
            f" store on disk {du // 2**20} MB, of which {pinned // 2**20} MB only in the"
            " readers' snapshot (files the live store compacted away since)"
        )
        print(json.dumps(results))
    finally:
        stop.set()
        try:
            peer_cpu = port_q.get(timeout=10)
            print(f"peer process CPU serving: {peer_cpu:.1f} s in all")
        except Exception:
            pass
        peer.join(timeout=10)
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
