"""Where the graph store's memory goes (not a test): the RSS of one process holding an
Oxigraph store, step by step, on a harvested store and on bulk loads like the applier's.

    python bench/million.py --records 1000000 --dir /var/tmp/million
    python bench/store_memory.py --store /var/tmp/million/store

Part 1 opens the harvested graph store read-only and reads it as the applier and the
endpoint do: a scan of one predicate over every record graph (the ``posg`` index), point
reads of datasets spread over the store (``spog``), then the analysts' group-by by theme.
Part 2 bulk-loads the store's first records, ``--chunk`` records per load as the applier
gathers them, into a fresh store. After each step: the process's RSS and its high-water mark
(``VmHWM``); after closing the store, the RSS again, before and after ``malloc_trim``
(memory the allocator keeps is not the store's).

What pyoxigraph's ``Store(path)`` fixes (its RocksDB options, written in the store's
``OPTIONS-*`` file; pyoxigraph exposes none of them) is printed first: the block caches,
the memtable size per column family and whether index and filter blocks live inside the
cache (outside it they stay in memory for every open file, so they grow with the store).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from oxigraph_bulk_load import records_of
from pyoxigraph import NamedNode, RdfFormat, Store

DCT_TITLE = NamedNode("http://purl.org/dc/terms/title")
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
DATASET = NamedNode("http://www.w3.org/ns/dcat#Dataset")
BY_THEME = (
    "PREFIX dcat: <http://www.w3.org/ns/dcat#> SELECT ?group (COUNT(?d) AS ?n)"
    " WHERE { ?d a dcat:Dataset ; dcat:theme ?group } GROUP BY ?group"
)
OPTION_KEYS = (
    "max_open_files",
    "write_buffer_size",
    "max_write_buffer_number",
    "db_write_buffer_size",
    "cache_index_and_filter_blocks",
    "filter_policy",
    "block_size",
)


def status_mb() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process, MB."""
    text = Path("/proc/self/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", text).group(1))  # type: ignore[union-attr]
    hwm = int(re.search(r"VmHWM:\s+(\d+)", text).group(1))  # type: ignore[union-attr]
    return rss // 1024, hwm // 1024


def reset_peak() -> None:
    """Start a new high-water mark (Linux: writing 5 to clear_refs resets VmHWM)."""
    Path("/proc/self/clear_refs").write_text("5")


def trim() -> None:
    """Give the allocator's free memory back to the system (glibc ``malloc_trim``)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def step(label: str, work: Callable[[], object] | None = None) -> None:
    t0 = time.perf_counter()
    result = work() if work else None
    rss, hwm = status_mb()
    took = time.perf_counter() - t0
    extra = f" -> {result}" if result is not None else ""
    print(f"  {label:<58} RSS {rss:>5} MB  peak {hwm:>5} MB  ({took:.1f} s){extra}")


def options(graphs: Path) -> None:
    files = sorted(graphs.glob("OPTIONS-*"))
    if not files:
        return
    seen: dict[str, set[str]] = {}
    for line in files[-1].read_text().splitlines():
        key, _, value = line.strip().partition("=")
        if key in OPTION_KEYS:
            seen.setdefault(key, set()).add(value)
    caches = sorted(set(re.findall(r"capacity : (\d+)", (graphs / "LOG").read_text())))
    print("pyoxigraph's RocksDB options (every column family):")
    for key in OPTION_KEYS:
        print(f"  {key} = {', '.join(sorted(seen.get(key, {'?'})))}")
    print(f"  block cache capacities = {', '.join(f'{int(c) >> 20} MB' for c in caches)}")


def _read(graphs: Path, points: int) -> None:
    store = Store.read_only(str(graphs))
    step("store opened", lambda: len(list(graphs.glob("*.sst"))))
    titles = store.quads_for_pattern(None, DCT_TITLE, None)
    step("scan: every dct:title (posg)", lambda: sum(1 for _ in titles))
    datasets = [q.subject for q in store.quads_for_pattern(None, RDF_TYPE, DATASET)]
    picked = datasets[:: max(len(datasets) // points, 1)][:points]
    datasets.clear()
    step(
        f"point reads: {len(picked)} datasets spread over the store (spog)",
        lambda: sum(1 for s in picked for _ in store.quads_for_pattern(s, None, None)),
    )
    step(
        "SPARQL: datasets by theme over the union graph",
        lambda: len(list(store.query(BY_THEME, use_default_graph_as_union=True))),  # type: ignore[arg-type]
    )


def read_store(graphs: Path, points: int) -> None:
    print(f"part 1: the harvested graph store, read-only ({graphs})")
    step("python and pyoxigraph loaded")
    _read(graphs, points)
    gc.collect()
    step("store closed")
    step("store closed, then malloc_trim", trim)


def _bulk(store: Store, data: bytes) -> None:
    store.bulk_load(data, RdfFormat.N_QUADS, lenient=True)
    store.flush()


def _load(target: Path, source: Path, chunk: int, loads: int) -> None:
    store = Store(str(target))
    records = records_of(source, chunk * loads)
    for k in range(loads):
        data = b"".join(next(records) for _ in range(chunk))
        if k in (0, 1, loads // 2, loads - 1):
            reset_peak()
            step(f"load {k + 1}: {len(data) >> 20} MB of N-Quads", partial(_bulk, store, data))
        else:
            _bulk(store, data)
    records.close()


def bulk_loads(source: Path, chunk: int, loads: int) -> None:
    print(f"part 2: {loads} bulk loads of {chunk} records into a fresh store")
    target = Path(tempfile.mkdtemp(prefix="store-memory-"))
    try:
        trim()
        reset_peak()
        step("before the loads")
        _load(target, source, chunk, loads)
        gc.collect()
        step("store closed")
        step("store closed, then malloc_trim", trim)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--store", type=Path, required=True, help="a harvested store (its folder)")
    ap.add_argument("--points", type=int, default=20000, help="datasets read one by one")
    ap.add_argument("--chunk", type=int, default=1000, help="records per bulk load")
    ap.add_argument("--loads", type=int, default=20, help="bulk loads in part 2")
    args = ap.parse_args()
    options(args.store / "graphs")
    read_store(args.store / "graphs", args.points)
    bulk_loads(args.store, args.chunk, args.loads)


if __name__ == "__main__":
    main()
