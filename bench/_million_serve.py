"""The serving half of ``bench/million.py``: the harvested store served by ``aggregator serve``
(the CLI, in a process group of its own, as an operator starts it), measured by a light client
on the same machine: OAI-PMH (time to the first page, a whole walk, a page of 100 at depths 0,
50 % and 99 % by resumption token), the SPARQL endpoint (analysts' group-by counts, one
dataset's description) and the dashboard (overview, the search page, a keyword search through
its full-text index, aggregator/serve/dashboard/search.py).
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from _common import descendants, latencies, process_table
from oai_feed import token
from sparql_latency import free_port

_RECORD = re.compile(rb"<record>")
PREFIXES = "PREFIX dcat: <http://www.w3.org/ns/dcat#> PREFIX dct: <http://purl.org/dc/terms/> "
#: analysts' typical queries over all datasets, as they write them (no DISTINCT: over the
#: default graph a triple counts once, docs/store.md), and one with DISTINCT for comparison;
#: publishers are many (one per few records in the generated data: more groups than the
#: endpoint's row cap), so the publisher counts are the 100 largest, all groups counted
GROUP_BY = {
    "by_publisher": "SELECT ?group (COUNT(?d) AS ?n) WHERE { ?d a dcat:Dataset ;"
    " dct:publisher ?group } GROUP BY ?group ORDER BY DESC(?n) LIMIT 100",
    "by_theme": "SELECT ?group (COUNT(?d) AS ?n) WHERE { ?d a dcat:Dataset ; dcat:theme ?group }"
    " GROUP BY ?group",
    "by_format": "SELECT ?group (COUNT(?x) AS ?n) WHERE { ?d a dcat:Dataset ;"
    " dcat:distribution ?x . ?x dct:format ?group } GROUP BY ?group",
    "by_publisher_distinct": "SELECT ?group (COUNT(DISTINCT ?d) AS ?n) WHERE {"
    " ?d a dcat:Dataset ; dct:publisher ?group } GROUP BY ?group ORDER BY DESC(?n) LIMIT 100",
}
POINT = "SELECT ?p ?o WHERE {{ <{}> ?p ?o }}"
#: seconds a request may take: the first search page catches the index up with every record
#: (about 1 ms per record measured at 10,000, docs/benchmarks.md#the-1m-run-issue-31)
TIMEOUT = 3 * 3600
KEYWORD = "quality"  # in the titles of air quality records (OAI-PMH and CSW)


class Client:
    """One keep-alive connection; every answer must be 200."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)

    def get(self, path: str, accept: str = "*/*") -> bytes:
        for attempt in (1, 2):
            try:
                self.conn.request("GET", path, headers={"Accept": accept})
                resp = self.conn.getresponse()
                break
            except (OSError, http.client.HTTPException) as err:
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
                # the server closes a keep-alive connection idle for a few seconds (while
                # the search keeper catches up): sent again once, on a new connection
                stale = isinstance(err, (http.client.RemoteDisconnected, ConnectionResetError))
                if attempt == 2 or not stale:
                    raise
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {path[:120]}: HTTP {resp.status}: {body[:300]!r}")
        return body

    def oai(self, **args: str) -> bytes:
        body = self.get("/oai?" + urlencode(args))
        if b"<error" in body[:3000]:
            raise RuntimeError(f"OAI-PMH error: {body[:3000]!r}")
        return body

    def sparql(self, query: str) -> list[Any]:
        body = self.get(
            "/sparql?query=" + quote(PREFIXES + query), "application/sparql-results+json"
        )
        rows: list[Any] = json.loads(body)["results"]["bindings"]
        return rows


