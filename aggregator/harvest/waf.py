"""Web Accessible Folder harvester: the ISO 19139 / GEMINI files an HTML listing links.

As the UK DMS collection interface says (paragraphs 32-40): the registered URL is fetched
(no response: the job fails), its body read as HTML, ``//a/@href`` links taken except those
containing ``/``, ``?``, ``#`` or ``mailto:`` (:mod:`aggregator.harvest.waf_listing`), each
file fetched; a document that is not well-formed XML is an error of that file, a
well-formed document that does not look like GEMINI (root not ``gmd:MD_Metadata``) is
ignored. The record's local id is its fileIdentifier, its datestamp the metadata date.

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
from aggregator.harvest.gemini import looks_like_gemini, parse_metadata_date, record_facts
from aggregator.harvest.waf_listing import WafEntry, read_listing

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
            if options.use_listing_dates and previous and self._unchanged(request, entry, previous):
                after[entry.name] = previous
                listing.seen += 1
                yield self._omitted(entry, previous)
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
            record, state = self._record(entry, response.content, previous, listing, request)
            if state is not None:
                after[entry.name] = state
            if record is not None:
                listing.seen += 1
                yield record
        listing.next_checkpoint = json.dumps({"files": after}, sort_keys=True)
        listing.mark_complete()

    @staticmethod
    def _problem(listing: Listing, count: int, message: str) -> None:
        if count <= MAX_NOTED:
            listing.note(message)

    @staticmethod
    def _unchanged(request: HarvestRequest, entry: WafEntry, previous: list[Any]) -> bool:
        if entry.listed is None or request.up_to_date is None or len(previous) != 3:
            return False
        listed, identifier, stamp = previous
        if listed != entry.listed or not identifier:
            return False
        return identifier in request.up_to_date([(identifier, parse_metadata_date(stamp or ""))])

    def _omitted(self, entry: WafEntry, previous: list[Any]) -> RawRecord:
        _, identifier, stamp = previous
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

    def _record(
        self,
        entry: WafEntry,
        body: bytes,
        previous: list[Any] | None,
        listing: Listing,
        request: HarvestRequest,
    ) -> tuple[RawRecord | None, list[Any] | None]:
        """The record a fetched file makes (None: ignored) and its state for the checkpoint."""
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
        if not looks_like_gemini(root):
            listing.note(f"{entry.name}: not a GEMINI document (<{root.tag}>): ignored")
            return None, None
        facts = record_facts(root)
        if not facts.file_identifier:
            listing.note(f"{entry.name}: no fileIdentifier; kept under the file's URL")
        identifier = facts.file_identifier or entry.url
        stamp = facts.date_stamp.isoformat() if facts.date_stamp else None
        record = self._raw(identifier, body, entry.url, facts.date_stamp)
        return record, [entry.listed, identifier, stamp]

    def _unparsed(
        self,
        entry: WafEntry,
        body: bytes,
        previous: list[Any] | None,
        listing: Listing,
        why: str,
    ) -> tuple[RawRecord, None]:
        """A file passed on as received, under the identifier it had (else its URL)."""
        listing.note(f"{entry.name}: {why}")
        identifier = previous[1] if previous and len(previous) == 3 else entry.url
        return self._raw(identifier, body, entry.url, None), None

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
