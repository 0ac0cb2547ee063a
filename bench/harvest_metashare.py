"""META-SHARE sync benchmark (not a test): N LRs on the local META-SHARE node, synchronised
through the real pipeline (the ``meta-share`` harvester, the v3.0 structure Schematron, the
``meta-share`` mapper, SHACL, the journaled record store) into a fresh on-disk store.

    python bench/harvest_metashare.py --lrs 10000
    python bench/harvest_metashare.py --lrs 10000 --changed 0.01 --parallel 8
    python bench/harvest_metashare.py --lrs 3000 --fetch-only

The node runs in a process of its own (``aggregator.demo.peers.metashare``, numbered variants of
the four bundled sample LRs, ~3 kB of metadata.xml each), so that serving does not share the
harvester's interpreter. Reported: LRs/s of the first sync (login, inventory, one resource
ZIP per LR, validate, map, store), then of a resync after ``--changed`` of the LRs changed
on the node, with the number of LR requests the node answered in each (the resync must ask
for the changed LRs only), the job counters, the CPU milliseconds per LR of the harvesting
side (this process plus the pipeline's mapping workers, which are children of
multiprocessing's fork server: their CPU is read from /proc, the fork server's reaped
children included) and of the node, the load average when each run ended (on a shared
machine the CPU figures are steadier than the rates), and the peak RSS of this process.
``--workers`` defaults to the aggregator's default (``harvest.workers``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from aggregator.config import HarvestSettings, HttpSettings, Settings, parse_source
from aggregator.demo.peers.metashare import bundled_node, sample_xml, variant
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.metashare import MetaShareHarvester
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

SAMPLES = ("corpus", "lexicon", "grammar", "tool-service")


def serve_node(count: int, conn: Connection) -> None:
    """The node's process: build N LRs, serve them, obey ``change``/``counts``/``stop``."""
    node, ids = bundled_node(count)
    with PeerServer(node) as server:
        node.source_url = server.url.rstrip("/")
        conn.send(server.url.rstrip("/"))
        while True:
            command, arg = conn.recv()
            if command == "change":  # change every k-th LR: a new revision, new content
                step = max(1, round(1 / arg))
                changed = 0
                for n in range(0, count, step):
                    xml = variant(sample_xml(SAMPLES[n % 4]), n + 1_000_000)
                    node.put(ids[n], xml)
                    changed += 1
                conn.send(changed)
            elif command == "counts":
                times = os.times()
                conn.send({**node.requests, "cpu": times.user + times.system})
            else:
                conn.send(None)
                return


