"""The graph store's own floor (not a test): what Oxigraph alone costs to load our records.

    python bench/harvest_oaipmh.py --records 10000 --skip-forced --dir /tmp/h10k
    python bench/oxigraph_bulk_load.py --store /tmp/h10k/store --copies 10 --chunk 1000

Reads the records of a harvested store (each one whole, as N-Quads in its own graph: dataset,
range types, catalogue facts and catalogue record), then loads ``--copies`` renamed copies
into a fresh on-disk store with ``Store.bulk_load`` in chunks of ``--chunk`` records, as the
record store's applier does, with no Python work between loads. Prints CPU per record (all
threads, including RocksDB's compactions, and a settle period after the last load), wall
time and peak RSS: the part of a first harvest's cost no code of ours can remove.
"""

from __future__ import annotations

import argparse
import itertools
import resource
import shutil
import tempfile
import time
from collections.abc import Generator
from pathlib import Path

from pyoxigraph import RdfFormat, Store


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def records_of(store_path: Path, limit: int | None = None) -> Generator[bytes]:
    """Each record's full description as N-Quads in its own graph: the catalogue record, the
    dataset and the source's catalogue facts, read from the state database (the first
    ``limit`` records, or all). These are the quads a store that kept every record whole would
    load (the record store loads fewer: the statements records share go once to the shared
    graph, aggregator/store/shared.py), so the floor does not shrink with what the store
    saves."""
    from aggregator.store.graphs import GraphContent, to_nquads
    from aggregator.store.names import StoreNames
    from aggregator.store.state import StateDB

    db = StateDB(store_path / "state.sqlite3", read_only=True)
    try:
        for row in itertools.islice(db.iter_records(), limit):
            base = row.record_iri[: row.record_iri.rfind("/record/") + 1]
            names = StoreNames(store_path, base)
            nt, cat = db.graph_bytes(row.id)
            parts = ((names.catalog_record_ntriples(row), "m"), (nt, "d"), (cat, "c"))
            yield to_nquads(GraphContent(row.record_iri, parts, False))
    finally:
        db.close()


def _renamed(record: bytes, k: int) -> bytes:
    """Copy ``k`` of a record: its own graph, record and dataset IRIs."""
    tag = b"c%d-" % k
    return record.replace(b"/record/", b"/record/" + tag).replace(b"/dataset/", b"/dataset/" + tag)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--store", type=Path, required=True, help="a harvested store (its folder)")
    ap.add_argument("--copies", type=int, default=1, help="renamed copies to load")
    ap.add_argument("--chunk", type=int, default=1000, help="records per bulk_load")
    ap.add_argument("--settle", type=float, default=8.0, help="seconds of compaction counted")
    args = ap.parse_args()

    records = list(records_of(args.store))
    quads = sum(r.count(b"\n") for r in records) / max(len(records), 1)
    size = sum(len(r) for r in records) / max(len(records), 1)
    print(f"{len(records)} records per copy, {quads:.0f} quads and {size / 1024:.1f} KB each")
    target = Path(tempfile.mkdtemp(prefix="bulk-floor-store-"))
    try:
        store = Store(str(target))
        c0, t0, loaded = cpu_seconds(), time.perf_counter(), 0
        buf: list[bytes] = []

        def load() -> None:
            store.bulk_load(b"".join(buf), RdfFormat.N_QUADS, lenient=True)
            store.flush()
            buf.clear()

        for k in range(args.copies):
            for rec in records:
                buf.append(_renamed(rec, k) if k else rec)
                loaded += 1
                if len(buf) == args.chunk:
                    load()
        if buf:
            load()
        wall = time.perf_counter() - t0
        time.sleep(args.settle)
        cpu = cpu_seconds() - c0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print(
            f"loaded {loaded} records in {wall:.1f} s ({loaded / wall:.0f} records/s);"
            f" CPU {cpu / loaded * 1e6:.0f} us/record (all threads, {args.settle:g} s settle"
            f" included); peak RSS {rss} MB (the records' text included)"
        )
    finally:
        shutil.rmtree(target, ignore_errors=True)


if __name__ == "__main__":
    main()
