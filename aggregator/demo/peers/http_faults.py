"""A local server that misbehaves in every way the HTTP layer must survive.

:class:`FaultApp` is a WSGI app (run it with :class:`~aggregator.demo.peers.server.PeerServer`);
:class:`RawFaultServer` is a raw-socket server for faults WSGI cannot express. Both count
requests per path (``hits(path)``) so tests can assert how many attempts were made, and
:class:`FaultApp` records the peak number of requests in flight per path (``peak(path)``).

WSGI routes (the first path segment picks the fault; the rest of the path only names the
counter, so each test can use a fresh one)::

    /ok/...                 200 "ok"
    /echo/...               200 JSON: method, path, query, headers, body
    /status/<code>/...      that status, for ever ("500 for ever": /status/500)
    /error-page/<code>/...?size=N   that status with an HTML error page of about N bytes
                            (title, styles, a script, a heading, then paragraphs), as a
                            proxy or an application server sends
    /flaky/...?fails=N&status=503&retry_after=S&retry_date=S
                            the first N requests get `status` (with Retry-After as seconds
                            or as an HTTP date S seconds ahead), then 200 "recovered"
    /slow/...?delay=S       sleeps S seconds before the status line (slow first byte)
    /trickle/...?chunks=N&interval=S   N bytes, the first at once, then one every S seconds
    /redirect/<n>/...?code=302         a chain of n redirects ending in 200 "done"
    /redirect-to/...?url=U&code=302    one redirect to any URL (file:, ftp:, loopback ...)
    /loop/...               redirects to itself for ever
    /big/...?size=N[&chunked=1]        N bytes, with Content-Length or close-delimited
    /declare/...?length=N   declares Content-Length N, sends a few bytes and closes
    /gzip/...?size=N&bomb=1 gzip content-encoding; a bomb is N zero bytes (tiny compressed)
    /charset/...?cs=NAME&text=T&declare=0   T encoded in NAME, charset declared or not
    /dtd/...                a DTD (for XXE tests: any hit means the parser fetched it)
    /cookie/...?name=N&value=V  200 "set", with Set-Cookie N=V (Path=/)

Raw-socket paths (:class:`RawFaultServer`)::

    /drop?length=N&sent=M   declares N bytes, sends M, then closes the socket
    /extra?length=N&sent=M  declares N bytes, sends M > N
    /reset?fails=N          closes the first N connections without a response, then 200
    /garbage                answers with bytes that are not HTTP
"""

from __future__ import annotations

import functools
import gzip
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from email.utils import formatdate
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, quote

from aggregator.demo.peers.server import respond

StartResponse = Callable[..., Any]


class _Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hits: Counter[str] = Counter()
        self._inflight: Counter[str] = Counter()
        self._peak: Counter[str] = Counter()

    def hit(self, path: str) -> int:
        with self._lock:
            self._hits[path] += 1
            return self._hits[path]

    def hits(self, path: str) -> int:
        """Requests received for ``path`` (without the query string)."""
        with self._lock:
            return self._hits[path]

    def total(self) -> int:
        with self._lock:
            return sum(self._hits.values())

    def peak(self, path: str) -> int:
        """The largest number of requests for ``path`` in flight at the same time."""
        with self._lock:
            return self._peak[path]

    def enter(self, path: str) -> None:
        with self._lock:
            self._inflight[path] += 1
            self._peak[path] = max(self._peak[path], self._inflight[path])

    def leave(self, path: str) -> None:
        with self._lock:
            self._inflight[path] -= 1


def _query(environ: dict[str, Any]) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}


@functools.lru_cache(maxsize=4)
def gzip_bomb(size: int) -> bytes:
    """``size`` zero bytes, gzip-compressed (about 1 KB per MB)."""
    return gzip.compress(b"\0" * size, compresslevel=9)