def cpu_seconds(node_pid: int) -> tuple[float, float]:
    """CPU of this process, and of its descendants but the node's process: the fork server
    and the mapping workers it starts (they are its children, not ours, so RUSAGE_CHILDREN
    misses them; a worker that has ended is in the fork server's reaped-children times)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime, _descendants_cpu(os.getpid(), node_pid)


def _descendants_cpu(root: int, exclude: int) -> float:
    """utime + stime + cutime + cstime of every descendant of ``root`` outside the
    ``exclude`` subtree, from /proc (Linux; 0 elsewhere)."""
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return 0.0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        parent[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(f) for f in fields[11:15])
    total = 0
    for pid in parent:
        p = pid
        while p in parent and p not in (root, exclude, 0, 1):
            p = parent[p]
        if p == root and pid != root:
            total += ticks[pid]
    return total / os.sysconf("SC_CLK_TCK")


def peak_rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lrs", type=int, default=10_000)
    ap.add_argument("--changed", type=float, default=0.01, help="share of LRs changed")
    ap.add_argument(
        "--workers", type=int, default=HarvestSettings().workers, help="mapping worker processes"
    )
    ap.add_argument("--parallel", type=int, default=4, help="LR requests in flight")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument(
        "--fetch-only", action="store_true", help="only log in, list and fetch (nothing stored)"
    )
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-metashare-"))
    store_path = work / "store"
    shutil.rmtree(store_path, ignore_errors=True)
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=serve_node, args=(args.lrs, child), daemon=True)
    started = time.perf_counter()
    proc.start()
    node_pid = proc.pid or 0
    url = parent.recv()
    print(f"node with {args.lrs} LRs at {url} ready in {time.perf_counter() - started:.1f} s")
    os.environ["BENCH_MS_USER"], os.environ["BENCH_MS_PASSWORD"] = "syncuser", "sync-secret"
    source = parse_source(
        "node",
        {
            "type": "meta-share",
            "url": url,
            "secrets": {"username": "BENCH_MS_USER", "password": "BENCH_MS_PASSWORD"},
            "validation": ["meta-share", "shacl"],
            "options": {"parallel": args.parallel},
        },
        os.environ,
    )
    settings = Settings(
        config_path=work / "aggregator.toml",
        store_path=store_path,
        base_iri="http://bench.example/",
        http=HttpSettings(allow_private=True, timeout=120, per_host_concurrency=args.parallel),
        harvest=HarvestSettings(workers=args.workers, batch_size=args.batch_size),
        sources={"node": source},
    )
    figures: dict[str, Any] = {"lrs": args.lrs, "workers": args.workers, "parallel": args.parallel}
    if args.fetch_only:
        figures["fetch"] = fetch_only(settings, source, parent, args.lrs)
        _ask(parent, "stop")
        proc.join(timeout=10)
        print(json.dumps(figures, indent=2))
        return
    with RecordStore(store_path, settings.base_iri) as store, HttpClient(settings.http) as http:

        def run(label: str) -> None:
            before = _ask(parent, "counts")
            cpu0 = cpu_seconds(node_pid)
            t0 = time.perf_counter()
            job = run_source(settings, store, "node", RunOptions(), http=http)
            store.sync()
            seconds = time.perf_counter() - t0
            time.sleep(0.2)  # the fork server reaps the ended workers: their CPU is then its
            cpu1 = cpu_seconds(node_pid)
            main_cpu, workers_cpu = (b - a for a, b in zip(cpu0, cpu1, strict=True))
            cpu = main_cpu + workers_cpu
            after = _ask(parent, "counts")
            node_cpu = after["cpu"] - before["cpu"]
            fetched = after.get("lr", 0) - before.get("lr", 0)
            counters = {k: v for k, v in job.counters.items() if v}
            figures[label] = {
                "seconds": round(seconds, 2),
                "lrs_per_s": round(args.lrs / seconds, 1),
                "lr_requests": fetched,
                "harvester_cpu_ms_per_lr": round(cpu / args.lrs * 1000, 2),
                "of_which_workers_ms_per_lr": round(workers_cpu / args.lrs * 1000, 2),
                "node_cpu_ms_per_lr": round(node_cpu / args.lrs * 1000, 2),
                "load_average": round(os.getloadavg()[0], 1),
                "status": job.status,
                "counters": counters,
            }
            print(f"{label}: {seconds:.2f} s, {args.lrs / seconds:.0f} LRs/s, {fetched} LR"
                  f" requests, {job.status} {counters} {job.message}; CPU: harvester"
                  f" {cpu:.1f} s ({workers_cpu:.1f} s in workers), node {node_cpu:.1f} s",
                  flush=True)  # fmt: skip
            if job.status != "succeeded":
                sys.exit(f"{label}: job {job.status}: {job.message}")

        run("first sync")
        changed = _ask(parent, "change", args.changed)
        print(f"changed {changed} LRs on the node")
        figures["changed"] = changed
        run("resync")
    _ask(parent, "stop")
    proc.join(timeout=10)
    figures["peak RSS MB"] = peak_rss_mb()
    print(f"peak RSS {figures['peak RSS MB']} MB")
    if figures["resync"]["lr_requests"] != changed:
        sys.exit(f"the resync asked for {figures['resync']['lr_requests']} LRs, not {changed}")
    print(json.dumps(figures, indent=2))
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


def fetch_only(settings: Settings, source: Any, conn: Connection, count: int) -> dict[str, Any]:
    """The harvester's listing alone: log in, inventory, every LR fetched and checked."""
    with HttpClient(settings.http) as http, http.session(source) as session:
        harvester = MetaShareHarvester(source, session)
        cpu0, t0 = time.process_time(), time.perf_counter()
        listing = Listing(incremental=False)
        n = sum(1 for _ in harvester.list_records(HarvestRequest(True, None), listing))
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    node = _ask(conn, "counts")
    print(f"fetch only: {n} LRs in {seconds:.1f} s, {n / seconds:.0f} LRs/s; CPU harvester"
          f" {cpu / n * 1000:.2f} ms/LR, node {node['cpu'] / n * 1000:.2f} ms/LR")  # fmt: skip
    if n != count or not listing.complete:
        sys.exit(f"fetch only: {n} of {count} LRs listed, complete={listing.complete}")
    return {
        "lrs_per_s": round(n / seconds, 1),
        "harvester_cpu_ms_per_lr": round(cpu / n * 1000, 2),
        "load_average": round(os.getloadavg()[0], 1),
    }


def _ask(conn: Connection, command: str, arg: Any = None) -> Any:
    conn.send((command, arg))
    return conn.recv()


if __name__ == "__main__":
    main()
