"""The ``jsonl`` harvester: one GET, one JSON object per line, one record per object."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from aggregator.plugin import (
    ConfigError,
    Harvester,
    HarvestError,
    HarvestRequest,
    Listing,
    RawRecord,
    SourceConfig,
    dump_record,
    load_page,
)

FORMAT = "jsonl-dataset"


@dataclass(frozen=True, slots=True)
class JsonLinesOptions:
    """The source's ``options`` table, checked when the configuration is loaded."""

    id_field: str = "id"  # the key of each object that holds the record's identifier

    def __post_init__(self) -> None:
        if not self.id_field:
            raise ValueError("id_field must not be empty")


class JsonLinesHarvester(Harvester):
    name: ClassVar[str] = "jsonl"
    formats: ClassVar[tuple[str, ...]] = (FORMAT,)
    Options: ClassVar[type[Any] | None] = JsonLinesOptions

    @classmethod
    def check_config(cls, source: SourceConfig) -> None:
        super().check_config(source)  # the options, against JsonLinesOptions
        if not source.url.startswith(("http://", "https://")):
            raise ConfigError(f"sources.{source.name}.url: expected an http(s) URL")

    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        # self.http is the source's own session: SSRF guard, timeouts, size cap, retries.
        id_field = self.options_of(self.source).id_field
        response = self.http.get(self.source.url)
        listing.pages = 1
        for number, line in enumerate(response.content.splitlines(), start=1):
            if request.cancel.is_set():
                listing.mark_truncated("cancelled")
                return
            if not line.strip():
                continue
            try:
                item = load_page(line)
            except ValueError as err:
                # A line we cannot read has no id: we cannot tell which record it was, so
                # the listing is not complete and nothing may be withdrawn after it.
                listing.mark_truncated(f"line {number} is not JSON: {err}")
                continue
            if not isinstance(item, dict) or not isinstance(item.get(id_field), str):
                raise HarvestError(f"line {number}: expected an object with a string {id_field!r}")
            listing.seen += 1
            yield RawRecord(
                source=self.source.name,
                local_id=item[id_field],
                format=FORMAT,
                payload=dump_record(item),
                media_type="application/json",
                url=self.source.url,
                datestamp=_datestamp(item.get("modified")),
                deleted=item.get("deleted") is True,
            )
        listing.mark_complete()


def _datestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
