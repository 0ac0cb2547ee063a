"""Single GEMINI document harvester: one ISO 19139 record at one URL.

The UK DMS collection interface, paragraphs 41-45: the registered URL is fetched (no
response: an error), the body must be well-formed XML (else an error) and must look like a
GEMINI document, ``gmd:MD_Metadata`` or ``gmi:MI_Metadata`` (else an error, unlike a WAF,
where such a file is ignored). Every error fails the job with the document's URL in the
message; nothing is withdrawn then. The record's local id is its fileIdentifier, its datestamp
the metadata date.

A document that is a CSW ``GetRecordByIdResponse`` / ``GetRecordsResponse`` with N ISO
records (:mod:`aggregator.mapping.iso19139.records`) gives N records, each under its own
fileIdentifier and kept as the record element alone (so it is validated and mapped as a bare
record): the source then stands for those N records, and one that leaves the document is
withdrawn like a record gone from a WAF. Every record must have a fileIdentifier. An envelope
with no ISO record or an OWS exception report is an error naming what the document holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar
from urllib.parse import urlsplit

from aggregator.config import SourceConfig
from aggregator.core.errors import AggregatorError, ConfigError, HarvestError
from aggregator.core.models import RawRecord
from aggregator.core.xml import parse_xml
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.gemini.records import record_facts, serialise_embedded
from aggregator.mapping.iso19139.records import NotIsoRecordError, iso_records


class GeminiDocHarvester(Harvester):
    name = "gemini-doc"
    formats: ClassVar[tuple[str, ...]] = ("iso19139",)

    @classmethod
    def check_config(cls, source: SourceConfig) -> None:
        parts = urlsplit(source.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"[sources.{source.name}]: url must be an http(s) document URL")
        super().check_config(source)

    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        response = self.http.get(self.source.url)
        listing.pages = 1
        try:
            root = parse_xml(response.content, url=response.url)
        except AggregatorError as err:
            raise HarvestError(
                f"{response.url}: not a well-formed XML document: {err.message}", code=err.code
            ) from err
        try:
            document = iso_records(root, response.url)
        except NotIsoRecordError as err:
            prefix = "not a GEMINI document: " if err.found == "other" else ""
            raise HarvestError(prefix + err.message, code="notGemini") from err
        found = [(element, record_facts(element)) for element in document.records]
        for number, (_, facts) in enumerate(found, start=1):
            if not facts.file_identifier:
                which = f"record {number} of the {document.envelope}" if document.envelope else ""
                raise HarvestError(
                    f"{response.url}: {which or 'the GEMINI document'} has no fileIdentifier",
                    code="noIdentifier",
                )
        listing.expected_total = len(found)
        for element, facts in found:
            listing.seen += 1
            yield RawRecord(
                source=self.source.name,
                local_id=facts.file_identifier,
                format=self.source.format,
                # a record of an envelope is kept alone: validated and mapped as a bare record
                payload=serialise_embedded(element) if document.is_envelope else response.content,
                media_type="application/xml",
                url=response.url,
                datestamp=facts.date_stamp,
            )
        listing.mark_complete()
