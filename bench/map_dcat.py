"""Benchmark and figures of the ``dcat`` mapper (not a test).

    python bench/map_dcat.py                      # all figures
    python bench/map_dcat.py --datasets 10000     # size of the one-file catalogue
    python bench/map_dcat.py --skip-corpus --skip-records

Prints, as the "Figures" of docs/mappings/dcat.md:

1. **Golden corpus** (tests/data/dcat/profiles): for each document, its datasets, the share of
   input (property, value) pairs kept or rewritten by a named rule (the rest is reported),
   whether it meets DCAT-AP 2.1.1 (tests/data/dcat/dcat-ap-2.1.1.ttl) before, and how many of
   its records meet our DCAT-AP 3.0.1 shapes after (default profile, and with the optional
   class-range profile).
2. **Single records**: ``generate_dataset`` records (RDF/XML, ~75 triples), records/s on one
   core, as the OAI-PMH harvest maps them.
3. **Large catalogue**: a generated catalogue of N datasets (default 10,000) in one Turtle
   file, mapped as one collection document in a fresh process: documents/s, datasets/s and
   the peak RSS of that process.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "dcat"
URLS = {"relative.rdf": "https://harbour.example.org/catalogue/records/harbour.rdf"}


def corpus() -> None:
    import pyoxigraph as ox

    from aggregator.core.models import MappedDataset, RawRecord
    from aggregator.mapping.base import MappingContext
    from aggregator.mapping.dcat import DcatMapper, canonical_quads
    from aggregator.mapping.dcat.accounting import account
    from aggregator.mapping.dcat.input import parse_document
    from aggregator.validate.shacl import ShaclValidator, ranges_shapes

    mapper = DcatMapper()
    ctx = MappingContext(base_iri="https://agg.example.org/", source="golden")
    v211 = ShaclValidator(shapes=[DATA / "dcat-ap-2.1.1.ttl"])
    v3 = ShaclValidator()
    v3r = ShaclValidator(extra_shapes=[ranges_shapes()])
    total = kept = rewritten = reported = 0
    before_ok = after_ok = 0
    docs = sorted(p for p in (DATA / "profiles").iterdir() if p.suffix != ".py")
    print("| document | datasets | input triples | kept | rewritten | reported "
          "| DCAT-AP 2.1.1 before | DCAT-AP 3.0.1 after | + class ranges |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---|---|---|")
    for path in docs:
        raw = RawRecord(
            "golden", path.name, "dcat", path.read_bytes(), "",
            url=URLS.get(path.name, f"https://golden.example.org/{path.name}"),
            is_collection=True,
        )  # fmt: skip
        out = mapper.map(raw, ctx)
        acc = account(raw, out, mapper.rules)
        assert acc.unaccounted == 0, path
        quads = parse_document(raw.payload, raw.media_type, raw.url).quads
        whole = MappedDataset(path.name, path.name, canonical_quads(quads), "")
        before = v211.validate_graph(whole)
        bad = sum(1 for f in before.findings if f.severity.value == "violation")
        after = sum(v3.validate_graph(m).conforms for m in out)
        strict = sum(v3r.validate_graph(m).conforms for m in out)
        total, kept = total + acc.total, kept + acc.kept
        rewritten, reported = rewritten + acc.rewritten, reported + acc.reported
        before_ok += before.conforms
        after_ok += after == len(out)
        verdict = "meets" if before.conforms else f"fails ({bad} violations)"
        print(
            f"| {path.name} | {len(out)} | {acc.total} | {acc.kept} | {acc.rewritten} "
            f"| {acc.reported} | {verdict} | {after}/{len(out)} records conform "
            f"| {strict}/{len(out)} |"
        )
    share = (kept + rewritten) / total
    print(
        f"\ncorpus: {len(docs)} documents, {total} input triples: kept {kept}, rewritten "
        f"{rewritten}, reported {reported}; kept or rewritten {share:.2%}; documents meeting "
        f"DCAT-AP 2.1.1 before: {before_ok}; documents whose records all meet DCAT-AP 3.0.1 "
        f"after: {after_ok}"
    )
    del ox


def single_records(count: int) -> None:
    from aggregator.core.models import RawRecord
    from aggregator.demo.peers.sample_data import generate_dataset
    from aggregator.mapping.base import MappingContext
    from aggregator.mapping.dcat import DcatMapper

    mapper = DcatMapper()
    ctx = MappingContext(base_iri="https://agg.example.org/", source="bench")
    records = [
        RawRecord("bench", f"r{i}", "dcat", generate_dataset(i), "application/rdf+xml")
        for i in range(count)
    ]
    for record in records[:200]:
        mapper.map(record, ctx)
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for record in records:
            mapper.map(record, ctx)
        runs.append(time.perf_counter() - start)
    best = min(runs)
    print(
        f"\nsingle records (RDF/XML, ~75 triples): {count / best:,.0f} records/s "
        f"({best / count * 1e6:.0f} us per record, best of 5 runs of {count})"
    )


def write_catalogue(path: Path, datasets: int) -> int:
    """A catalogue of ``datasets`` generated DCAT-AP datasets in one Turtle file."""
    import pyoxigraph as ox

    from aggregator.demo.peers.sample_data import generate_dataset

    catalog = ox.NamedNode("https://data.example.org/catalogue")
    dcat = "http://www.w3.org/ns/dcat#"
    dct = "http://purl.org/dc/terms/"
    triples = [
        ox.Triple(catalog, ox.NamedNode(RDF + "type"), ox.NamedNode(dcat + "Catalog")),
        ox.Triple(catalog, ox.NamedNode(dct + "title"), ox.Literal("Generated", language="en")),
        ox.Triple(catalog, ox.NamedNode(dct + "description"), ox.Literal("Bench", language="en")),
        ox.Triple(
            catalog, ox.NamedNode(dct + "publisher"), ox.NamedNode("https://data.example.org/org")
        ),
    ]
    for index in range(datasets):
        quads = list(ox.parse(generate_dataset(index), format=ox.RdfFormat.RDF_XML))
        triples.extend(q.triple for q in quads)
        dataset = f"https://data.example.org/dataset/dataset-{index:06d}"
        triples.append(ox.Triple(catalog, ox.NamedNode(dcat + "dataset"), ox.NamedNode(dataset)))
    prefixes = {"dcat": dcat, "dct": dct, "foaf": "http://xmlns.com/foaf/0.1/"}
    triples = list(dict.fromkeys(triples))  # shared agents are described once
    ox.serialize(triples, output=str(path), format=ox.RdfFormat.TURTLE, prefixes=prefixes)
    return len(triples)


RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"


def _map_file(path: str, queue: Any) -> None:
    from aggregator.core.models import RawRecord
    from aggregator.mapping.base import MappingContext
    from aggregator.mapping.dcat import DcatMapper

    mapper = DcatMapper()
    ctx = MappingContext(base_iri="https://agg.example.org/", source="bench")
    payload = Path(path).read_bytes()
    record = RawRecord("bench", "catalogue", "dcat", payload, "text/turtle", is_collection=True)
    start = time.perf_counter()
    out = mapper.map(record, ctx)
    elapsed = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    queue.put((len(out), elapsed, rss, len(payload)))


def large_catalogue(datasets: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "catalogue.ttl"
        start = time.perf_counter()
        triples = write_catalogue(path, datasets)
        made = time.perf_counter() - start
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        proc = ctx.Process(target=_map_file, args=(str(path), queue))
        proc.start()
        count, elapsed, rss, size = queue.get()
        proc.join()
    print(
        f"\nlarge catalogue: {datasets:,} datasets, {triples:,} triples, {size / 1e6:.0f} MB of "
        f"Turtle (written in {made:.1f} s), mapped in one document in {elapsed:.1f} s: "
        f"{1 / elapsed:.3f} documents/s, {count / elapsed:,.0f} datasets/s; peak RSS of the "
        f"mapping process {rss / 1024:.0f} MB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=2_000)
    parser.add_argument("--skip-corpus", action="store_true")
    parser.add_argument("--skip-records", action="store_true")
    parser.add_argument("--skip-catalogue", action="store_true")
    args = parser.parse_args(argv)
    if not args.skip_corpus:
        corpus()
    if not args.skip_records:
        single_records(args.records)
    if not args.skip_catalogue:
        large_catalogue(args.datasets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
