"""OAI-PMH provider benchmark (not a test): a store of N records, served as ``aggregator serve``
serves it (a supervisor and its serving processes, ``--processes``, default as many as CPUs, 2
to 4), a light client on the same machine.

    python bench/oai_feed.py --records 100000
    python bench/oai_feed.py --records 20000 --store /tmp/oai-bench   # keep/reuse the store

The store is filled through the record store's SQLite journal (``StateDB.upsert`` with
prepared ``RecordWrite`` batches, the way ``RecordStore.write`` journals them), from 500
datasets made by the sample generator and mapped by the dcat mapper, copied under new IRIs;
3 % of the records are withdrawn. The graph store is left empty: the provider never reads it.

Prints: latency of ListRecords pages (p50/p90 of repeated requests) at the first page, at
25/50/75 % depth and at the last page; records/s of a whole-feed walk in dcat_ap, oai_dc and
ListIdentifiers; the RSS of the largest serving process, sampled during the walks.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import re
import shutil
import statistics
import tempfile
import threading
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BASE_IRI = "http://bench.example.org/"
TEMPLATES = 500
_TOKEN = re.compile(rb"<resumptionToken[^>]*>([^<]*)</resumptionToken>")
_RECORD = re.compile(rb"<record>")
_HEADER = re.compile(rb"<header[ >]")


def fill(path: Path, count: int) -> None:
    from aggregator.core.models import JobStatus, RawRecord
    from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
    from aggregator.mapping.base import MappingContext
    from aggregator.mapping.dcat import DcatMapper
    from aggregator.store.records import RecordStore
    from aggregator.store.state import RecordWrite

    mapper = DcatMapper()
    templates = []
    for i in range(TEMPLATES):
        raw = RawRecord(
            "bench", generate_identifier(i), "dcat", generate_dataset(i), "application/rdf+xml"
        )
        ds = mapper.map(raw, MappingContext(BASE_IRI, "bench"))[0]
        templates.append((ds.ntriples, " ".join(ds.themes)))
    store = RecordStore(path, BASE_IRI)
    db = store.db
    t0 = time.perf_counter()
    start = datetime(2024, 1, 1, tzinfo=UTC)
    batch: list[RecordWrite] = []
    job = store.jobs.start("bench", True)
    for i in range(count):
        k = i % TEMPLATES
        slug_old, slug_new = f"dataset-{k:06d}".encode(), f"dataset-{i:06d}".encode()
        nt, themes = templates[k]
        local_id = generate_identifier(i)
        withdrawn = i % 33 == 7
        stamp = (start + timedelta(milliseconds=37 * i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        batch.append(
            RecordWrite(
                source="portal" if i % 4 else "regional",
                local_id=local_id,
                record_iri=f"{BASE_IRI}record/bench/{i}",
                dataset_iri=f"https://data.example.org/dataset/dataset-{i:06d}",
                status="withdrawn" if withdrawn else "active",
                content_hash=str(i),
                first_seen=stamp,
                modified=stamp,
                source_datestamp=None,
                job_id=job.id,
                format="dcat",
                payload_sha=None,
                url=None,
                themes=themes,
                ntriples=b"" if withdrawn else nt.replace(slug_old, slug_new),
                catalog_ntriples=b"",
                findings="[]",
                existed=False,
            )
        )
        if len(batch) == 2000 or i == count - 1:
            db.begin()
            generation = db.next_generation()
            ids = db.upsert(batch, generation)
            db.clear_pending(generation, ids)  # no graph store work: the provider reads SQLite
            db.commit()
            batch.clear()
    store.jobs.finish(job, JobStatus.SUCCEEDED, {"complete": True}, "bench fill")
    print(f"filled {count} records in {time.perf_counter() - t0:.1f} s (SQLite journal only)")
    store.close()


def _serve(path: str, page_size: int, processes: int, port_q: Any) -> None:
    from aggregator.config import ServeSettings, Settings
    from aggregator.serve.supervisor import Supervisor
    from aggregator.store.records import RecordStore

    settings = Settings(
        config_path=None,
        store_path=Path(path),
        base_iri=BASE_IRI,
        serve=ServeSettings(oai_page_size=page_size, public_base_url="https://oai.example.org/"),
    )
    import signal

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # from server.terminate() below
    with RecordStore(Path(path), BASE_IRI) as store:
        supervisor = Supervisor(store, settings, "127.0.0.1", 0, processes=processes or None)
        supervisor.start()
        port_q.put((supervisor.port, supervisor.pids))
        try:
            stop.wait()
        finally:
            supervisor.stop()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Sampler(threading.Thread):
    """The RSS of the largest serving process, every 0.25 s."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.samples: list[float] = []
        self.stop = threading.Event()

    def largest(self) -> float:
        return max(rss_mb(pid) for pid in self.pids)

    def run(self) -> None:
        while not self.stop.wait(0.25):
            self.samples.append(self.largest())


