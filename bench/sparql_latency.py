"""SPARQL endpoint benchmark (not a test): our /sparql against ``oxigraph serve`` on the same
data, both on 127.0.0.1.

    python bench/sparql_latency.py --records 10000
    python bench/sparql_latency.py --records 10000 --store /tmp/bench-store   # keep, reuse

The store is filled through the real pipeline (the local OAI-PMH peer, the harvester, the
dcat mapper, SHACL, the record store) unless ``--store`` already holds enough records. Our
endpoint runs as ``aggregator serve`` does (a supervisor and ``--processes`` serving
processes, default as many as CPUs, 2 to 4); ``oxigraph serve --union-default-graph`` runs on a
``Store.backup`` copy.

Measured, each server twice (interleaved) and the better run reported:
- point-query latency (one dataset's title by IRI, a different IRI each time): one client,
  sequential requests on a keep-alive connection, p50/p95/mean;
- throughput: ``--clients`` client processes, each with a keep-alive connection, for
  ``--seconds``; requests per second, and the server's CPU per request (its processes' user
  and system time over the run, from /proc);
- the same two with SPARQLWrapper as the client, as an analyst's script uses it (a new
  connection per query, the JSON parsed): the client's own cost is part of every figure, as
  it is for the people who use the endpoint;
- the in-process cost of the same query (pyoxigraph, no HTTP) and the cost of a snapshot
  (``Store.backup``, what ``SparqlEndpoint.refresh()`` does) and of opening it read-only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

BASE = "http://127.0.0.1:8000/"
TITLE = "SELECT ?t WHERE {{ <{}> <http://purl.org/dc/terms/title> ?t }}"
ACCEPT = "application/sparql-results+json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- filling the store ----------------------------------------------------------------------------
def harvest(store_path: Path, records: int) -> None:
    from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
    from aggregator.demo.peers.oaipmh import OaiPmhPeer
    from aggregator.demo.peers.oaipmh_items import generated_items
    from aggregator.demo.peers.sample_data import generate_dataset
    from aggregator.demo.peers.server import PeerServer
    from aggregator.jobs.pipeline import RunOptions, run_source
    from aggregator.store.records import RecordStore

    items = generated_items(
        records, generate_dataset, identifier="oai:data.example.org:dataset-{:06d}"
    )
    with PeerServer(OaiPmhPeer(items, page_size=100)) as peer:
        source = SourceConfig(name="portal", type="oai-pmh", url=f"{peer.url}oai")
        settings = Settings(
            config_path=None,
            store_path=store_path,
            base_iri=BASE,
            http=HttpSettings(allow_private=True),
            harvest=HarvestSettings(workers=1),
            sources={"portal": source},
        )
        with RecordStore(store_path, BASE) as store:
            t0 = time.perf_counter()
            job = run_source(settings, store, "portal", RunOptions(full=True))
            store.sync()
            print(
                f"harvested {records} records in {time.perf_counter() - t0:.1f} s: {job.counters}",
                flush=True,
            )


def active_records(store_path: Path) -> int:
    import sqlite3

    db = store_path / "state.sqlite3"
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT COUNT(*) FROM records WHERE status = 'active'").fetchone()
    return int(row[0])


# -- servers --------------------------------------------------------------------------------------
def serve_ours(store_path: str, port: int, processes: int) -> None:
    """Entry point of the server process (``--serve-ours``): ``aggregator serve`` as the CLI
    runs it (a supervisor and ``processes`` serving processes)."""
    from aggregator.config import ServeSettings, Settings
    from aggregator.serve.app import run_server
    from aggregator.store.records import RecordStore

    settings = Settings(
        config_path=None, store_path=Path(store_path), base_iri=BASE, serve=ServeSettings()
    )
    with RecordStore(Path(store_path), BASE) as store:
        run_server(store, settings, "127.0.0.1", port, processes or None)


def wait_ready(port: int, path: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path + "?query=" + quote("ASK {}"), headers={"Accept": ACCEPT})
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"server on port {port} did not come up")


# -- clients --------------------------------------------------------------------------------------
def paths(path: str, iris: list[str]) -> list[str]:
    return [f"{path}?query={quote(TITLE.format(iri))}" for iri in iris]


def one(conn: http.client.HTTPConnection, url: str) -> None:
    conn.request("GET", url, headers={"Accept": ACCEPT})
    response = conn.getresponse()
    body = response.read()
    if response.status != 200 or b'"t"' not in body:
        raise RuntimeError(f"unexpected answer {response.status}: {body[:200]!r}")


def latency(port: int, urls: list[str], count: int) -> dict[str, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    for url in urls[:100]:  # warm-up
        one(conn, url)
    times = []
    for i in range(count):
        t0 = time.perf_counter()
        one(conn, urls[i % len(urls)])
        times.append((time.perf_counter() - t0) * 1000)
    conn.close()
    times.sort()
    return {
        "p50_ms": times[len(times) // 2],
        "p95_ms": times[int(len(times) * 0.95)],
        "mean_ms": statistics.fmean(times),
    }


def _wrapper_one(endpoint: str, iri: str) -> None:
    from SPARQLWrapper import JSON, SPARQLWrapper

    sw = SPARQLWrapper(endpoint)
    sw.setQuery(TITLE.format(iri))
    sw.setReturnFormat(JSON)
    result: Any = sw.queryAndConvert()
    if not result["results"]["bindings"]:
        raise RuntimeError(f"no title for {iri} from {endpoint}")


def latency_wrapper(endpoint: str, iris: list[str], count: int) -> dict[str, float]:
    """Like an analyst's script: SPARQLWrapper, a new connection per query, JSON parsed."""
    for iri in iris[:20]:
        _wrapper_one(endpoint, iri)
    times = []
    for i in range(count):
        t0 = time.perf_counter()
        _wrapper_one(endpoint, iris[i % len(iris)])
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"p50_ms": times[len(times) // 2], "p95_ms": times[int(len(times) * 0.95)]}


def _client(target: int | str, items: list[str], start: float, stop: float, out: Any) -> None:
    """One client process. ``target``: a port (keep-alive http.client requests of the URLs in
    ``items``) or an endpoint URL (SPARQLWrapper queries for the IRIs in ``items``)."""
    port = target if isinstance(target, int) else None
    conn = http.client.HTTPConnection("127.0.0.1", port) if port is not None else None
    done = errors = 0
    i = os.getpid()
    while time.time() < start:
        time.sleep(0.001)
    while time.time() < stop:
        try:
            if conn is None:
                _wrapper_one(str(target), items[i % len(items)])
            else:
                one(conn, items[i % len(items)])
            done += 1
        except (OSError, RuntimeError, http.client.HTTPException, ValueError):
            errors += 1
            if conn is not None:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port)
        i += 7
    out.put((done, errors))


