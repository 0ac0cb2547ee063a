"""Harvest a CKAN portal through its action API: ``package_search`` only.

Paging is by **keys**, not offsets (:mod:`._paging`): the listing is sorted
``metadata_modified asc, id asc`` and each page after the first asks, with an ``fq`` range,
for the packages from the last one read on (``metadata_modified:[T TO *]``, ``start`` always
0). Edits while we read cannot push the listing back: an edited package moves to the end,
where it is read again (the newest version wins), a deleted one simply is not there, a new
one comes at the end. Packages of the bound's millisecond read already are skipped as seen;
a page that is all one millisecond is drained by id. A page the server did not filter or sort
as asked, or a page that would start the listing where the page before started, stops it as
*truncated*; it is *complete* only when a page holds all the server counts from its key on
(the end of the catalogue).

A truncated listing stores what was read and withdraws nothing. Incremental runs start from
the checkpoint (``since``: the newest ``metadata_modified`` of the last successful run, the
source's own clock); a full run is due every ``full_every_days`` (the checkpoint remembers
when the last full run was), and only a complete full run withdraws packages that are gone.
See docs/protocols/ckan.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from aggregator.core.errors import HarvestError
from aggregator.core.input_limits import dump_record, load_page
from aggregator.core.models import RawRecord
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.checkpoints import Checkpoint
from aggregator.harvest.ckan._paging import (
    SORT,
    PageKey,
    Row,
    next_key,
    page_problem,
    solr_ms,
    tiebreak_of,
)
from aggregator.net.client import Response

log = logging.getLogger("aggregator.harvest.ckan")  # the name operators filter on

ACTION_PATH = "api/3/action/package_search"
DEFAULT_SORT = SORT
MAX_PAGES = 1_000_000


@dataclass(frozen=True, slots=True)
class CkanOptions:
    rows: int = 100  # packages per page (most portals cap it at 1000)
    fq: str | None = None  # a filter query of our own (an organisation, a type)
    include_private: bool = False  # with an API key: the private datasets it may read too
    full_every_days: int = 7  # a full run (which can withdraw) at least this often; 0: never
    sort: str = DEFAULT_SORT  # the second key may be name instead of id; nothing else

    def __post_init__(self) -> None:
        if not 2 <= self.rows <= 1000:
            raise ValueError("rows must be from 2 to 1000")
        if self.full_every_days < 0:
            raise ValueError("full_every_days must be 0 (never) or more")
        tiebreak_of(self.sort)


def action_url(url: str) -> str:
    """The ``package_search`` URL of a portal given by its base URL or by that URL itself."""
    if urlsplit(url).path.rstrip("/").endswith("/api/3/action/package_search"):
        return url
    return url.rstrip("/") + "/" + ACTION_PATH


def solr_date(value: str) -> str:
    """A CKAN ``metadata_modified`` (``2015-09-15T13:17:51.405474``, UTC without a zone) as a
    Solr date (``2015-09-15T13:17:51.405Z``), truncated to milliseconds as Solr holds it, so
    a range from it still holds the package itself."""
    stamp = solr_ms(value)
    if stamp is None:
        raise HarvestError(f"cannot read the date {value!r}")
    return stamp


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
    """The state of one listing: ids seen (with their ``metadata_modified``), the newest."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self.newest: str | None = None


class CkanHarvester(Harvester):
    """CKAN action API (``package_search``) -> one JSON payload per package."""

    name: ClassVar[str] = "ckan"
    formats: ClassVar[tuple[str, ...]] = ("ckan",)
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
        walk = _Walk()
        start = PageKey(solr_date(since)) if since else None
        yield from self._walk(url, opts, start, request, listing, walk)
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
        key: PageKey | None,
        request: HarvestRequest,
        listing: Listing,
        walk: _Walk,
    ) -> Iterator[RawRecord]:
        tiebreak = tiebreak_of(opts.sort)
        params = {"q": "*:*", "sort": opts.sort, "rows": str(opts.rows), "start": "0"}
        if opts.include_private:
            params["include_private"] = "true"
        drained = 0  # milliseconds drained by id (a page all one millisecond)
        for _ in range(MAX_PAGES):
            if request.cancel.is_set():
                listing.mark_truncated("cancelled")
                return
            filters = [f for f in (opts.fq, key.filter(tiebreak) if key else None) if f]
            fq = filters[0] if len(filters) == 1 else " AND ".join(f"({f})" for f in filters)
            result = self._fetch(url, {**params, "fq": fq} if fq else params)
            listing.pages += 1
            count = result["count"]
            if listing.expected_total is None:
                listing.expected_total = count
            packages = [p for p in result["results"] if isinstance(p, dict)]
            ids = [str(p.get("id") or p.get("name") or "") for p in packages]
            rows: list[Row] = [
                (solr_ms(p.get("metadata_modified")), str(p.get(tiebreak) or "")) for p in packages
            ]
            last_page = len(packages) >= count
            problem = page_problem(rows, key, last_page, tiebreak)
            yield from self._records(packages, ids, url, request, listing, walk)
            if problem is not None:
                listing.mark_truncated(problem)
                return
            if last_page and key is not None and key.after is not None:
                key = PageKey(key.stamp, inclusive=False)  # that millisecond is read: go past it
                continue
            if last_page:
                if drained:
                    listing.note(f"{drained} page(s) within one millisecond read by id")
                listing.mark_complete()
                return
            if not packages:
                listing.mark_truncated(
                    f"an empty page although the server counts {count} more package(s)"
                )
                return
            following = next_key(key, rows)
            if following == key:
                listing.mark_truncated(f"the listing does not move on from {key}")
                return
            drained += following.after is not None
            key = following
        listing.mark_truncated(f"more than {MAX_PAGES} pages")

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
                continue  # read already (the bound's millisecond is read again on the next page)
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
