"""Harvest an OGC API - Records catalogue: ``/collections/{collectionId}/items``, page by page.

1. ``/conformance`` and ``/collections`` are read first (as at registration: ``aggregator
   source add --probe``): the conformance classes are noted on the job, the configured
   collection must exist (without one, every collection whose ``itemType`` is ``record`` is
   harvested).
2. The first page is ``{items}?limit=N&f=json`` (``Accept: application/geo+json``; the
   collection's ``rel="items"`` link when it gives one), with ``datetime=SINCE/..`` on an
   incremental run. Every later page is the ``rel="next"`` link of the page before, followed
   **verbatim** (cursors may be opaque tokens; a relative href is resolved against the page).
3. Each feature becomes one JSON payload (format ``ogc-records``), identified by its ``id``; a
   feature without a usable ``id`` is still delivered (as ``malformed-<hash>``), so its
   mapping fails as a per-record error instead of vanishing.
4. The listing is complete when a page has no ``next`` link, no link was followed twice, and
   the distinct ids add up to ``numberMatched`` where the server gives it.

Incremental runs and the due full run work as for CKAN (:mod:`.checkpoints`).
See docs/protocols/ogc-records.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import quote, urljoin

from aggregator.core.errors import HarvestError
from aggregator.core.input_limits import dump_record, load_page
from aggregator.core.models import RawRecord
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.checkpoints import Checkpoint
from aggregator.harvest.ckan import parse_datestamp
from aggregator.net.client import Response

GEOJSON = "application/geo+json"
ACCEPT = f"{GEOJSON}, application/json;q=0.9"
RECORDS_CORE = "http://www.opengis.net/spec/ogcapi-records-1/1.0/conf/record-core"
MAX_PAGES = 1_000_000


@dataclass(frozen=True, slots=True)
class OgcRecordsOptions:
    collection: str | None = None  # None: every collection whose itemType is "record"
    limit: int = 100
    full_every_days: int = 7
    f_param: bool = True  # send f=json as well as the Accept header

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= 10_000:
            raise ValueError("limit must be from 1 to 10000")
        if self.full_every_days < 0:
            raise ValueError("full_every_days must be 0 (never) or more")


def decode(response: Response, what: str) -> dict[str, Any]:
    """A JSON object answer, or HarvestError/TransportError with the response excerpt."""
    if response.status >= 400:
        raise response.status_error(what)
    try:
        doc = load_page(response.content)  # an over-long integer stays in its record
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise HarvestError(f"{what} did not answer JSON ({err}): {response.excerpt}") from err
    if not isinstance(doc, dict):
        raise HarvestError(f"{what} answered JSON that is not an object: {response.excerpt}")
    return doc


def link(doc: Mapping[str, Any], rel: str) -> str | None:
    """The href of the first link with ``rel`` (JSON preferred when several)."""
    links = doc.get("links")
    found = [
        x for x in (links if isinstance(links, list) else [])
        if isinstance(x, dict) and x.get("rel") == rel and isinstance(x.get("href"), str)
    ]  # fmt: skip
    if not found:
        return None
    for candidate in found:
        if "json" in str(candidate.get("type", "json")):
            return str(candidate["href"])
    return str(found[0]["href"])


@dataclass(frozen=True, slots=True)
class ServiceDescription:
    """What ``/conformance`` and ``/collections`` say (the registration check)."""

    conforms_to: tuple[str, ...]
    collections: Mapping[str, Mapping[str, Any]]

    @property
    def records_core(self) -> bool:
        return any(c.startswith(RECORDS_CORE) for c in self.conforms_to)


class OgcRecordsHarvester(Harvester):
    """OGC API - Records (Part 1) items of a collection -> one GeoJSON record per feature."""

    name: ClassVar[str] = "ogc-records"
    formats: ClassVar[tuple[str, ...]] = ("ogc-records",)
    Options: ClassVar[type[Any] | None] = OgcRecordsOptions

    @property
    def base(self) -> str:
        return self.source.url.rstrip("/") + "/"

    def _get(self, url: str, what: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        response = self.http.get(
            url, params=params, headers={"Accept": ACCEPT}, raise_for_status=False
        )
        return decode(response, what)

    def describe(self) -> ServiceDescription:
        """Read ``/conformance`` and ``/collections`` (HarvestError when they are unusable)."""
        opts: OgcRecordsOptions = self.options_of(self.source)
        params = {"f": "json"} if opts.f_param else None
        conformance = self._get(self.base + "conformance", "/conformance", params)
        conforms = conformance.get("conformsTo")
        if not isinstance(conforms, list):
            raise HarvestError(f"{self.base}conformance lists no conformsTo")
        listed = self._get(self.base + "collections", "/collections", params).get("collections")
        if not isinstance(listed, list):
            raise HarvestError(f"{self.base}collections lists no collections")
        collections = {
            str(c["id"]): c for c in listed if isinstance(c, dict) and isinstance(c.get("id"), str)
        }
        return ServiceDescription(tuple(str(c) for c in conforms), collections)

    def chosen(self, service: ServiceDescription) -> list[str]:
        opts: OgcRecordsOptions = self.options_of(self.source)
        if opts.collection is not None:
            if opts.collection not in service.collections:
                offered = ", ".join(sorted(service.collections)) or "none"
                raise HarvestError(
                    f"{self.base}collections has no collection {opts.collection!r}"
                    f" (offered: {offered})"
                )
            return [opts.collection]
        records = [k for k, c in service.collections.items() if c.get("itemType") == "record"]
        if not records:
            raise HarvestError(
                f"{self.base}collections has no collection of itemType 'record';"
                " name one with the 'collection' option"
            )
        return records

    def probe(self) -> list[str]:
        """``/conformance`` and ``/collections``, and the collections a harvest would read."""
        service = self.describe()
        chosen = self.chosen(service)
        lines = [f"conformance: {c}" for c in service.conforms_to]
        if not service.records_core:
            lines.append("warning: no OGC API - Records record-core conformance class declared")
        for key, collection in sorted(service.collections.items()):
            mark = "harvested" if key in chosen else "not harvested"
            title = collection.get("title") or ""
            kind = collection.get("itemType") or "?"
            lines.append(f"collection {key} ({kind}, {mark}): {title}")
        return lines

    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        opts: OgcRecordsOptions = self.options_of(self.source)
        service = self.describe()
        listing.note(
            f"conformance: {len(service.conforms_to)} classes"
            + ("" if service.records_core else " (no Records record-core class declared)")
        )
        previous = None if request.full else Checkpoint.read(request.checkpoint)
        now = datetime.now(UTC)
        since = previous.since if previous else None
        if previous is not None and previous.full_due(opts.full_every_days, now):
            listing.note(f"full run due (last full run: {previous.full_at or 'never'})")
            since = None
        listing.incremental = since is not None
        newest: list[str] = [since] if since else []
        complete = True
        for collection in self.chosen(service):
            complete &= yield from self._collection(
                collection, service.collections[collection], opts, since, request, listing, newest
            )
            if not complete:
                break
        if complete and not request.cancel.is_set():
            listing.mark_complete()
        full_at = (
            now.isoformat() if not listing.incremental else (previous.full_at if previous else None)
        )
        listing.next_checkpoint = Checkpoint(max(newest) if newest else None, full_at).dump()

    def _collection(
        self,
        collection: str,
        description: Mapping[str, Any],
        opts: OgcRecordsOptions,
        since: str | None,
        request: HarvestRequest,
        listing: Listing,
        newest: list[str],
    ) -> Generator[RawRecord, None, bool]:
        items = link(description, "items")
        url = (
            urljoin(self.base + "collections/", items)
            if items
            else (f"{self.base}collections/{quote(collection, safe='')}/items")
        )
        first: dict[str, str] = {"limit": str(opts.limit)}
        if opts.f_param:
            first["f"] = "json"
        if since:
            first["datetime"] = f"{since}/.."
        params: dict[str, str] | None = first
        followed: set[str] = set()
        seen: set[str] = set()
        matched: int | None = None
        for _ in range(MAX_PAGES):
            if request.cancel.is_set():
                listing.mark_truncated("cancelled")
                return False
            page = self._get(url, f"items of collection {collection!r} at {url}", params)
            listing.pages += 1
            features = page.get("features")
            if not isinstance(features, list):
                raise HarvestError(f"{url}: the answer has no 'features' list")
            if matched is None and isinstance(page.get("numberMatched"), int):
                matched = page["numberMatched"]
                listing.expected_total = (listing.expected_total or 0) + matched
            yield from self._records(features, url, request, listing, seen, newest)
            nxt = link(page, "next")
            if nxt is None or not features:
                break
            nxt = urljoin(url, nxt)  # verbatim; only a relative href is resolved
            if nxt in followed:
                listing.mark_truncated(f"the next link of collection {collection!r} loops: {nxt}")
                return False
            followed.add(nxt)
            url, params = nxt, None
        if matched is not None and len(seen) != matched:
            listing.mark_truncated(
                f"collection {collection!r}: {len(seen)} distinct records read,"
                f" numberMatched = {matched}"
            )
            return False
        return True

    def _records(
        self,
        features: list[Any],
        url: str,
        request: HarvestRequest,
        listing: Listing,
        seen: set[str],
        newest: list[str],
    ) -> Iterator[RawRecord]:
        batch: list[tuple[str, datetime | None, bytes]] = []
        for feature in features:
            body = dump_record(feature)
            fid = feature.get("id") if isinstance(feature, dict) else None
            if isinstance(fid, int) and not isinstance(fid, bool):
                fid = str(fid)
            if not isinstance(fid, str) or not fid.strip():
                local_id = "malformed-" + hashlib.sha256(body).hexdigest()[:16]
                batch.append((local_id, None, body))
                seen.add(local_id)
                continue
            props = feature.get("properties")
            props = props if isinstance(props, dict) else {}
            stamp = props.get("updated") or props.get("created")
            when = parse_datestamp(stamp)
            if when is not None and isinstance(stamp, str):
                newest.append(stamp)
                newest[:] = [max(newest)]
            seen.add(fid)
            batch.append((fid, when, body))
        held: frozenset[str] = frozenset()
        if request.up_to_date is not None and batch:
            held = request.up_to_date([(i, w) for i, w, _ in batch if w is not None])
        for local_id, when, body in batch:
            listing.seen += 1
            omitted = local_id in held
            yield RawRecord(
                source=self.source.name,
                local_id=local_id,
                format=self.source.format,
                payload=b"" if omitted else body,
                media_type=GEOJSON,
                url=url,
                datestamp=when,
                payload_omitted=omitted,
            )
