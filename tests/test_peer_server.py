"""The fixture peers' HTTP server keeps HTTP/1.1 connections alive, as real servers do."""

from __future__ import annotations

import http.client
from collections.abc import Callable
from typing import Any

from aggregator.demo.peers.server import PeerServer, respond


class App:
    """/hello 200 with a body; /empty 302 with none; /stream an unframed body (no length);
    POST anywhere: 200 without reading the request body."""

    def __call__(self, environ: dict[str, Any], start: Callable[..., Any]) -> list[bytes]:
        path = environ["PATH_INFO"]
        if path == "/empty":
            return respond(start, 302, b"", headers=[("Location", "/hello")])
        if path == "/stream":
            start("200 OK", [("Content-Type", "text/plain")])
            return [b"part one, ", b"part two"]
        return respond(start, 200, b"hello " + environ["REQUEST_METHOD"].encode())


def _conn(server: PeerServer) -> http.client.HTTPConnection:
    return http.client.HTTPConnection(server.host, server.port, timeout=5)


def _get(conn: http.client.HTTPConnection, method: str, path: str, body: bytes = b"") -> Any:
    conn.request(method, path, body=body or None)
    resp = conn.getresponse()
    return resp.status, resp.read(), resp.getheader("Connection")


def test_requests_share_one_connection() -> None:
    app = App()
    with PeerServer(app) as server:
        conn = _conn(server)
        assert _get(conn, "GET", "/hello")[:2] == (200, b"hello GET")
        sock = conn.sock
        assert _get(conn, "HEAD", "/hello")[:2] == (200, b"")  # headers only
        assert _get(conn, "GET", "/empty")[:2] == (302, b"")  # an empty body is flushed too
        # a request body the app never reads is not taken for the next request
        assert _get(conn, "POST", "/hello", b"x" * 5000)[:2] == (200, b"hello POST")
        assert _get(conn, "GET", "/hello")[:2] == (200, b"hello GET")
        assert conn.sock is sock  # never reconnected
        assert server.open_connections == 1
        conn.close()


def test_an_unframed_answer_closes_the_connection() -> None:
    with PeerServer(App()) as server:
        conn = _conn(server)
        status, body, _ = _get(conn, "GET", "/stream")
        assert (status, body) == (200, b"part one, part two")  # read to the close
        assert _get(conn, "GET", "/hello")[:2] == (200, b"hello GET")  # a new connection


def test_a_stopped_server_ends_its_kept_alive_connections() -> None:
    server = PeerServer(App())
    conn = _conn(server)
    assert _get(conn, "GET", "/hello")[0] == 200
    assert conn.sock is not None
    conn.sock.settimeout(3)
    server.stop()
    assert conn.sock.recv(1) == b""  # the server ended it (else: a timeout here)
    conn.close()