class ServerRss(threading.Thread):
    """Peak RSS (MB) of the server's process group (its supervisor and serving processes)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            table = process_table()
            group = descendants(self.pid, table, set()) | {self.pid}
            self.peak = max(self.peak, sum(table[p][2] for p in group if p in table) / 2**20)


def _dataset_iris(store: Path, count: int) -> list[str]:
    """``count`` dataset IRIs spread over the store's records (no per-record list kept)."""
    with sqlite3.connect(f"file:{store / 'state.sqlite3'}?mode=ro", uri=True) as conn:
        (top,) = conn.execute("SELECT max(id) FROM records").fetchone()
        ids = [1 + (top - 1) * k // max(1, count - 1) for k in range(count)]
        marks = ",".join("?" * len(ids))
        rows = conn.execute(
            f"SELECT dataset_iri FROM records WHERE id IN ({marks}) AND status = 'active'"
            " AND dataset_iri IS NOT NULL",
            ids,
        ).fetchall()
    return [str(r[0]) for r in rows]


def _walk(client: Client, keep: set[int]) -> tuple[int, int, float, dict[int, str]]:
    """A whole ListRecords dcat_ap walk: (records, pages, seconds, {page: its token})."""
    tokens: dict[int, str] = {}
    t0 = time.perf_counter()
    body = client.oai(verb="ListRecords", metadataPrefix="dcat_ap")
    records, page = len(_RECORD.findall(body)), 1
    while tok := token(body):
        page += 1
        if page in keep:
            tokens[page] = tok
        body = client.oai(verb="ListRecords", resumptionToken=tok)
        records += len(_RECORD.findall(body))
    return records, page, time.perf_counter() - t0, tokens


def measure_serving(config: Path, store: Path, records: int, repeats: int) -> dict[str, Any]:
    """Start ``aggregator serve`` on the store, measure, stop it; return the figures."""
    port = free_port()
    cli = Path(sys.executable).with_name("aggregator")
    t_start = time.perf_counter()
    server = subprocess.Popen(
        [str(cli), "-c", str(config), "serve", "--host", "127.0.0.1", "--port", str(port),
         "--no-scheduler"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    rss = ServerRss(server.pid)
    rss.start()
    out: dict[str, Any] = {}
    try:
        client = Client(port)
        while True:  # the first page, as soon as the server answers
            if server.poll() is not None:
                err = server.stderr.read().decode(errors="replace") if server.stderr else ""
                raise RuntimeError(f"aggregator serve ended ({server.returncode}): {err[-2000:]}")
            try:
                client.oai(verb="ListRecords", metadataPrefix="dcat_ap")
                break
            except (OSError, http.client.HTTPException):
                time.sleep(0.05)
        out["oai_first_page_s"] = round(time.perf_counter() - t_start, 2)
        t0 = time.perf_counter()
        client.get("/datasets")  # answers from what is indexed after at most REQUEST_BUDGET
        out["search_first_visit_s"] = round(time.perf_counter() - t0, 2)
        out["search_index_caught_up_s"] = round(_caught_up(store) - t_start, 2)
        pages = -(-records // 100)
        depths = {"0%": 1, "50%": max(1, pages // 2), "99%": max(1, pages * 99 // 100)}
        n, walked, secs, tokens = _walk(client, set(depths.values()))
        out["oai_walk"] = {"records": n, "pages": walked, "seconds": round(secs, 2),
                           "records_per_s": round(n / secs)}  # fmt: skip
        lat = {}
        for name, page in depths.items():
            args = {"resumptionToken": tokens[page]} if page > 1 else {"metadataPrefix": "dcat_ap"}
            verb = {"verb": "ListRecords", **args}
            lat[name] = {"page": page, **latencies(lambda v=verb: client.oai(**v), repeats)}
        out["oai_page_ms"] = lat
        sparql: dict[str, Any] = {}
        for name, query in GROUP_BY.items():
            try:  # past the server's sparql_timeout: an answer, not the end of the run
                rows = client.sparql(query)
                timed = latencies(lambda q=query: client.sparql(q), 3)
                sparql[name] = {"groups": len(rows), **timed}
            except RuntimeError as err:
                sparql[name] = {"error": str(err)[:300]}
        iris = _dataset_iris(store, 50)
        it = iter(iris * (repeats * 4 // max(1, len(iris)) + 1))
        if not client.sparql(POINT.format(iris[0])):
            raise RuntimeError(f"no description of {iris[0]} over SPARQL")
        sparql["point"] = latencies(lambda: client.sparql(POINT.format(next(it))), repeats * 4)
        out["sparql_ms"] = sparql
        dash = {
            "overview": "/",
            "search_page": "/datasets",
            "keyword_search": "/datasets?q=" + KEYWORD,
        }
        out["dashboard_ms"] = {
            name: latencies(lambda p=path: client.get(p), repeats) for name, path in dash.items()
        }
        out["keyword_hits"] = _keyword_hits(store)
        out["server_peak_rss_mb"] = round(rss.peak)
    finally:
        rss.stop.set()
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return out


def _caught_up(store: Path) -> float:
    """When the server's search keeper has indexed every record (``time.perf_counter()``):
    the rest is measured on a server that no longer indexes."""
    from aggregator.serve.dashboard.search import SearchIndex

    index = SearchIndex(store, store / "state.sqlite3")
    conn = sqlite3.connect(f"file:{store / 'state.sqlite3'}?mode=ro", uri=True)
    try:
        while index.behind(conn, cap=1):
            time.sleep(0.5)
        return time.perf_counter()
    finally:
        conn.close()
        index.close()


def _keyword_hits(store: Path) -> int:
    """How many datasets the keyword search finds (the index the dashboard just caught up)."""
    from aggregator.serve.dashboard.search import SearchIndex

    index = SearchIndex(store, store / "state.sqlite3")
    conn = sqlite3.connect(f"file:{store / 'state.sqlite3'}?mode=ro", uri=True)
    try:
        return index.search(conn, KEYWORD, {}).total
    finally:
        conn.close()
        index.close()
