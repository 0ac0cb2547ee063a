"""Single GEMINI document harvester: one ISO 19139 record at one URL.

The UK DMS collection interface, paragraphs 41-45: the registered URL is fetched (no
response: an error), the body must be well-formed XML (else an error) and must look like a
GEMINI document, ``gmd:MD_Metadata`` (else an error, unlike a WAF, where such a file is
ignored). Every error fails the job with the document's URL in the message; nothing is
withdrawn then. The record's local id is its fileIdentifier, its datestamp the metadata date.
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
from aggregator.harvest.gemini import looks_like_gemini, record_facts


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
        if not looks_like_gemini(root):
            raise HarvestError(
                f"{response.url}: not a GEMINI document (root <{root.tag}>, expected"
                " gmd:MD_Metadata)",
                code="notGemini",
            )
        facts = record_facts(root)
        if not facts.file_identifier:
            raise HarvestError(
                f"{response.url}: the GEMINI document has no fileIdentifier", code="noIdentifier"
            )
        listing.expected_total = 1
        listing.seen = 1
        yield RawRecord(
            source=self.source.name,
            local_id=facts.file_identifier,
            format=self.source.format,
            payload=response.content,
            media_type="application/xml",
            url=response.url,
            datestamp=facts.date_stamp,
        )
        listing.mark_complete()
