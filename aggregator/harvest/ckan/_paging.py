"""Keyset paging over CKAN's ``package_search``: where the next page starts, as an ``fq`` filter.

The listing is sorted ``metadata_modified asc, id asc``. Instead of an offset, each page after
the first asks for the packages at or after the last one read, with a range on
``metadata_modified``; a package edited while we read gets a newer ``metadata_modified`` and
moves to the end, where we read it again, and a package deleted before the cursor shifts
nothing, because there is no offset to shift.

Keys are compared as Solr holds them: CKAN indexes ``metadata_modified`` with microseconds,
Solr keeps **milliseconds**, so packages modified within one millisecond are equal for the
sort and for a range, and their ids order them. A page therefore starts *inclusively* at the
millisecond of the last package read (``metadata_modified:[T TO *]``); the packages of that
millisecond read already come again and are skipped as seen. Only when a whole page shares one
millisecond would the next inclusive page be that page again: the listing then *drains* that
millisecond by id (``metadata_modified:[T TO T] AND id:{"last id" TO *]``) and goes on past it
(``metadata_modified:{T TO *]``, exclusive).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

SORT = "metadata_modified asc, id asc"
TIEBREAKS = ("id", "name")  # unique fields a sort may break ties on


def tiebreak_of(sort: str) -> str:
    """The field of ``metadata_modified asc, FIELD asc`` (ValueError for any other sort: the
    paging relies on it)."""
    parts = [" ".join(part.split()).lower() for part in sort.split(",")]
    fields = [p.removesuffix(" asc") for p in parts]
    if (
        len(parts) != 2
        or parts[0] != "metadata_modified asc"
        or not parts[1].endswith(" asc")
        or fields[1] not in TIEBREAKS
    ):
        raise ValueError(
            "sort must be 'metadata_modified asc, id asc' (or 'name asc' as the second key):"
            " the listing pages by that order"
        )
    return fields[1]


_NAIVE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.(\d{1,6}))?")


def solr_ms(value: Any) -> str | None:
    """A ``metadata_modified`` (``2015-09-15T13:17:51.405474``, UTC without a zone) as Solr
    holds it (``2015-09-15T13:17:51.405Z``: truncated to milliseconds), or None if it is not a
    date. Fixed width, so these strings compare as the dates do."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    naive = _NAIVE.fullmatch(value)
    # CKAN's own form is cut as text: strftime once per package costs more
    # (docs/benchmarks.md#date-parsing-in-harvesters)
    if naive is not None:
        return f"{value[:19]}.{((naive[1] or '') + '000')[:3]}Z"
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    if not 1000 <= when.year <= 9999:
        return None
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def solr_quote(value: str) -> str:
    """``value`` as a quoted Solr term (a range endpoint)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


Row = tuple[str | None, str]  # (solr_ms of metadata_modified, tiebreak value) of one package


@dataclass(frozen=True, slots=True)
class PageKey:
    """Where a page starts: at (or, not ``inclusive``, after) the millisecond ``stamp``; when
    ``after`` is set, within that millisecond only, after that tiebreak value (draining)."""

    stamp: str
    inclusive: bool = True
    after: str | None = None

    def filter(self, tiebreak: str) -> str:
        if self.after is not None:
            return (
                f"metadata_modified:[{self.stamp} TO {self.stamp}] AND"
                f" {tiebreak}:{{{solr_quote(self.after)} TO *]"
            )
        return f"metadata_modified:{'[' if self.inclusive else '{'}{self.stamp} TO *]"

    def admits(self, row: Row) -> bool:
        stamp, value = row
        if stamp is None:
            return False
        if self.after is not None:
            return stamp == self.stamp and value > self.after
        return stamp >= self.stamp if self.inclusive else stamp > self.stamp


def page_problem(
    rows: list[Row], key: PageKey | None, last_page: bool, tiebreak: str
) -> str | None:
    """Why the listing cannot trust this page to page on from (None: it can). Each row must
    pass the page's filter and come in ``metadata_modified`` order (and in tiebreak order
    when draining one millisecond). A package without a date is in no range, so no keyed
    page can hold it: it can only be read on the last page, or on the first page before a
    dated package (Solr sorts a missing date first, so all of them are on that page)."""
    dated = [i for i, (stamp, _) in enumerate(rows) if stamp is not None]
    previous: Row | None = None
    for i, (stamp, value) in enumerate(rows):
        if stamp is None:
            if last_page or (key is None and dated and i < dated[-1]):
                continue
            return f"package {value!r} has no readable metadata_modified: cannot page past it"
        if key is not None and not key.admits((stamp, value)):
            return (
                f"package {value!r} (metadata_modified {stamp}) is outside the page's filter"
                f" {key.filter(tiebreak)!r}: the server does not apply fq"
            )
        if previous is not None and previous[0] is not None:
            draining = key is not None and key.after is not None
            if stamp < previous[0] or (draining and value <= previous[1]):
                return (
                    f"package {value!r} comes after {previous[1]!r} out of order: the server"
                    f" does not sort by {SORT.replace('id', tiebreak)}"
                )
        previous = (stamp, value)
    return None


def next_key(key: PageKey | None, rows: list[Row]) -> PageKey:
    """The key of the page after a full one (not the last page) whose rows are ``rows``."""
    last_stamp, last_value = rows[-1]
    if last_stamp is None:  # page_problem refuses it first
        raise ValueError(f"package {last_value!r} has no metadata_modified to page on")
    if key is not None and key.after is not None:
        return PageKey(key.stamp, after=last_value)  # go on draining this millisecond
    if rows[0][0] == last_stamp:
        # the whole page is one millisecond: [T TO *] would answer this page again
        return PageKey(last_stamp, after=last_value)
    return PageKey(last_stamp)
