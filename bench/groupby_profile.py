"""Where an analyst's group-by spends its time in the embedded store (not a test).

    python bench/million.py --records 1000000 --dir /var/tmp/million
    python bench/groupby_profile.py --store /var/tmp/million/store

Opens the harvested graph store read-only, in this process (pyoxigraph, no HTTP), and runs
each group-by of the 1M run (``GROUP_BY`` in bench/_million_serve.py) over the union default
graph, as the endpoint does. Beside each: the quads each of its triple patterns matches,
read on their own (one prefix scan of one index, no join), and a group-by of the last
pattern alone (no join). A query's time is then its scans plus the lookups its joins make,
one per row of the left side: the split tells which one bounds it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable
from pathlib import Path

from _million_serve import GROUP_BY, PREFIXES
from pyoxigraph import NamedNode, QuerySolutions, Store

DCAT = "http://www.w3.org/ns/dcat#"
DCT = "http://purl.org/dc/terms/"
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
PATTERNS = {  # the triple patterns of the group-bys, as (predicate, object or None)
    "?d a dcat:Dataset": (RDF_TYPE, NamedNode(DCAT + "Dataset")),
    "?d dct:publisher ?g": (NamedNode(DCT + "publisher"), None),
    "?d dcat:theme ?g": (NamedNode(DCAT + "theme"), None),
    "?d dcat:distribution ?x": (NamedNode(DCAT + "distribution"), None),
    "?x dct:format ?g": (NamedNode(DCT + "format"), None),
}
ALONE = {  # the last pattern of each group-by, grouped with no join
    "by_theme": "SELECT ?group (COUNT(*) AS ?n) WHERE { ?d dcat:theme ?group } GROUP BY ?group",
    "by_format": "SELECT ?group (COUNT(*) AS ?n) WHERE { ?x dct:format ?group } GROUP BY ?group",
}


def timed(work: Iterable[object]) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = sum(1 for _ in work)
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--store", type=Path, required=True, help="a harvested store (its folder)")
    ap.add_argument("--skip", default="", help="comma-separated group-bys not to run")
    ap.add_argument("--no-scans", action="store_true", help="the group-bys only")
    args = ap.parse_args()
    store = Store.read_only(str(args.store / "graphs"))
    print("patterns, each scanned alone (all named graphs), every quad decoded:")
    for label, (predicate, obj) in {} if args.no_scans else PATTERNS.items():
        took, n = timed(store.quads_for_pattern(None, predicate, obj))
        print(f"  {label:<26} {n:>10,} quads  {took:7.2f} s  {took / max(n, 1) * 1e6:5.2f} us/quad")
    skip = set(filter(None, args.skip.split(",")))
    print("group-bys over the union default graph:")
    for name, query in {**GROUP_BY, **{f"{k} (no join)": v for k, v in ALONE.items()}}.items():
        if name in skip:
            continue
        t0 = time.perf_counter()  # a group-by is evaluated by query() itself
        result = store.query(PREFIXES + query, use_default_graph_as_union=True)
        assert isinstance(result, QuerySolutions)
        rows = sum(1 for _ in result)
        took = time.perf_counter() - t0
        print(f"  {name:<26} {rows:>10,} rows   {took:7.2f} s")


if __name__ == "__main__":
    main()