class Client:
    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def get(self, **args: str) -> bytes:
        self.conn.request("GET", "/oai?" + urllib.parse.urlencode(args))
        resp = self.conn.getresponse()
        body = resp.read()
        assert resp.status == 200, resp.status
        assert b"<error" not in body[:2000], body[:2000]
        return body


def token(body: bytes) -> str:
    m = _TOKEN.search(body[-4000:])
    return m.group(1).decode() if m else ""


def walk(
    client: Client, verb: str, prefix: str, keep: set[int]
) -> tuple[int, float, dict[int, str]]:
    """Walk a whole listing; return (items, seconds, {page number: token that fetches it})."""
    pattern = _RECORD if verb == "ListRecords" else _HEADER
    tokens: dict[int, str] = {}
    t0 = time.perf_counter()
    body = client.get(verb=verb, metadataPrefix=prefix)
    n, page = len(pattern.findall(body)), 1
    while tok := token(body):
        page += 1
        if page in keep:
            tokens[page] = tok
        body = client.get(verb=verb, resumptionToken=tok)
        n += len(pattern.findall(body))
    return n, time.perf_counter() - t0, tokens


def timed(fn: Any, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--page-size", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--store", type=Path, help="store directory (kept; reused if it has the N)")
    ap.add_argument("--processes", type=int, default=0, help="serving processes (0: auto)")
    args = ap.parse_args()
    tmp = None
    path = args.store
    if path is None:
        tmp = tempfile.mkdtemp(prefix="oai-bench-")
        path = Path(tmp) / "store"
    marker = path / "bench.json"
    if not (marker.exists() and json.loads(marker.read_text()).get("records") == args.records):
        shutil.rmtree(path, ignore_errors=True)
        fill(path, args.records)
        marker.write_text(json.dumps({"records": args.records}))
    ctx = mp.get_context("spawn")
    port_q: Any = ctx.Queue()
    server = ctx.Process(target=_serve, args=(str(path), args.page_size, args.processes, port_q))
    server.start()
    try:
        port, pids = port_q.get(timeout=120)
        client = Client(port)
        for _ in range(100):
            try:
                client.get(verb="Identify")
                break
            except OSError:
                time.sleep(0.1)
                client = Client(port)
        pages = -(-args.records // args.page_size)
        depths = {
            "first": 1,
            "25%": max(2, pages // 4),
            "50%": max(2, pages // 2),
            "75%": max(2, 3 * pages // 4),
            "last": pages,
        }
        sampler = Sampler(pids)
        rss_start = sampler.largest()
        sampler.start()
        results: dict[str, Any] = {"records": args.records, "page_size": args.page_size}
        for verb, prefix in (
            ("ListRecords", "dcat_ap"),
            ("ListRecords", "oai_dc"),
            ("ListIdentifiers", "dcat_ap"),
        ):
            n, secs, tokens = walk(client, verb, prefix, set(depths.values()))
            key = f"{verb} {prefix}"
            results[key] = {"items": n, "seconds": round(secs, 2), "per_s": round(n / secs)}
            print(
                f"walk {key}: {n} items in {secs:.1f} s = {n / secs:,.0f}/s; "
                f"server RSS now {sampler.largest():.0f} MB"
            )
            if verb == "ListRecords" and prefix == "dcat_ap":
                lat = {}
                for name, page in depths.items():
                    query = (
                        {"verb": verb, "metadataPrefix": prefix}
                        if page == 1
                        else {"verb": verb, "resumptionToken": tokens[page]}
                    )
                    p50, p90 = timed(lambda q=query: client.get(**q), args.repeats)
                    lat[name] = {"page": page, "p50_ms": round(p50, 1), "p90_ms": round(p90, 1)}
                    print(f"  page {page:>5} ({name:>5}): p50 {p50:6.1f} ms  p90 {p90:6.1f} ms")
                results["latency"] = lat
        sampler.stop.set()
        sampler.join()
        samples = sampler.samples or [rss_start]
        results["rss_mb"] = {
            "start": round(rss_start),
            "max": round(max(samples)),
            "end": round(samples[-1]),
        }
        print(
            f"server RSS: start {rss_start:.0f} MB, max {max(samples):.0f} MB, "
            f"end {samples[-1]:.0f} MB ({len(samples)} samples)"
        )
        print(json.dumps(results))
    finally:
        server.terminate()
        server.join(30)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
