"""Preview a source before saving it: fetch its first page, map and validate what it holds,
and say what a harvest would store, without writing anything (no store, no job, no file).

It uses the same harvester, HTTP session (guards, size caps, timeouts), mapper and validation
chain as a harvest (:func:`aggregator.jobs.processing.process`), so what it shows is what a harvest
would do with those records; it stops after the first page or ``limit`` records.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from pyoxigraph import Literal, NamedNode, RdfFormat, parse

from aggregator.config import Settings, SourceConfig
from aggregator.core.errors import AggregatorError
from aggregator.core.models import Finding, RawRecord
from aggregator.core.vocab import DCT
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.jobs.processing import mapping_context, process
from aggregator.net.client import HttpClient
from aggregator.plugin import harvesters
from aggregator.validate.policy import Verdict

LIMIT = 20


@dataclass(frozen=True, slots=True)
class PreviewDataset:
    iri: str
    title: str
    triples: int
    verdict: Verdict  # the source's policy on its findings (validate/policy.py)
    findings: tuple[Finding, ...]

    @property
    def conforms(self) -> bool:
        return self.verdict is not Verdict.REJECT


@dataclass(frozen=True, slots=True)
class PreviewRecord:
    local_id: str
    deleted: bool
    datasets: tuple[PreviewDataset, ...]
    failure: tuple[Finding, ...]

    @property
    def outcome(self) -> str:
        if self.deleted:
            return "deleted at the source (would be withdrawn)"
        if self.failure:
            return "would be rejected"
        if any(d.verdict is Verdict.REJECT for d in self.datasets):
            return "would be rejected (validation)"
        if any(d.verdict is Verdict.FLAG for d in self.datasets):
            return "would be stored, flagged (violations to fix)"
        return "would be stored"


@dataclass
class Preview:
    source: str
    records: list[PreviewRecord] = field(default_factory=list)
    pages: int = 0
    expected_total: int | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def stored(self) -> int:
        return sum(r.outcome.startswith("would be stored") for r in self.records)


def _title(ntriples: bytes, iri: str) -> str:
    titles = [
        q.object
        for q in parse(ntriples, format=RdfFormat.N_TRIPLES)
        if q.subject == NamedNode(iri) and q.predicate.value == DCT + "title"
    ]
    for lang in ("en", ""):
        for t in titles:
            if isinstance(t, Literal) and (t.language or "") == lang:
                return t.value
    return titles[0].value if titles else "(no title)"


def _first_page(records: Iterator[RawRecord], listing: Listing, limit: int) -> Iterator[RawRecord]:
    for n, raw in enumerate(records):
        if n >= limit or listing.pages > 1:
            return
        yield raw


def preview_source(settings: Settings, src: SourceConfig, limit: int = LIMIT) -> Preview:
    out = Preview(src.name)
    request = HarvestRequest(full=True, checkpoint=None)
    listing = Listing(incremental=False)
    ctx = mapping_context(settings, src)  # the harvest's, categorisation included
    http = HttpClient(settings.http)
    try:
        harvester_class = harvesters.get(src.type)
        harvester = harvester_class(src, harvester_class.open_session(http, src))
        records = harvester.list_records(request, listing)
        try:
            for raw in _first_page(records, listing, limit):
                if raw.deleted:
                    out.records.append(PreviewRecord(raw.local_id, True, (), ()))
                    continue
                result = process(raw, ctx, src.validation, policy=src.policy)
                datasets = tuple(
                    PreviewDataset(
                        c.dataset.dataset_iri,
                        _title(c.dataset.ntriples, c.dataset.dataset_iri),
                        c.dataset.ntriples.count(b"\n"),
                        c.verdict,
                        c.findings,
                    )
                    for c in result.checked
                )
                out.records.append(PreviewRecord(raw.local_id, False, datasets, result.failure))
        finally:
            request.cancel.set()
            close = getattr(records, "close", None)
            if close is not None:
                close()
    except AggregatorError as err:
        out.error = err.message
    out.pages = listing.pages
    out.expected_total = listing.expected_total
    out.notes = list(listing.notes)
    return out
