"""Transport failures in words: which host, and what failed (for logs, job messages, mail).

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
