"""Harvest a CKAN portal through its action API: ``package_search`` only.

Paging is ``rows``/``start`` with a stable sort (``metadata_modified asc, id asc``: a package
inserted or updated while we read goes to the end, where we still read it). Offsets are not
safe on a catalogue that changes while it is read, so every page after the first starts one
row early, on the last package of the page before (the *anchor*):

* the page's first package is one we have seen: the rows did not move left, nothing was
  skipped (packages seen on earlier pages are skipped again, unless their
  ``metadata_modified`` is newer: then the newer version is yielded too, and the newest wins);
* it is one we have not seen: packages before it were deleted (or moved to the end), so the
  rows moved left and some may have been jumped over: we step back a page at a time until a
  page starts on a package we have seen, and carry on from there;
* a page equal to the one before (a server that ignores ``start``) stops the listing;
* at the end the ids seen must add up to the ``count`` of the last page.

A listing that does not add up is *truncated*: what was read is stored and nothing is
withdrawn. Incremental runs add ``fq=metadata_modified:[since TO *]`` (``since`` is the newest
``metadata_modified`` of the last successful run, the source's own clock); a full run is due
every ``full_every_days`` (the checkpoint remembers when the last full run was), and only a
complete full run withdraws packages that are gone. See docs/protocols/ckan.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from aggregator.errors import HarvestError
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.checkpoints import Checkpoint
from aggregator.http import Response
from aggregator.input_limits import dump_record, load_page
from aggregator.models import RawRecord

log = logging.getLogger(__name__)

ACTION_PATH = "api/3/action/package_search"
DEFAULT_SORT = "metadata_modified asc, id asc"
MAX_STEPS_BACK = 50  # pages stepped back in one listing before it is given up as truncated
MAX_PAGES = 1_000_000


@dataclass(frozen=True, slots=True)
class CkanOptions:
    rows: int = 100  # packages per page (most portals cap it at 1000)
    fq: str | None = None  # a filter query of our own (an organisation, a type)
    include_private: bool = False  # with an API key: the private datasets it may read too
    full_every_days: int = 7  # a full run (which can withdraw) at least this often; 0: never
    sort: str = DEFAULT_SORT

    def __post_init__(self) -> None:
        if not 2 <= self.rows <= 1000:
            raise ValueError("rows must be from 2 to 1000")
        if self.full_every_days < 0:
            raise ValueError("full_every_days must be 0 (never) or more")
        if not self.sort.strip():
            raise ValueError("sort must not be empty")


def action_url(url: str) -> str:
    """The ``package_search`` URL of a portal given by its base URL or by that URL itself."""
    if urlsplit(url).path.rstrip("/").endswith("/api/3/action/package_search"):
        return url
    return url.rstrip("/") + "/" + ACTION_PATH


def solr_date(value: str) -> str:
    """A CKAN ``metadata_modified`` (``2015-09-15T13:17:51.405474``, UTC without a zone) as a
    Solr date (``2015-09-15T13:17:51.405Z``), truncated to milliseconds so the range still
    holds the package itself."""
    when = parse_datestamp(value)
    if when is None:
        raise HarvestError(f"cannot read the date {value!r}")
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def parse_datestamp(value: Any) -> datetime | None:
    """``metadata_modified`` as an aware UTC datetime (CKAN writes UTC without a zone); also
    the OGC API - Records ``updated``/``created`` times (:mod:`.ogc_records`)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def decode_page(response: Response) -> dict[str, Any]:
    """The ``result`` of one ``package_search`` answer; HarvestError (with an excerpt of the
    body) for an HTML page, a body that is not JSON, ``success: false`` or a missing result."""
    where = f"package_search at {response.url}"
    body = response.content.lstrip()
    if response.media_type == "text/html" or body[:1] == b"<":
        if response.status >= 400:
            raise response.status_error(f"{where} (an HTML error page)")
        raise HarvestError(
            f"{where} answered with an HTML page, not JSON (HTTP {response.status}): "
            f"{response.excerpt}"
        )
    if response.status >= 400:
        if body[:1] == b"{":  # CKAN's own errors: {"success": false, "error": {...}}
            detail = response.excerpt
            raise HarvestError(f"{where} returned HTTP {response.status}: {detail}")
        raise response.status_error(where)
    try:
        doc = load_page(response.content)  # an over-long integer stays in its record
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise HarvestError(f"{where} did not answer JSON ({err}): {response.excerpt}") from err
    if not isinstance(doc, dict):
        raise HarvestError(f"{where} answered JSON that is not an object: {response.excerpt}")
    if doc.get("success") is not True:
        error = doc.get("error")
        detail = json.dumps(error, ensure_ascii=False)[:300] if error else response.excerpt
        raise HarvestError(f"{where} answered success: false: {detail}")
    result = doc.get("result")
    if (
        not isinstance(result, dict)
        or not isinstance(result.get("results"), list)
        or not isinstance(result.get("count"), int)
    ):
        raise HarvestError(f"{where}: the answer has no result.count and result.results")
    return result