def error_page(code: int, size: int) -> bytes:
    """An HTML error page of about ``size`` bytes, mostly markup, styles and script."""
    head = (
        f"<!DOCTYPE html>\n<html><head><title>{code} Internal Server Error</title>\n"
        "<style>" + "body { font-family: sans-serif; color: #333 }\n" * 40 + "</style>\n"
        "<script>window.dataLayer = [];  function track() { return 1 < 2; }</script>\n"
        "</head><body>\n<h1>Internal   Server\n Error</h1>\n"
        "<p>The server encountered an <b>unexpected</b> condition.</p>\n"
    )
    filler = (
        '<div class="trace"><span>at com.example.Servlet.service(Servlet.java:42)</span></div>\n'
    )
    count = max(0, (size - len(head)) // len(filler))
    return (head + filler * count + "</body></html>\n").encode()


class FaultApp(_Counters):
    """The WSGI fault server; see the module docstring for the routes."""

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        count = self.hit(path)
        q = _query(environ)
        kind = path.strip("/").split("/")[0]
        handler = getattr(self, f"_route_{kind.replace('-', '_')}", None)
        if handler is None:
            return respond(start_response, 404, b"no such fault")
        self.enter(path)
        try:
            result: Iterable[bytes] = handler(environ, start_response, path, q, count)
            return result
        finally:
            self.leave(path)

    # -- routes ---------------------------------------------------------------------------
    def _route_ok(self, env: dict[str, Any], sr: StartResponse, *_: Any) -> list[bytes]:
        return respond(sr, 200, b"ok")

    def _route_echo(
        self, env: dict[str, Any], sr: StartResponse, path: str, *_: Any
    ) -> list[bytes]:
        length = int(env.get("CONTENT_LENGTH") or 0)
        body = env["wsgi.input"].read(length) if length else b""
        headers = {k[5:].replace("_", "-").lower(): v for k, v in env.items() if k[:5] == "HTTP_"}
        if env.get("CONTENT_TYPE"):  # wsgiref fills in text/plain when none was sent
            headers["content-type"] = env["CONTENT_TYPE"]
        doc = {
            "method": env["REQUEST_METHOD"],
            "path": path,
            "query": env.get("QUERY_STRING", ""),
            "headers": headers,
            "body": body.decode("latin-1"),
        }
        return respond(sr, 200, json.dumps(doc).encode(), "application/json")

    def _route_status(
        self, env: dict[str, Any], sr: StartResponse, path: str, *_: Any
    ) -> list[bytes]:
        code = int(path.strip("/").split("/")[1])
        return respond(sr, code, f"status {code}".encode())

    def _route_error_page(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], _: int
    ) -> list[bytes]:
        code = int(path.strip("/").split("/")[1])
        return respond(sr, code, error_page(code, int(q.get("size", "100000"))), "text/html")

    def _route_flaky(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], count: int
    ) -> list[bytes]:
        if count <= int(q.get("fails", "1")):
            headers = []
            if "retry_after" in q:
                headers.append(("Retry-After", q["retry_after"]))
            if "retry_date" in q:
                when = time.time() + float(q["retry_date"])
                headers.append(("Retry-After", formatdate(when, usegmt=True)))
            return respond(sr, int(q.get("status", "503")), b"try later", headers=headers)
        return respond(sr, 200, b"recovered")

    def _route_slow(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], _: int
    ) -> list[bytes]:
        time.sleep(float(q.get("delay", "1")))
        return respond(sr, 200, b"slow")

    def _route_trickle(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], _: int
    ) -> Iterator[bytes]:
        chunks, interval = int(q.get("chunks", "10")), float(q.get("interval", "0.1"))
        sr("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(chunks))])

        def body() -> Iterator[bytes]:
            for i in range(chunks):
                if i:  # the first byte (and the headers) go out at once
                    time.sleep(interval)
                yield b"x"

        return body()

    def _route_redirect(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], _: int
    ) -> list[bytes]:
        parts = path.strip("/").split("/")
        left = int(parts[1])
        if left <= 0:
            return respond(sr, 200, b"done")
        rest = "/".join(parts[2:])
        query = env.get("QUERY_STRING", "")
        target = f"/redirect/{left - 1}/{rest}" + (f"?{query}" if query else "")
        return respond(sr, int(q.get("code", "302")), b"", headers=[("Location", target)])

    def _route_redirect_to(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], _: int
    ) -> list[bytes]:
        code = int(q.get("code", "302"))
        return respond(sr, code, b"", headers=[("Location", q["url"])])

    def _route_loop(
        self, env: dict[str, Any], sr: StartResponse, path: str, *_: Any
    ) -> list[bytes]:
        return respond(sr, 302, b"", headers=[("Location", quote(path))])

    def _route_big(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], _: int
    ) -> Iterable[bytes]:
        size = int(q.get("size", "1000000"))
        if q.get("chunked") != "1":
            return respond(sr, 200, b"b" * size)
        sr("200 OK", [("Content-Type", "text/plain")])  # close-delimited body

        def body() -> Iterator[bytes]:
            left = size
            while left > 0:
                n = min(left, 65536)
                left -= n
                yield b"b" * n

        return body()

    def _route_declare(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], _: int
    ) -> list[bytes]:
        sr("200 OK", [("Content-Type", "text/plain"), ("Content-Length", q.get("length", "0"))])
        return [b"short"]

    def _route_gzip(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], _: int
    ) -> list[bytes]:
        if q.get("bomb") == "1":
            body = gzip_bomb(int(q.get("size", "10000000")))
        else:
            body = gzip.compress(q.get("text", "hello gzip").encode())
        return respond(sr, 200, body, headers=[("Content-Encoding", "gzip")])

    def _route_charset(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], _: int
    ) -> list[bytes]:
        cs = q.get("cs", "utf-8")
        body = q.get("text", "caf\u00e9").encode(cs)
        ctype = "text/plain" if q.get("declare") == "0" else f"text/plain; charset={cs}"
        return respond(sr, 200, body, ctype)

    def _route_cookie(
        self, env: dict[str, Any], sr: StartResponse, path: str, q: dict[str, str], _: int
    ) -> list[bytes]:
        cookie = f"{q.get('name', 'session')}={q.get('value', '1')}; Path=/"
        return respond(sr, 200, b"set", headers=[("Set-Cookie", cookie)])

    def _route_dtd(self, env: dict[str, Any], sr: StartResponse, *_: Any) -> list[bytes]:
        return respond(sr, 200, b'<!ENTITY leak "LEAKED-FROM-DTD">', "application/xml-dtd")


