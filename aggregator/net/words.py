"""Transport failures in words: which host, and what failed (for logs, job messages, mail).

:func:`body_excerpt` says what an error page says: a remote server's 500 page is tens of
kilobytes of markup, styles and scripts; a job message keeps the status, its reason and
the first ~200 characters of the page's text (tags stripped, whitespace collapsed).

urllib3 and requests wrap the socket's error two or three times
(``MaxRetryError(reason=NewConnectionError('GuardedHTTPConnection(host=..., port=9): Failed
to establish a new connection: [Errno 111] Connection refused'))``); an operator reading a
cron mail wants "could not connect to 127.0.0.1:9: connection refused". :func:`in_words`
walks the chain of causes to the innermost one it knows and says it so.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Iterator
from http.client import RemoteDisconnected
from urllib.parse import urlsplit

import urllib3.exceptions as u3
from lxml import etree
from lxml import html as lxml_html

EXCERPT_BYTES = 64 * 1024  # of a body: enough for the text at the top of any error page
EXCERPT_CHARS = 200

_ERRNO_WORDS = {
    errno.ECONNREFUSED: "connection refused (nothing listens on that port)",
    errno.ECONNRESET: "the connection was reset by the server",
    errno.EHOSTUNREACH: "no route to the host",
    errno.ENETUNREACH: "the network is unreachable",
    errno.ETIMEDOUT: "the connection timed out",
    errno.EPIPE: "the server closed the connection",
}


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException] = [err]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        for nxt in (getattr(e, "reason", None), e.__cause__, e.__context__, *e.args):
            if isinstance(nxt, BaseException):
                todo.append(nxt)


def host_of(url: str) -> str:
    try:
        parts = urlsplit(url)
        if parts.port is not None:
            return f"{parts.hostname}:{parts.port}"
        return parts.hostname or url
    except ValueError:  # not a parseable URL: say it as it is
        return url


def in_words(err: BaseException, url: str) -> str:
    """What failed reaching ``url``, in a sentence naming the host."""
    host = host_of(url)
    chain = list(_chain(err))
    connect_timeout = any(
        isinstance(e, u3.ConnectTimeoutError) and not isinstance(e, u3.NewConnectionError)
        for e in chain
    )
    for e in chain:  # the socket's own error first: it says most
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"the TLS certificate of {host} could not be verified ({e.verify_message})"
        if isinstance(e, socket.gaierror):
            return f"the host name of {host} could not be resolved ({e.strerror})"
        if isinstance(e, RemoteDisconnected):
            return f"{host} closed the connection without answering"
        if isinstance(e, OSError) and e.errno in _ERRNO_WORDS:
            what = "could not connect to" if e.errno == errno.ECONNREFUSED else "reaching"
            return f"{what} {host}: {_ERRNO_WORDS[e.errno]}"
    for e in chain:
        if connect_timeout:
            return f"could not connect to {host}: no answer to the connection attempt in time"
        if isinstance(e, u3.ReadTimeoutError | TimeoutError):
            return f"{host} accepted the connection but did not answer in time"
        if isinstance(e, u3.SSLError | ssl.SSLError):
            return f"the TLS handshake with {host} failed ({_plain(e)})"
        if isinstance(e, u3.ResponseError) and "too many" in str(e):
            return f"{host} kept answering with an error status ({_plain(e)})"
        if isinstance(e, u3.NewConnectionError):
            return f"could not connect to {host} ({_plain(e)})"
        if isinstance(e, u3.ProtocolError):
            return f"the connection to {host} broke ({_plain(e)})"
    return f"{host}: {_plain(err)}"


def _plain(err: BaseException) -> str:
    text = str(err)
    marker = "): "  # "GuardedHTTPConnection(host=..., port=...): <what happened>"
    if "Connection(host=" in text and marker in text:
        text = text.split(marker, 1)[1]
    return text or type(err).__name__


def body_excerpt(content: bytes, *, charset: str | None = None, drop: str = "") -> str:
    """The start of a response body as text for a message: markup (an HTML error page, an
    XML exception report) reduced to its text, scripts and styles left out; whitespace
    collapsed; at most ``EXCERPT_CHARS`` characters. ``drop``: words the message says
    already ("500 Internal Server Error"), left out when the text starts with them."""
    head = content[:EXCERPT_BYTES]
    text = _decode(head, charset)
    if text.lstrip().startswith("<"):
        text = _markup_text(head) or text
    text = " ".join(text.split())
    for prefix in (drop, drop.partition(" ")[2]):
        if prefix and text.lower().startswith(prefix.lower()):
            text = text[len(prefix) :].lstrip(" :-")
            break
    if len(text) > EXCERPT_CHARS:
        text = text[: EXCERPT_CHARS - 1].rstrip() + "…"
    return text


def _decode(head: bytes, charset: str | None) -> str:
    try:
        return head.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return head.decode("utf-8", errors="replace")


def _markup_text(head: bytes) -> str:
    """The text of a page (its body's, else its title), by the HTML parser: forgiving of tag
    soup and of XML alike, and it fetches nothing and defines no entities."""
    parser = lxml_html.HTMLParser(no_network=True, remove_comments=True, remove_pis=True)
    try:
        doc = lxml_html.document_fromstring(head, parser=parser)
    except (etree.ParserError, ValueError):
        return ""
    etree.strip_elements(doc, "script", "style", "noscript", "template", with_tail=False)
    body = doc.find("body")
    # a space between text nodes: "<h1>Error</h1><p>Try later</p>" reads "Error Try later"
    text = _texts(body) if body is not None else ""
    if not text.strip():
        title = doc.find(".//title")
        text = _texts(title if title is not None else doc)
    return text


def _texts(element: etree._Element) -> str:
    return " ".join(
        t if isinstance(t, str) else t.decode("utf-8", "replace") for t in element.itertext()
    )