def throughput(
    port: int, urls: list[str], clients: int, seconds: float, wrapper: str | None = None
) -> dict[str, float]:
    """``clients`` processes for ``seconds``: keep-alive http.client requests of ``urls``, or
    with ``wrapper`` (an endpoint URL) SPARQLWrapper queries of ``urls`` (then IRIs)."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    start = time.time() + 0.5
    target: int | str = port if wrapper is None else wrapper
    procs = [
        ctx.Process(target=_client, args=(target, urls, start, start + seconds, out))
        for _ in range(clients)
    ]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    done = sum(r[0] for r in results)
    return {"req_per_s": done / seconds, "errors": sum(r[1] for r in results)}


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a server process and its children (the serving
    processes under our supervisor), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid_s, rest = stat.read_text().split(" ", 1)
        except OSError:
            continue
        fields = rest.rsplit(")", 1)[1].split()
        if int(pid_s) == pid or int(fields[1]) == pid:  # fields[1]: the parent's pid
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def measured_throughput(
    server: int, port: int, urls: list[str], clients: int, seconds: float
) -> dict[str, float]:
    """:func:`throughput` with keep-alive clients, plus the server's CPU per request."""
    before = server_cpu(server)
    result = throughput(port, urls, clients, seconds)
    spent = server_cpu(server) - before
    result["server_cpu_us_per_request"] = spent / max(1.0, result["req_per_s"] * seconds) * 1e6
    return result


# -- in-process figures ---------------------------------------------------------------------------
def in_process(store_path: Path, work: Path, iris: list[str]) -> dict[str, float]:
    from pyoxigraph import Store

    store = Store(str(store_path / "graphs"))
    backups = []
    for i in range(3):
        target = work / f"backup-{i}"
        t0 = time.perf_counter()
        store.backup(str(target))
        backups.append((time.perf_counter() - t0) * 1000)
    del store
    t0 = time.perf_counter()
    ro = Store.read_only(str(work / "backup-0"))
    opened = (time.perf_counter() - t0) * 1000
    times = []
    for i in range(2000):
        t0 = time.perf_counter()
        list(ro.query(TITLE.format(iris[i % len(iris)]), use_default_graph_as_union=True))
        times.append((time.perf_counter() - t0) * 1000)
    del ro
    for i in range(1, 3):
        shutil.rmtree(work / f"backup-{i}")
    return {
        "snapshot_backup_ms": statistics.median(backups),
        "snapshot_open_ms": opened,
        "query_p50_ms": statistics.median(times),
    }


