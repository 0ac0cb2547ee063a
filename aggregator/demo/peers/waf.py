"""A local Web Accessible Folder (WSGI): an HTML listing of files and the files themselves.

The listing at ``<folder>/`` (and ``<folder>/index.html``) looks like a server's own
autoindex: ``style="apache"`` a ``<pre>`` listing with ``14-Mar-2026 09:30`` dates,
``"table"`` an HTML table with ISO dates, ``"plain"`` bare links and no dates. Besides the
files it links what a real listing holds and a harvester must not follow: the parent folder,
a subfolder, sort links (``?C=M;O=A``), an anchor, a ``mailto:`` and an absolute URL.
``hits`` counts requests per path (a test sees which files were fetched again).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote, unquote
from xml.sax.saxutils import escape, quoteattr

from aggregator.demo.peers.server import respond

StartResponse = Callable[..., Any]


@dataclass(slots=True)
class WafFile:
    body: bytes
    modified: datetime
    content_type: str = "application/xml"
    status: int = 200  # a file listed but answering with an error


_DISTRACTIONS = (
    '<a href="../">Parent Directory</a>',
    '<a href="?C=M;O=A">Last modified</a>',
    '<a href="subfolder/">subfolder/</a>',
    '<a href="#top">top</a>',
    '<a href="mailto:gis@example.org">Contact</a>',
    '<a href="http://elsewhere.example.org/other.xml">other.xml</a>',
)


class WafApp:
    """Serves one folder at ``folder`` (a path ending in ``/``)."""

    def __init__(
        self,
        folder: str = "/waf/",
        style: Literal["apache", "table", "plain"] = "apache",
    ) -> None:
        self.folder = folder
        self.style = style
        self.files: dict[str, WafFile] = {}
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()

    def put(self, name: str, body: bytes, modified: datetime, **kw: Any) -> None:
        self.files[name] = WafFile(body, modified, **kw)

    def listing(self) -> bytes:
        rows = []
        for name, item in sorted(self.files.items()):
            href = quoteattr(quote(name))
            size = f"{len(item.body) // 1024 or 1}K"
            if self.style == "apache":
                stamp = item.modified.strftime("%d-%b-%Y %H:%M")
                rows.append(f"<a href={href}>{escape(name)}</a>    {stamp}  {size}")
            elif self.style == "table":
                stamp = item.modified.strftime("%Y-%m-%d %H:%M:%S")
                rows.append(
                    f"<tr><td><a href={href}>{escape(name)}</a></td>"
                    f"<td>{stamp}</td><td>{size}</td></tr>"
                )
            else:
                rows.append(f"<li><a href={href}>{escape(name)}</a></li>")
        body = "\n".join(rows)
        extra = "\n".join(_DISTRACTIONS)
        if self.style == "apache":
            content = f"<pre>{extra}\n{body}</pre>"
        elif self.style == "table":
            content = f"{extra}<table>{body}</table>"
        else:
            content = f"{extra}<ul>{body}</ul>"
        return (
            "<!DOCTYPE html><html><head><title>Index of "
            f"{escape(self.folder)}</title></head><body><h1>Index of {escape(self.folder)}</h1>"
            f"{content}</body></html>"
        ).encode()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        with self._lock:
            self.hits[path] += 1
        # also at the folder's path without its slash, as some servers answer (links must then
        # be resolved against the path with a slash added)
        if path in (self.folder, self.folder + "index.html", self.folder.rstrip("/")):
            return respond(start_response, 200, self.listing(), "text/html; charset=utf-8")
        if path.startswith(self.folder):
            item = self.files.get(unquote(path[len(self.folder) :]))
            if item is not None:
                return respond(start_response, item.status, item.body, item.content_type)
        return respond(start_response, 404, b"not found")
