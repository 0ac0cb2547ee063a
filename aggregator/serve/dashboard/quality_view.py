"""MQA scores per source and for the whole catalogue, with the most frequent shortcomings, for
the Quality page.

The scores are those of ``aggregator quality`` (:func:`aggregator.validate.quality.mqa.assess`
over every active record, link checks not run), computed from the state database in the serving
process and kept until the store's generation changes (a harvest or a quality run wrote
something), but at most every ``REFRESH`` seconds: a harvest changes the generation with every
batch, and a pass over a large store costs seconds of CPU (docs/benchmarks.md#dashboard).
The page says when its scores were computed. A pass reads the records 500 at a time (memory
stays flat).

The dashboard runs no link check, so the indicators that need one (:data:`NOT_CHECKED_HERE`)
are not measured here: they are never a shortcoming on these pages (a dataset without a
download URL fails "Download URL" already), and the pages list them as not checked. Scores
are shown on the MQA's scale (``x / 405``, a dimension ``x / its points``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from aggregator.store.packing import unpack_findings, unpack_graph
from aggregator.store.state import read_generation
from aggregator.validate.quality.aggregate import (
    CatalogueAccumulator,
    QualityAggregate,
    Shortcoming,
)
from aggregator.validate.quality.indicators import (
    DIMENSION_POINTS,
    INDICATORS_BY_KEY,
    MAX_POINTS,
    RATING_BANDS,
    Dimension,
    Indicator,
)
from aggregator.validate.quality.mqa import QualityError, assess

BATCH = 500
REFRESH = 600.0  # seconds a report is kept while the store changes under it
#: indicators measured by a link check (``aggregator quality --check-links``), not run here
NOT_CHECKED_HERE: tuple[Indicator, ...] = tuple(
    INDICATORS_BY_KEY[k] for k in ("accessUrlReachable", "downloadUrlReachable")
)
_NOT_CHECKED_KEYS = frozenset(i.key for i in NOT_CHECKED_HERE)


def measured(shortcomings: tuple[Shortcoming, ...]) -> list[Shortcoming]:
    """The shortcomings of what the dashboard measures (no link-check indicator)."""
    return [s for s in shortcomings if s.key not in _NOT_CHECKED_KEYS]


@dataclass(frozen=True, slots=True)
class QualityReport:
    generation: int
    computed: str  # UTC stamp
    per_source: dict[str, QualityAggregate]
    catalogue: QualityAggregate
    errors: int  # records that could not be assessed

    max_points = MAX_POINTS
    bands = RATING_BANDS  # (lowest score, rating), best first
    not_checked = NOT_CHECKED_HERE

    @staticmethod
    def label(key: str) -> str:
        found = INDICATORS_BY_KEY.get(key)
        return found.label if found else key

    @staticmethod
    def dimension_points(dimension: Dimension) -> int:
        return DIMENSION_POINTS[dimension]

    @staticmethod
    def shortcomings(aggregate: QualityAggregate) -> list[Shortcoming]:
        return measured(aggregate.shortcomings)

    @property
    def best_here(self) -> int:
        """The best score a dataset can reach without link checks."""
        return MAX_POINTS - sum(i.points for i in NOT_CHECKED_HERE)


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
            violations = any(
                f.get("severity") == "violation" for f in json.loads(unpack_findings(findings))
            )
            try:
                q = assess(
                    unpack_graph(packed), dataset_iri=dataset_iri, dcat_ap_compliant=not violations
                )
            except QualityError:
                errors += 1
                continue
            acc.add(source, q)
    computed = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return QualityReport(generation, computed, acc.per_source(), acc.catalogue(), errors)


class QualityCache:
    def __init__(self, refresh: float = REFRESH) -> None:
        self.refresh = refresh
        self._lock = threading.Lock()
        self._report: QualityReport | None = None
        self._at = 0.0

    def report(self, db: sqlite3.Connection) -> QualityReport:
        """The report; computed again when the store changed and the last one is older than
        ``refresh`` seconds (one pass at a time per process)."""
        with self._lock:
            report = self._report
            stale = report is None or report.generation != read_generation(db)
            if stale and (report is None or time.monotonic() - self._at >= self.refresh):
                self._report = report = compute(db)
                self._at = time.monotonic()
            assert report is not None
            return report

    def changed_since(self, db: sqlite3.Connection) -> bool:
        report = self._report
        return report is not None and report.generation != read_generation(db)
