"""Read a Web Accessible Folder's HTML listing: the metadata files it links, and their dates.

The rules are the UK DMS collection interface's (paragraphs 33-36): the body is parsed as
HTML, links are ``//a/@href``; a link containing ``/``, ``?``, ``#`` or ``mailto:`` is
ignored (only relative links to files directly in the folder are used); the files are
resolved against the folder URL. A server's own listing (Apache or nginx autoindex, IIS)
usually shows each file's modification time next to its link: when it does, the date is read
so that files whose date has not changed since the last run need not be fetched again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import unquote, urljoin, urlsplit

from lxml import etree, html

from aggregator.core.errors import HarvestError

_SKIP = ("/", "?", "#", "mailto:")
# 2026-03-14 09:30[:00] (Apache's fancy index, IIS) | 14-Mar-2026 09:30 (Apache, nginx)
_ISO_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2})(:\d{2})?")
_APACHE_DATE = re.compile(r"(\d{1,2})-([A-Za-z]{3})-(\d{4})\s+(\d{2}:\d{2})(:\d{2})?")
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}


@dataclass(frozen=True, slots=True)
class WafEntry:
    name: str  # the link as written (a file name)
    url: str
    listed: str | None  # the date shown beside it, as "YYYY-MM-DDThh:mm:ss", if any


def folder_url(url: str) -> str:
    """The URL links are resolved against: the registered URL itself when it names a folder
    (a trailing slash is added when missing) or the folder of the HTML page it names."""
    path = urlsplit(url).path
    last = path.rsplit("/", 1)[-1]
    if path.endswith("/") or "." in last:
        return url
    return url + "/"


def _date_in(text: str) -> str | None:
    found = _ISO_DATE.search(text)
    if found:
        return f"{found.group(1)}T{found.group(2)}{found.group(3) or ':00'}"
    found = _APACHE_DATE.search(text)
    if found:
        month = _MONTHS.get(found.group(2).lower())
        if month is None:
            return None
        try:
            day = datetime(int(found.group(3)), month, int(found.group(1)), tzinfo=UTC)
        except ValueError:
            return None
        return f"{day:%Y-%m-%d}T{found.group(4)}{found.group(5) or ':00'}"
    return None


def _text_beside(anchor: etree._Element) -> str:
    """The text that follows a link on its row: the rest of a table row, or the text up to
    the next link in a ``<pre>`` listing."""
    row = next((a for a in anchor.iterancestors() if a.tag == "tr"), None)
    if row is not None:
        return " ".join(str(t) for t in row.itertext())
    parts = [anchor.tail or ""]
    for sibling in anchor.itersiblings():
        if sibling.tag == "a":
            break
        parts.append(sibling.text or "")
        parts.append(sibling.tail or "")
    return " ".join(parts)[:200]


def read_listing(body: bytes, url: str) -> list[WafEntry]:
    """The metadata files a WAF listing links, in page order, each once."""
    if not body.strip():
        raise HarvestError(f"{url}: the WAF listing is empty", code="emptyListing")
    try:
        parser = html.HTMLParser(no_network=True, remove_comments=True)
        root = html.document_fromstring(body, parser=parser)
    except (etree.ParserError, ValueError) as err:
        raise HarvestError(f"{url}: the WAF listing is not HTML: {err}", code="badListing") from err
    base = folder_url(url)
    seen: set[str] = set()
    entries = []
    for anchor in root.iter("a"):
        href = (anchor.get("href") or "").strip()
        if not href or any(mark in href for mark in _SKIP) or href in seen:
            continue
        seen.add(href)
        entries.append(WafEntry(unquote(href), urljoin(base, href), _date_in(_text_beside(anchor))))
    if not entries:
        raise HarvestError(
            f"{url}: no metadata file links in the WAF listing (links with '/', '?', '#' or"
            " 'mailto:' are not followed)",
            code="noLocators",
        )
    return entries
