"""Web Accessible Folder harvester: the ISO 19139 / GEMINI files an HTML listing links.

As the UK DMS collection interface says (paragraphs 32-40): the registered URL is fetched
(no response: the job fails), its body read as HTML, ``//a/@href`` links taken except those
containing ``/``, ``?``, ``#`` or ``mailto:`` (:mod:`aggregator.harvest.waf._listing`), each
file fetched; a document that is not well-formed XML is an error of that file, a
well-formed document that does not look like GEMINI is ignored. The record's local id is its
fileIdentifier, its datestamp the metadata date.

- A file is one ``gmd:MD_Metadata`` or ``gmi:MI_Metadata`` (ISO 19115-2) record, or a CSW
  ``GetRecordByIdResponse`` / ``GetRecordsResponse`` holding N of them
  (:mod:`aggregator.mapping.iso19139.records`): then it gives N records, each under its own
  fileIdentifier (one without: the file's URL and ``#`` its position), each kept as the
  record element alone, so the validation chain and the mapper see a bare record. An
  envelope with no ISO record is ignored like any other non-GEMINI document; a file that is
  an OWS exception report (a catalogue behind the folder failed) is noted and makes the
  listing truncated, so nothing is withdrawn on that run.

- A file that cannot be fetched (HTTP error, timeout, over the size cap) is noted on the job
  and makes the listing truncated: nothing is withdrawn on that run.
- A malformed or unsafe document (a DOCTYPE: external entities, entity bombs) is passed on
  as received, so the pipeline rejects it with the parse error as that record's error and
  keeps it in the dead-letter store: under the fileIdentifier the file held on the last run,
  else under the file's URL.
- Listing dates: the checkpoint keeps, per file, the listing date, fileIdentifier and
  metadata date of the last successful run. A file whose listing date has not changed and
  whose record the store holds at that metadata date is listed without being fetched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from aggregator.config import SourceConfig
from aggregator.core.errors import AggregatorError, ConfigError, TransportError
from aggregator.core.models import RawRecord
from aggregator.core.xml import parse_xml
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.gemini.records import parse_metadata_date, record_facts, serialise_embedded
from aggregator.harvest.waf._listing import WafEntry, read_listing
from aggregator.mapping.iso19139.records import NotIsoRecordError, iso_records

MEDIA_TYPE = "application/xml"
MAX_NOTED = 20  # per-file notes on one job; the rest are counted


@dataclass(frozen=True, slots=True)
class WafOptions:
    use_listing_dates: bool = True  # skip files whose listing date has not changed


def _load_state(checkpoint: str | None) -> dict[str, list[Any]]:
    if not checkpoint:
        return {}
    try:
        files = json.loads(checkpoint).get("files", {})
    except (ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


def _kept_records(previous: list[Any]) -> list[tuple[str, str | None]] | None:
    """(fileIdentifier, metadata date) of each record a file held on the last run.

    A file's checkpoint entry is ``[listed, identifier, stamp]`` for a bare record and
    ``[listed, [[identifier, stamp], ...]]`` for an envelope of records; None if unreadable."""
    if len(previous) == 3:
        return [(str(previous[1] or ""), previous[2])]
    if len(previous) == 2 and isinstance(previous[1], list):
        kept = [pair for pair in previous[1] if isinstance(pair, list) and len(pair) == 2]
        return [(str(i or ""), s) for i, s in kept] if kept else None
    return None


class WafHarvester(Harvester):
    name = "waf"
    formats: ClassVar[tuple[str, ...]] = ("iso19139",)
    Options = WafOptions

    @classmethod
    def check_config(cls, source: SourceConfig) -> None:
        parts = urlsplit(source.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"[sources.{source.name}]: url must be an http(s) WAF listing")
        super().check_config(source)

    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        options: WafOptions = self.options_of(self.source)
        page = self.http.get(self.source.url)
        entries = read_listing(page.content, page.url)
        listing.pages = 1
        listing.expected_total = len(entries)
        listing.incremental = False  # every file of the folder is listed on every run
        before = {} if request.full else _load_state(request.checkpoint)
        after: dict[str, list[Any]] = {}
        problems = 0
        for entry in entries:
            if request.cancel.is_set():
                listing.mark_truncated("cancelled")
                return
            previous = before.get(entry.name)
            kept = _kept_records(previous) if previous and options.use_listing_dates else None
            if previous and kept and self._unchanged(request, entry, previous, kept):
                after[entry.name] = previous
                for identifier, stamp in kept:
                    listing.seen += 1
                    yield self._omitted(entry, identifier, stamp)
                continue
            try:
                response = self.http.get(entry.url)
            except TransportError as err:
                problems += 1
                self._problem(listing, problems, f"{entry.name}: {err.message}")
                listing.mark_truncated(f"{problems} file(s) of the folder could not be fetched")
                if previous:
                    after[entry.name] = previous
                continue
            records, state = self._records(entry, response.content, previous, listing, request)
            if state is not None:
                after[entry.name] = state
            for record in records:
                listing.seen += 1
                yield record
        listing.next_checkpoint = json.dumps({"files": after}, sort_keys=True)
        listing.mark_complete()

    @staticmethod
    def _problem(listing: Listing, count: int, message: str) -> None:
        if count <= MAX_NOTED:
            listing.note(message)

    @staticmethod
    def _unchanged(
        request: HarvestRequest,
        entry: WafEntry,
        previous: list[Any],
        kept: list[tuple[str, str | None]],
    ) -> bool:
        if entry.listed is None or request.up_to_date is None:
            return False
        if previous[0] != entry.listed or not all(identifier for identifier, _ in kept):
            return False
        asked = [(i, parse_metadata_date(stamp or "")) for i, stamp in kept]
        return set(request.up_to_date(asked)) >= {i for i, _ in kept}

    def _omitted(self, entry: WafEntry, identifier: str, stamp: str | None) -> RawRecord:
        return RawRecord(
            source=self.source.name,
            local_id=identifier,
            format=self.source.format,
            payload=b"",
            media_type=MEDIA_TYPE,
            url=entry.url,
            datestamp=parse_metadata_date(stamp or ""),
            payload_omitted=True,
        )

    def _records(
        self,
        entry: WafEntry,
        body: bytes,
        previous: list[Any] | None,
        listing: Listing,
        request: HarvestRequest,
    ) -> tuple[list[RawRecord], list[Any] | None]:
        """The records a fetched file makes (none: ignored) and its state for the checkpoint."""
        # its identifier is inside: a file over the record size limit is not parsed for it
        # (a file of many small elements costs many times its size in memory) but passed on
        # under the identifier it had, for the pipeline to refuse with that limit
        limit = request.limits.max_record_bytes
        if len(body) > limit:
            return self._unparsed(
                entry, body, previous, listing, f"{len(body):,} bytes, over {limit:,}"
            )
        try:
            root = parse_xml(body, url=entry.url)
        except AggregatorError as err:
            # passed on as received: the pipeline rejects it with this parse error
            return self._unparsed(entry, body, previous, listing, err.message)
        try:
            document = iso_records(root, entry.name)
        except NotIsoRecordError as err:
            if err.found == "other":
                listing.note(f"{entry.name}: not a GEMINI document (<{root.tag}>): ignored")
            elif err.found == "empty":
                listing.note(f"{err.message}: ignored")
            else:  # the records this file stands for could not be read: withdraw nothing
                listing.note(err.message)
                listing.mark_truncated(f"{entry.name} is an OWS exception report")
                if previous:
                    return [], previous
            return [], None
        records: list[RawRecord] = []
        kept: list[list[Any]] = []
        for number, element in enumerate(document.records, start=1):
            facts = record_facts(element)
            identifier = facts.file_identifier
            if not identifier:
                identifier = f"{entry.url}#{number}" if document.is_envelope else entry.url
                listing.note(f"{entry.name}: no fileIdentifier; kept under {identifier}")
            # a record of an envelope is kept alone: validated and mapped as a bare record
            payload = serialise_embedded(element) if document.is_envelope else body
            records.append(self._raw(identifier, payload, entry.url, facts.date_stamp))
            kept.append([identifier, facts.date_stamp.isoformat() if facts.date_stamp else None])
        if document.others:
            listing.note(f"{entry.name}: {', '.join(document.others)} of the envelope ignored")
        if document.is_envelope:
            return records, [entry.listed, kept]
        return records, [entry.listed, *kept[0]]

    def _unparsed(
        self,
        entry: WafEntry,
        body: bytes,
        previous: list[Any] | None,
        listing: Listing,
        why: str,
    ) -> tuple[list[RawRecord], None]:
        """A file passed on as received, under the identifier it had (else its URL)."""
        listing.note(f"{entry.name}: {why}")
        identifier = previous[1] if previous and len(previous) == 3 else entry.url
        return [self._raw(identifier, body, entry.url, None)], None

    def _raw(self, identifier: str, body: bytes, url: str, stamp: datetime | None) -> RawRecord:
        return RawRecord(
            source=self.source.name,
            local_id=identifier,
            format=self.source.format,
            payload=body,
            media_type=MEDIA_TYPE,
            url=url,
            datestamp=stamp,
        )
