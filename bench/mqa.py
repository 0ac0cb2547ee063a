"""MQA computation rate on generated DCAT-AP datasets (datasets/s).

Generates N datasets with ``sample_data.generate_dataset`` (~75 triples, 2-4 distributions),
maps them with the dcat mapper (not timed) and times, one dataset at a time, as the
``aggregator quality`` command would run them:

* ``assess``: parse the canonical N-Triples, evaluate the 23 indicators on the dataset and on
  every distribution, pick the best distribution (a reachability map and a SHACL verdict given);
* ``assess + dqv``: the same plus the DQV measurements as N-Triples;
* ``assess + aggregate``: the same plus feeding the per-source/catalogue accumulator.

    .venv/bin/python bench/mqa.py --datasets 5000 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aggregator.core.models import RawRecord  # noqa: E402
from aggregator.demo.peers.sample_data import generate_dataset  # noqa: E402
from aggregator.mapping.base import MappingContext  # noqa: E402
from aggregator.mapping.dcat import DcatMapper  # noqa: E402
from aggregator.validate.quality import (  # noqa: E402
    CatalogueAccumulator,
    assess,
    default_vocabularies,
    dqv_ntriples,
    link_urls,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    mapper = DcatMapper()
    ctx = MappingContext(base_iri="https://agg.example.org/", source="bench")
    graphs: list[tuple[str, bytes]] = []
    for i in range(args.datasets):
        raw = RawRecord("bench", f"r{i}", "dcat", generate_dataset(i), "application/rdf+xml")
        for mapped in mapper.map(raw, ctx):
            graphs.append((mapped.dataset_iri, mapped.ntriples))
    links = {url: True for _, nt in graphs for url in link_urls(nt)}
    vocabs = default_vocabularies()
    when = datetime.now(UTC)
    triples = sum(nt.count(b"\n") for _, nt in graphs) / len(graphs)
    print(f"{len(graphs)} datasets, {triples:.0f} triples each on average, {len(links)} URLs")

    def run_assess() -> None:
        for iri, nt in graphs:
            assess(
                nt, dataset_iri=iri, reachability=links, dcat_ap_compliant=True, vocabularies=vocabs
            )

    def run_dqv() -> None:
        for iri, nt in graphs:
            q = assess(
                nt, dataset_iri=iri, reachability=links, dcat_ap_compliant=True, vocabularies=vocabs
            )
            dqv_ntriples(q, generated_at=when)

    def run_aggregate() -> None:
        acc = CatalogueAccumulator()
        for n, (iri, nt) in enumerate(graphs):
            q = assess(
                nt, dataset_iri=iri, reachability=links, dcat_ap_compliant=True, vocabularies=vocabs
            )
            acc.add(f"source-{n % 7}", q)
        acc.per_source()
        acc.catalogue()

    print(f"{'step':<22} {'datasets/s':>12} {'us/dataset':>12}   (median of {args.runs} runs)")
    for name, fn in (
        ("assess", run_assess),
        ("assess + dqv", run_dqv),
        ("assess + aggregate", run_aggregate),
    ):
        rates = []
        for _ in range(args.runs):
            start = time.perf_counter()
            fn()
            rates.append(len(graphs) / (time.perf_counter() - start))
        rate = statistics.median(rates)
        print(f"{name:<22} {rate:>12,.0f} {1e6 / rate:>12.0f}")


if __name__ == "__main__":
    main()