class RawFaultServer(_Counters):
    """A raw-socket HTTP/1.1 server on 127.0.0.1 for faults below the WSGI layer."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__()
        self._sock = socket.create_server((host, port))
        self._sock.settimeout(0.05)
        self.host = host
        self.port = self._sock.getsockname()[1]
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            head = b""
            while b"\r\n\r\n" not in head:
                try:
                    data = conn.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                head += data
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
            path, _, qs = target.partition("?")
            q = {k: v[-1] for k, v in parse_qs(qs).items()}
            count = self.hit(path)
            name = path.strip("/").split("/")[0]
            try:
                conn.sendall(self._answer(name, q, count))
            except OSError:
                return

    @staticmethod
    def _answer(name: str, q: dict[str, str], count: int) -> bytes:
        def head(length: int) -> bytes:
            return (
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
            ).encode()

        if name == "drop":
            return head(int(q.get("length", "1000"))) + b"d" * int(q.get("sent", "100"))
        if name == "extra":
            return head(int(q.get("length", "5"))) + b"e" * int(q.get("sent", "20"))
        if name == "reset":
            return b"" if count <= int(q.get("fails", "1")) else head(2) + b"ok"
        if name == "garbage":
            return b"\x00\x01 this is not HTTP at all\r\n\r\n"
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

    def stop(self) -> None:
        self._stopping.set()
        self._sock.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> RawFaultServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
