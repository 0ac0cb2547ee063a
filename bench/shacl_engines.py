"""Throughput of the SHACL engines behind ShaclValidator, one record per validation.

Builds N realistic DCAT-AP 3 records (the record of tests/data/shacl/dataset.ttl with its IRIs,
titles and sizes varied, ~80 triples each, one in five broken) as canonical N-Triples, then
times ``ShaclValidator.validate_graph`` record by record for each engine (parsing, validation
and conversion to findings included) and prints a table::

    .venv/bin/python bench/shacl_engines.py --records 5000 --reference-records 200
    .venv/bin/python bench/shacl_engines.py --processes 2    # also: a pool of worker processes

pyshacl is ~100x slower than the Rust engine, so it gets its own (smaller) record count.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pyoxigraph import (
    CanonicalizationAlgorithm,
    Dataset,
    DefaultGraph,
    Quad,
    RdfFormat,
    parse,
    serialize,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aggregator.core.models import MappedDataset  # noqa: E402
from aggregator.validate.shacl import ShaclValidator  # noqa: E402

TEMPLATE = REPO / "tests" / "data" / "shacl" / "dataset.ttl"
DATASET_IRI = "https://data.example.eu/id/dataset/env-agency/air-quality-{i}"


def canonical(turtle: str) -> bytes:
    quads = (
        Quad(q.subject, q.predicate, q.object, DefaultGraph())
        for q in parse(turtle.encode(), format=RdfFormat.TURTLE)
    )
    ds = Dataset(quads)
    ds.canonicalize(CanonicalizationAlgorithm.RDFC_1_0)
    text = serialize((q.triple for q in ds), format=RdfFormat.N_TRIPLES)
    assert isinstance(text, bytes)
    return ("\n".join(sorted(set(text.decode().splitlines()))) + "\n").encode()


def make_records(n: int) -> list[MappedDataset]:
    template = TEMPLATE.read_text()
    records = []
    for i in range(n):
        ttl = (
            template.replace("air-quality-2024", f"air-quality-{i}")
            .replace("aq-2024-", f"aq-{i}-")
            .replace("Air quality measurements 2024", f"Air quality measurements, series {i}")
            .replace('"48213371"', f'"{48213371 + i}"')
        )
        if i % 5 == 4:  # broken: a distribution without access URL, a size that is text
            ttl = ttl.replace(
                "dcat:accessURL <https://api.env-agency.example.eu/aq/collections/2024> ;", ""
            ).replace('"5242880"^^xsd:nonNegativeInteger', '"5 MB"')
        nt = canonical(ttl)
        iri = DATASET_IRI.format(i=i)
        records.append(MappedDataset(local_id=iri, dataset_iri=iri, ntriples=nt, content_hash=""))
    return records


def time_engine(engine: str, records: Sequence[MappedDataset], repeats: int) -> list[float]:
    validator = ShaclValidator(engine=engine)
    validator.validate_graph(records[0])  # warm-up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for record in records:
            validator.validate_graph(record)
        rates.append(len(records) / (time.perf_counter() - start))
    return rates


_WORKER: ShaclValidator | None = None


def _init(validator: ShaclValidator) -> None:
    global _WORKER
    _WORKER = validator


def _validate_chunk(chunk: Sequence[MappedDataset]) -> int:
    assert _WORKER is not None
    return sum(_WORKER.validate_graph(r).conforms for r in chunk)


def time_pool(engine: str, records: Sequence[MappedDataset], processes: int) -> float:
    validator = ShaclValidator(engine=engine)
    chunks = [records[i : i + 200] for i in range(0, len(records), 200)]
    with ProcessPoolExecutor(processes, initializer=_init, initargs=(validator,)) as pool:
        list(pool.map(_validate_chunk, chunks[:processes]))  # warm-up: workers compile
        start = time.perf_counter()
        list(pool.map(_validate_chunk, chunks))
        return len(records) / (time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=5000, help="records for the fast engine")
    ap.add_argument("--reference-records", type=int, default=200, help="records for pyshacl")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--processes", type=int, default=0, help="also time a pool of N processes")
    args = ap.parse_args(argv)

    records = make_records(max(args.records, args.reference_records))
    triples = statistics.mean(r.ntriples.count(b"\n") for r in records)
    print(f"{len(records)} records, {triples:.0f} triples each on average, cpus={os.cpu_count()}")
    print()
    head = ("engine", "records", "records/s (median)", "min", "max")
    print("| {:<28} | {:>7} | {:>18} | {:>7} | {:>7} |".format(*head))
    print(f"|{'-' * 30}|{'-' * 8}:|{'-' * 19}:|{'-' * 8}:|{'-' * 8}:|")
    for engine, n in (("shacl", args.records), ("pyshacl", args.reference_records)):
        rates = time_engine(engine, records[:n], args.repeats)
        print(
            f"| {engine + ' (1 process)':<28} | {n:>7} | {statistics.median(rates):>18,.0f} "
            f"| {min(rates):>7,.0f} | {max(rates):>7,.0f} |"
        )
    if args.processes:
        rate = time_pool("shacl", records[: args.records], args.processes)
        label = f"shacl ({args.processes} processes)"
        print(f"| {label:<28} | {args.records:>7} | {rate:>18,.0f} | {'':>7} | {'':>7} |")


if __name__ == "__main__":
    main()
