"""Run a WSGI app on 127.0.0.1 in a background thread: the base of every local peer.

The peers are plain WSGI callables so that each protocol's server is one small module; the
same servers are the demo's sources and the test suite's fixture servers.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class _QuietHandler(WSGIRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass


class PeerServer:
    """A running local server. Use as a context manager or call ``stop()``."""

    def __init__(
        self,
        app: WsgiApp,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,  # serve HTTPS with this server context
    ) -> None:
        self._server = make_server(
            host, port, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
        )
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.host = host
        self.port = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """Base URL with a trailing slash, e.g. ``http://127.0.0.1:41234/`` (``https`` with TLS)."""
        return f"{self.scheme}://{self.host}:{self.port}/"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> PeerServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def respond(
    start_response: Callable[..., Any],
    status: int,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    headers: Iterable[tuple[str, str]] = (),
) -> list[bytes]:
    """Send a complete response with Content-Length (keeps HTTP/1.1 keep-alive working)."""
    reasons = {
        200: "OK",
        301: "Moved Permanently",
        302: "Found",
        304: "Not Modified",
        400: "Bad Request",
        403: "Forbidden",
        404: "Not Found",
        405: "Method Not Allowed",
        406: "Not Acceptable",
        429: "Too Many Requests",
        500: "Internal Server Error",
        501: "Not Implemented",
        502: "Bad Gateway",
        503: "Service Unavailable",
    }
    start_response(
        f"{status} {reasons.get(status, 'Status')}",
        [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers],
    )
    return [body]