def dataset_iris(store_path: Path, limit: int) -> list[str]:
    import sqlite3

    db = store_path / "state.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT dataset_iri FROM records WHERE status = 'active' AND dataset_iri IS NOT NULL"
            " ORDER BY random() LIMIT ?",
            (limit,),
        ).fetchall()
    return [r[0] for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--store", type=Path, help="store folder to fill or reuse (kept)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--requests", type=int, default=2000, help="for the latency figures")
    ap.add_argument("--processes", type=int, default=0, help="our serving processes (0: auto)")
    ap.add_argument("--serve-ours", nargs=3, metavar=("STORE", "PORT", "PROCESSES"))
    args = ap.parse_args()
    if args.serve_ours:
        serve_ours(args.serve_ours[0], int(args.serve_ours[1]), int(args.serve_ours[2]))
        return

    work = Path(tempfile.mkdtemp(prefix="sparql-bench-"))
    store_path = args.store or work / "store"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if active_records(store_path) < args.records:
            harvest(store_path, args.records)
        records = active_records(store_path)
        if records == 0:
            raise SystemExit("the store holds no active records: the harvest failed")
        iris = dataset_iris(store_path, 1000)
        figures: dict[str, Any] = {"records": records, "cpus": os.cpu_count()}
        figures["in_process"] = in_process(store_path, work, iris)
        copy = work / "backup-0"  # oxigraph serve gets its own copy of the same data

        ours, theirs = free_port(), free_port()
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--serve-ours",
                    str(store_path),
                    str(ours),
                    str(args.processes),
                ]
            )
        )
        oxigraph = Path(sys.executable).with_name("oxigraph")
        procs.append(
            subprocess.Popen(
                [
                    str(oxigraph),
                    "serve",
                    "--location",
                    str(copy),
                    "--bind",
                    f"127.0.0.1:{theirs}",
                    "--union-default-graph",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_ready(ours, "/sparql")
        wait_ready(theirs, "/query")
        servers = {
            "ours": (ours, paths("/sparql", iris)),
            "oxigraph": (theirs, paths("/query", iris)),
        }
        endpoints = {
            "ours": f"http://127.0.0.1:{ours}/sparql",
            "oxigraph": f"http://127.0.0.1:{theirs}/query",
        }
        runs: dict[str, list[dict[str, float]]] = {"ours": [], "oxigraph": []}
        tput: dict[str, list[dict[str, float]]] = {"ours": [], "oxigraph": []}
        wruns: dict[str, list[dict[str, float]]] = {"ours": [], "oxigraph": []}
        wtput: dict[str, list[dict[str, float]]] = {"ours": [], "oxigraph": []}
        pids = {"ours": procs[0].pid, "oxigraph": procs[1].pid}  # as started above
        for _ in range(2):
            for name, (port, urls) in servers.items():
                runs[name].append(latency(port, urls, args.requests))
                tput[name].append(
                    measured_throughput(pids[name], port, urls, args.clients, args.seconds)
                )
                wruns[name].append(latency_wrapper(endpoints[name], iris, args.requests // 4))
                wtput[name].append(
                    throughput(port, iris, args.clients, args.seconds, wrapper=endpoints[name])
                )
        key = f"throughput_{args.clients}_clients"
        for name in servers:
            figures[name] = {
                "latency": min(runs[name], key=lambda r: r["p50_ms"]),
                key: max(tput[name], key=lambda r: r["req_per_s"]),
                "sparqlwrapper_latency": min(wruns[name], key=lambda r: r["p50_ms"]),
                f"sparqlwrapper_{key}": max(wtput[name], key=lambda r: r["req_per_s"]),
            }
        o, x = figures["ours"], figures["oxigraph"]
        wkey = f"sparqlwrapper_{key}"
        figures["ratios"] = {
            "latency_p50_ours_over_oxigraph": o["latency"]["p50_ms"] / x["latency"]["p50_ms"],
            "latency_p95_ours_over_oxigraph": o["latency"]["p95_ms"] / x["latency"]["p95_ms"],
            "throughput_ours_over_oxigraph": o[key]["req_per_s"] / x[key]["req_per_s"],
            "sparqlwrapper_latency_p50_ours_over_oxigraph": o["sparqlwrapper_latency"]["p50_ms"]
            / x["sparqlwrapper_latency"]["p50_ms"],
            "sparqlwrapper_throughput_ours_over_oxigraph": o[wkey]["req_per_s"]
            / x[wkey]["req_per_s"],
        }
        print(json.dumps(figures, indent=2))
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
