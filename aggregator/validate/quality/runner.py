"""Run the MQA over the store: score every active record, keep the DQV measurements in the
store (one named graph per record, so analysts can query quality with SPARQL), and aggregate
per source and for the whole catalogue.

Link checks (reachability) are off unless asked for; they run here, outside any harvest, with
the per-host rate limit and the cache of :mod:`aggregator.validate.quality.reachability`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from aggregator.config import Settings
from aggregator.core.errors import StoreError
from aggregator.store.graphs import GraphContent
from aggregator.store.names import StoreNames
from aggregator.store.packing import unpack_findings, unpack_graph
from aggregator.store.records import RecordStore, StoreReads
from aggregator.validate.quality.aggregate import CatalogueAccumulator, QualityAggregate
from aggregator.validate.quality.dqv import METRICS_PATH, dqv_ntriples
from aggregator.validate.quality.mqa import QualityError, assess, link_urls
from aggregator.validate.quality.reachability import ReachabilityCache, ReachabilityChecker

BATCH = 500


@dataclass(frozen=True, slots=True)
class QualityRun:
    per_source: dict[str, QualityAggregate]
    catalogue: QualityAggregate
    errors: list[tuple[str, str, str]]  # (source, local_id, message)


def quality_graph_iri(store: StoreNames, record_iri: str) -> str:
    return record_iri.replace(f"{store.base_iri}record/", f"{store.base_iri}quality/", 1)


def run_quality(
    settings: Settings,
    store: StoreReads,
    *,
    source: str | None = None,
    check_links: bool = False,
    keep_measurements: bool = True,
    progress: Callable[[int], None] | None = None,
) -> QualityRun:
    writer = store if isinstance(store, RecordStore) else None
    if keep_measurements and writer is None:
        raise StoreError("keeping the measurements needs the store open read-write")
    acc = CatalogueAccumulator()
    errors: list[tuple[str, str, str]] = []
    checker = None
    if check_links:
        cache = ReachabilityCache(path=store.path / "reachability.sqlite3")
        checker = ReachabilityChecker(settings.http, cache=cache)
    now = datetime.now(UTC)
    clauses = "status = 'active'" + (" AND source = ?" if source else "")
    cur = store.db.conn.execute(
        f"SELECT id, source, local_id, record_iri, dataset_iri, ntriples, findings"
        f" FROM records WHERE {clauses} ORDER BY id",
        (source,) if source else (),
    )
    graphs: list[GraphContent] = []
    done = 0
    while rows := cur.fetchmany(BATCH):
        reach = None
        if checker is not None:
            urls: set[str] = set()
            for row in rows:
                urls |= link_urls(unpack_graph(row[5]))
            reach = checker.check(sorted(urls))
        for rid, src, local_id, record_iri, dataset_iri, packed, findings in rows:
            violations = [
                f for f in json.loads(unpack_findings(findings)) if f.get("severity") == "violation"
            ]
            try:
                q = assess(
                    unpack_graph(packed),
                    dataset_iri=dataset_iri,
                    reachability=reach,
                    dcat_ap_compliant=not violations,  # lenient sources store violators
                )
            except QualityError as err:
                errors.append((src, local_id, err.message))
                continue
            acc.add(src, q)
            if keep_measurements:
                graphs.append(
                    GraphContent(
                        quality_graph_iri(store, record_iri),
                        ((dqv_ntriples(q, generated_at=now), f"q{rid}"),),
                        True,
                    )
                )
        done += len(rows)
        if graphs and writer is not None:
            writer.graphs.replace(graphs)
            graphs = []
        if progress:
            progress(done)
    if writer is not None and keep_measurements:
        metrics = METRICS_PATH.read_bytes()
        from pyoxigraph import RdfFormat, parse, serialize

        nt = serialize(parse(metrics, format=RdfFormat.TURTLE), format=RdfFormat.N_TRIPLES)
        iri = f"{store.base_iri}quality/metrics"
        writer.graphs.replace([GraphContent(iri, ((nt or b"", "qm"),), True)])
        # measurements of records no longer active go: they describe nothing published
        gone = store.db.conn.execute(
            f"SELECT record_iri FROM records WHERE status != 'active'"
            f"{' AND source = ?' if source else ''}",
            (source,) if source else (),
        )
        names = writer.graphs.graph_names()
        stale = [g for (r,) in gone if (g := quality_graph_iri(store, r)) in names]
        if stale:
            writer.graphs.remove(stale)
        writer.graphs_changed()  # a generation of its own: readers see the measurements
    if checker is not None:
        checker.close()
    return QualityRun(acc.per_source(), acc.catalogue(), errors)
