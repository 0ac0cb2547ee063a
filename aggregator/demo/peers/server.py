"""Run a WSGI app on 127.0.0.1 in a background thread: the base of every local peer.

The peers are plain WSGI callables so that each protocol's server is one small module; the
same servers are the demo's sources and the test suite's fixture servers.
"""

from __future__ import annotations

import contextlib
import io
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from types import TracebackType
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer, make_server

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def server_activate(self) -> None:
        super().server_activate()
        self.connections: set[socket.socket] = set()  # open client connections
        self.connections_lock = threading.Lock()

    def close_connections(self) -> None:
        """End every open (kept-alive) connection: a stopped peer answers nothing more."""
        with self.connections_lock:
            open_now = list(self.connections)
        for conn in open_now:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class DropConnection(ConnectionAbortedError):
    """Raised by a WSGI app (before it starts its answer): the server closes the connection
    without sending a byte, as a server that crashed or a proxy that gave up would. The
    client sees the connection dropped after it sent its request."""


class _Http11Handler(ServerHandler):
    http_version = "1.1"  # wsgiref answers HTTP/1.0, which a client takes as "no keep-alive"


class _QuietHandler(WSGIRequestHandler):
    """HTTP/1.1 with persistent connections, as real servers keep them.

    wsgiref's own handler answers one request per connection, so every client request paid
    for a new TCP connection (and the peer for a new thread). This one serves requests on a
    connection until the client closes it, asks ``Connection: close``, or a response cannot be
    delimited (no or a wrong Content-Length, a chunked request body): then it closes. A HEAD
    answer carries the headers only. A request body is read whole before the app runs, so an
    app that ignores it cannot leave bytes that would be taken for the next request.
    """

    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle kept-alive connection is closed after this many seconds
    disable_nagle_algorithm = True  # else a kept-alive answer waits for the delayed ACK
    wbufsize = 64 * 1024  # status line, headers and a small body leave in one segment

    def setup(self) -> None:
        super().setup()
        server: _ThreadingWSGIServer = self.server  # type: ignore[assignment]
        with server.connections_lock:
            server.connections.add(self.connection)

    def finish(self) -> None:
        server: _ThreadingWSGIServer = self.server  # type: ignore[assignment]
        with server.connections_lock:
            server.connections.discard(self.connection)
        with contextlib.suppress(OSError):  # the client has gone: nothing left to flush to
            super().finish()

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection:
            self.handle_one_request()

    def handle_one_request(self) -> None:
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                self.close_connection = True
                return
            if len(self.raw_requestline) > 65536:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414)
                self.close_connection = True
                return
            if not self.parse_request():  # an error answer has been sent
                self.close_connection = True
                return
            body: Any = self.rfile
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                self.close_connection = True  # the app reads the body from the socket
            else:
                length = int(self.headers.get("Content-Length") or 0)
                body = io.BytesIO(self.rfile.read(length) if length > 0 else b"")
            app = self.server.get_app()  # type: ignore[attr-defined]
            framed = [False]  # the answer's length is known: the connection can stay open
            dropped = [False]  # the app raised DropConnection: close without an answer

            def watched(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
                declared: list[str] = []

                def start(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
                    declared[:] = [v for k, v in headers if k.lower() == "content-length"]
                    return start_response(status, headers, *exc)

                try:
                    result = app(environ, start)
                except DropConnection:
                    dropped[0] = True
                    raise  # wsgiref's handler ends the exchange without writing
                if environ.get("REQUEST_METHOD") == "HEAD":  # headers only, length as for GET
                    if hasattr(result, "close"):
                        result.close()
                    framed[0] = bool(declared)
                    return []
                if isinstance(result, list) and declared:
                    framed[0] = declared[0].strip() == str(sum(len(b) for b in result))
                return result

            wfile: Any = self.wfile
            handler = _Http11Handler(
                body, wfile, self.get_stderr(), self.get_environ(), multithread=False
            )
            handler.request_handler = self  # type: ignore[attr-defined]  # for wsgiref's log
            handler.run(watched)
            if dropped[0]:
                self.close_connection = True
                return
            self.wfile.flush()  # wsgiref flushes after body writes only: not an empty body
            if not framed[0]:
                self.close_connection = True
        except (TimeoutError, ConnectionError, ValueError):
            self.close_connection = True

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

    @property
    def open_connections(self) -> int:
        """Client connections open now (kept alive between requests)."""
        with self._server.connections_lock:
            return len(self._server.connections)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
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
        504: "Gateway Timeout",
    }
    start_response(
        f"{status} {reasons.get(status, 'Status')}",
        [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers],
    )
    return [body]
