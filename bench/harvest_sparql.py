"""SPARQL source benchmark (not a test): N generated DCAT-AP datasets in a local ``oxigraph
serve``, harvested through the real pipeline (the ``sparql`` harvester, the dcat mapper,
SHACL, the journaled record store) into a fresh on-disk store.

    python bench/harvest_sparql.py --datasets 10000
    python bench/harvest_sparql.py --datasets 10000 --layout default --batch-size 200

The datasets come from ``aggregator.demo.peers.sample_data.generate_dataset`` (2-4 distributions,
a publisher shared with other datasets, a blank-node contact point, period, provenance and
identifier; ~75 triples). ``--layout graphs`` (default) puts each dataset in its own named
graph and serves the union as the default graph, as our own ``aggregator serve`` does (a
shared publisher is then described in many graphs); ``--layout default`` loads everything
into the default graph. The store is bulk-loaded with ``oxigraph load`` before the clock
starts.

Reported: datasets/s for the listing and fetching alone (the harvester's ``list_records``
consumed, nothing stored), datasets/s for the whole harvest (``run_source``: fetch, map,
validate, store), the peak RSS of this process after each phase and of the worker processes,
and the CPU ``oxigraph serve`` and the harvesting process spent (they share the cores; on a
busy machine the CPU figures are steadier than the rates).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import requests

from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.sparql import SparqlHarvester
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

OXIGRAPH = Path(sys.executable).parent / "oxigraph"
GRAPH = "https://data.example.org/graph/record/"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_data(path: Path, count: int, layout: str) -> int:
    """N-Quads of ``count`` generated datasets; returns the number of quads."""
    import pyoxigraph

    from aggregator.demo.peers.sample_data import generate_dataset

    quads = 0
    with path.open("wb") as out:
        for i in range(count):
            graph = (
                pyoxigraph.NamedNode(f"{GRAPH}{i}")
                if layout == "graphs"
                else pyoxigraph.DefaultGraph()
            )
            parsed = [
                pyoxigraph.Quad(q.subject, q.predicate, q.object, graph)
                for q in pyoxigraph.parse(generate_dataset(i), pyoxigraph.RdfFormat.RDF_XML)
            ]
            quads += len(parsed)
            out.write(pyoxigraph.serialize(parsed, format=pyoxigraph.RdfFormat.N_QUADS) or b"")
    return quads


def start_oxigraph(location: Path, data: Path, layout: str) -> tuple[subprocess.Popen[bytes], str]:
    subprocess.run(
        [str(OXIGRAPH), "load", "--location", str(location), "--file", str(data)],
        check=True,
        capture_output=True,
    )
    port = free_port()
    cmd = [str(OXIGRAPH), "serve", "--location", str(location), "--bind", f"127.0.0.1:{port}"]
    if layout == "graphs":
        cmd.append("--union-default-graph")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise SystemExit("oxigraph serve exited at start")
        try:
            if requests.get(base + "query", params={"query": "ASK {}"}, timeout=1).ok:
                return proc, base + "query"
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("oxigraph serve did not come up")
        time.sleep(0.1)


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--datasets", type=int, default=10_000)
    ap.add_argument("--layout", choices=("graphs", "default"), default="graphs")
    ap.add_argument("--batch-size", type=int, default=100, help="the source's batch_size")
    ap.add_argument("--parallel", type=int, default=1, help="the source's parallel")
    ap.add_argument("--page-size", type=int, default=500, help="the source's page_size")
    ap.add_argument("--workers", type=int, default=1, help="mapping/validation processes")
    ap.add_argument("--fetch-only", action="store_true", help="skip the whole harvest")
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    args = ap.parse_args()

    workdir = args.dir or Path(tempfile.mkdtemp(prefix="agg-bench-sparql-"))
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    quads = write_data(workdir / "data.nq", args.datasets, args.layout)
    proc, endpoint = start_oxigraph(workdir / "oxigraph", workdir / "data.nq", args.layout)
    print(
        f"{args.datasets} datasets, {quads} quads ({args.layout}) loaded into oxigraph serve"
        f" in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    options = {
        "batch_size": args.batch_size,
        "page_size": args.page_size,
        "parallel": args.parallel,
    }
    source = SourceConfig(name="bench", type="sparql", url=endpoint, options=options)
    settings = Settings(
        config_path=None,
        store_path=workdir / "store",
        base_iri="http://127.0.0.1:8000/",
        http=HttpSettings(allow_private=True, timeout=300),
        harvest=HarvestSettings(workers=args.workers),
        sources={"bench": source},
    )
    http = HttpClient(settings.http)
    results: dict[str, Any] = {"datasets": args.datasets, "layout": args.layout, **options}
    try:
        # listing and fetching alone
        server_cpu = proc_cpu(proc.pid)
        own_cpu = self_cpu()
        listing = Listing(incremental=False)
        t1 = time.perf_counter()
        session = http.session(source)
        walk = SparqlHarvester(source, session).list_records(
            HarvestRequest(full=True, checkpoint=None), listing
        )
        triples = 0
        for record in walk:
            triples += record.payload.count(b"\n")
        session.close()
        dt = time.perf_counter() - t1
        assert listing.complete, listing.truncated_reason
        assert listing.seen == args.datasets, (listing.seen, args.datasets)
        results["fetch"] = {
            "seconds": round(dt, 2),
            "datasets_per_s": round(args.datasets / dt),
            "triples": triples,
            "pages": listing.pages,
            "server_cpu_s": round(proc_cpu(proc.pid) - server_cpu, 1),
            "harvester_cpu_s": round(self_cpu() - own_cpu, 1),
        }
        results["peak_rss_mb_after_fetch"] = peak_rss_mb()
        print(
            f"fetch    {args.datasets / dt:8.0f} datasets/s  {dt:7.2f} s  {triples} triples"
            f"  (CPU: oxigraph serve {results['fetch']['server_cpu_s']} s,"
            f" harvester {results['fetch']['harvester_cpu_s']} s)",
            flush=True,
        )
        if not args.fetch_only:
            pool = ProcessPoolExecutor(
                max_workers=max(args.workers, 1), mp_context=mp.get_context("forkserver")
            )
            executor = pool if args.workers > 0 else None
            with RecordStore(settings.store_path, settings.base_iri) as store:
                server_cpu = proc_cpu(proc.pid)
                t2 = time.perf_counter()
                job = run_source(
                    settings, store, "bench", RunOptions(full=True), http=http, executor=executor
                )
                dt = time.perf_counter() - t2
            pool.shutdown()
            counts = {k: v for k, v in job.counters.items() if v}
            results["harvest"] = {
                "seconds": round(dt, 2),
                "datasets_per_s": round(args.datasets / dt),
                "status": job.status,
                "counters": counts,
                "server_cpu_s": round(proc_cpu(proc.pid) - server_cpu, 1),
            }
            print(
                f"harvest  {args.datasets / dt:8.0f} datasets/s  {dt:7.2f} s  {job.status}"
                f" {counts}",
                flush=True,
            )
        results["peak_rss_mb"] = peak_rss_mb()
        results["peak_rss_workers_mb"] = (
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
        )
        print(
            f"peak RSS: harvester {results['peak_rss_mb']} MB"
            f" ({results['peak_rss_mb_after_fetch']} MB after the fetch alone),"
            f" child processes {results['peak_rss_workers_mb']} MB"
        )
        print(json.dumps(results))
    finally:
        http.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
