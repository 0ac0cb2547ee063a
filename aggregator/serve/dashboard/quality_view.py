"""MQA scores per source and for the whole catalogue, with the most frequent shortcomings, for
the Quality page.

The scores are those of ``aggregator quality`` (:func:`aggregator.quality.mqa.assess` over every
active record, link checks not run), computed from the state database in the serving process
and kept until the store's generation changes (a harvest or a quality run wrote something):
one pass over the active records per change, then every view is free. A pass reads the records
500 at a time (memory stays flat).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass

from aggregator.quality.aggregate import CatalogueAccumulator, QualityAggregate
from aggregator.quality.indicators import INDICATORS_BY_KEY
from aggregator.quality.mqa import QualityError, assess
from aggregator.store.state import read_generation, unpack_graph

BATCH = 500


@dataclass(frozen=True, slots=True)
class QualityReport:
    generation: int
    per_source: dict[str, QualityAggregate]
    catalogue: QualityAggregate
    errors: int  # records that could not be assessed

    @staticmethod
    def label(key: str) -> str:
        found = INDICATORS_BY_KEY.get(key)
        return found.label if found else key


def compute(db: sqlite3.Connection) -> QualityReport:
    generation = read_generation(db)
    acc = CatalogueAccumulator()
    errors = 0
    cur = db.execute(
        "SELECT source, dataset_iri, ntriples, findings FROM records WHERE status = 'active'"
        " ORDER BY id"
    )
    while rows := cur.fetchmany(BATCH):
        for source, dataset_iri, packed, findings in rows:
            violations = any(f.get("severity") == "violation" for f in json.loads(findings))
            try:
                q = assess(
                    unpack_graph(packed), dataset_iri=dataset_iri, dcat_ap_compliant=not violations
                )
            except QualityError:
                errors += 1
                continue
            acc.add(source, q)
    return QualityReport(generation, acc.per_source(), acc.catalogue(), errors)


class QualityCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._report: QualityReport | None = None

    def report(self, db: sqlite3.Connection) -> QualityReport:
        with self._lock:
            if self._report is None or self._report.generation != read_generation(db):
                self._report = compute(db)
            return self._report