class _Walk:
    """The state of one listing: ids seen (with their ``metadata_modified``), the anchor."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self.newest: str | None = None
        self.previous_ids: list[str] | None = None
        self.count: int | None = None
        self.counts: set[int] = set()


class CkanHarvester(Harvester):
    """CKAN action API (``package_search``) -> one JSON payload per package."""

    name: ClassVar[str] = "ckan"
    formats: ClassVar[tuple[str, ...]] = ("ckan",)
    supports_incremental: ClassVar[bool] = True
    Options: ClassVar[type[Any] | None] = CkanOptions

    def probe(self) -> list[str]:
        """One ``package_search`` with ``rows=0``: the portal answers and how many packages."""
        opts: CkanOptions = self.options_of(self.source)
        params = {"q": "*:*", "rows": "0"}
        if opts.fq:
            params["fq"] = opts.fq
        if opts.include_private:
            params["include_private"] = "true"
        result = self._fetch(action_url(self.source.url), params)
        return [f"package_search at {action_url(self.source.url)}: {result['count']} packages"]

    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        opts: CkanOptions = self.options_of(self.source)
        url = action_url(self.source.url)
        previous = None if request.full else Checkpoint.read(request.checkpoint)
        now = datetime.now(UTC)
        since = previous.since if previous else None
        if previous is not None and previous.full_due(opts.full_every_days, now):
            listing.note(f"full run due (last full run: {previous.full_at or 'never'})")
            since = None
        listing.incremental = since is not None
        filters = [
            f
            for f in (opts.fq, f"metadata_modified:[{solr_date(since)} TO *]" if since else None)
            if f
        ]
        walk = _Walk()
        yield from self._walk(url, opts, filters, request, listing, walk)
        if listing.truncated_reason is None and not request.cancel.is_set():
            unique = len(walk.seen)
            if walk.count is not None and unique < walk.count:
                listing.mark_truncated(
                    f"the listing does not add up: {unique} distinct packages read, the last page"
                    f" says count = {walk.count}"
                )
            else:
                if walk.count is not None and unique > walk.count:
                    listing.note(
                        f"{unique - walk.count} package(s) read that the final count no longer"
                        " holds (deleted while we read): the next full run withdraws them"
                    )
                listing.mark_complete()
        full_at = (
            now.isoformat() if not listing.incremental else (previous.full_at if previous else None)
        )
        listing.next_checkpoint = Checkpoint(walk.newest or since, full_at).dump()

    def _fetch(self, url: str, params: Mapping[str, str]) -> dict[str, Any]:
        response = self.http.get(
            url, params=params, headers={"Accept": "application/json"}, raise_for_status=False
        )
        return decode_page(response)

    def _walk(
        self,
        url: str,
        opts: CkanOptions,
        filters: list[str],
        request: HarvestRequest,
        listing: Listing,
        walk: _Walk,
    ) -> Iterator[RawRecord]:
        params = {"q": "*:*", "sort": opts.sort, "rows": str(opts.rows)}
        if filters:
            params["fq"] = (
                filters[0] if len(filters) == 1 else " AND ".join(f"({f})" for f in filters)
            )
        if opts.include_private:
            params["include_private"] = "true"
        start = 0  # where the page asked for starts (the anchor's row after the first page)
        steps_back = 0
        for _ in range(MAX_PAGES):
            if request.cancel.is_set():
                listing.mark_truncated("cancelled")
                return
            result = self._fetch(url, {**params, "start": str(start)})
            listing.pages += 1
            count = result["count"]
            walk.counts.add(count)
            walk.count = count
            if listing.expected_total is None:
                listing.expected_total = count
            packages = [p for p in result["results"] if isinstance(p, dict)]
            ids = [str(p.get("id") or p.get("name") or "") for p in packages]
            if start > 0 and ids and walk.previous_ids == ids:
                listing.mark_truncated(
                    f"page at start={start} is identical to the page before (the server ignores"
                    " 'start'?)"
                )
                return
            if start > 0 and ids and ids[0] not in walk.seen:
                # rows moved left under us: step back until a page starts on a known package
                steps_back += 1
                if steps_back > MAX_STEPS_BACK:
                    listing.mark_truncated(
                        f"the catalogue kept changing under the listing ({MAX_STEPS_BACK} steps"
                        " back)"
                    )
                    return
                listing.note(f"rows moved at start={start}: stepped back a page")
                walk.previous_ids = ids
                start = max(0, start - (opts.rows - 1))
                continue
            walk.previous_ids = ids
            yield from self._records(packages, ids, url, request, listing, walk)
            if len(packages) < opts.rows or not packages:
                return
            start += len(packages) - 1  # the next page starts on this page's last package

    def _records(
        self,
        packages: list[dict[str, Any]],
        ids: list[str],
        url: str,
        request: HarvestRequest,
        listing: Listing,
        walk: _Walk,
    ) -> Iterator[RawRecord]:
        fresh: list[tuple[str, dict[str, Any], str]] = []
        for local_id, package in zip(ids, packages, strict=True):
            modified = package.get("metadata_modified")
            stamp = modified if isinstance(modified, str) else ""
            if not local_id:
                raise HarvestError(f"package_search at {url} returned a package without id")
            known = walk.seen.get(local_id)
            if known is not None and known >= stamp:
                continue  # read on an earlier page (rows moved right, or the anchor row)
            walk.seen[local_id] = stamp
            if stamp and (walk.newest is None or stamp > walk.newest):
                walk.newest = stamp
            fresh.append((local_id, package, stamp))
        held: frozenset[str] = frozenset()
        if request.up_to_date is not None and fresh:
            held = request.up_to_date([(i, parse_datestamp(s)) for i, _, s in fresh])
        for local_id, package, stamp in fresh:
            listing.seen += 1
            omitted = local_id in held
            payload = b"" if omitted else dump_record(package)
            yield RawRecord(
                source=self.source.name,
                local_id=local_id,
                format=self.source.format,
                payload=payload,
                media_type="application/json",
                url=url,
                datestamp=parse_datestamp(stamp),
                deleted=package.get("state") == "deleted",
                payload_omitted=omitted,
            )
