"""Link checks against local servers: HEAD, GET fallback, redirects, timeouts, rate limit,
cache and the SSRF guard. Time is injected wherever spacing or expiry is asserted."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aggregator.config import HttpSettings
from aggregator.demo.peers.server import PeerServer
from aggregator.validate.quality import assess
from aggregator.validate.quality.reachability import (
    HostRateLimiter,
    Outcome,
    ReachabilityCache,
    ReachabilityChecker,
)

SETTINGS = HttpSettings(
    timeout=0.5, connect_timeout=1.0, retries=0, max_bytes=4096, allow_private=True
)


class FakeTime:
    """A clock that only moves when someone sleeps (or a test says so)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def clock(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.now += seconds


class LinkApp:
    """/ok 200; /missing 404; /nohead 405 on HEAD, 200 on GET; /redirect -> /ok; /loop;
    /slow answers after 3 s; /big declares 10 kB and ignores Range; /ranged honours Range."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.log: list[tuple[str, str, str | None, float]] = []
        self.lock = threading.Lock()

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        path = environ["PATH_INFO"]
        with self.lock:
            self.log.append((method, path, environ.get("HTTP_RANGE"), self.clock()))
        status, headers, body = self.route(method, path, environ.get("HTTP_RANGE"))
        reasons = {200: "OK", 206: "Partial Content", 302: "Found", 404: "Not Found"}
        reasons |= {405: "Method Not Allowed"}
        start_response(
            f"{status} {reasons[status]}",
            [("Content-Type", "text/csv"), ("Content-Length", str(len(body))), *headers],
        )
        return [] if method == "HEAD" else [body]

    def route(self, method: str, path: str, range_: str | None) -> tuple[int, list[Any], bytes]:
        if path == "/ok":
            return 200, [], b"a,b\n1,2\n"
        if path == "/nohead":
            return (405, [], b"no HEAD here") if method == "HEAD" else (200, [], b"a,b\n")
        if path == "/redirect":
            return 302, [("Location", "/ok")], b""
        if path == "/loop":
            return 302, [("Location", "/loop")], b""
        if path == "/slow":
            time.sleep(3)
            return 200, [], b"late"
        if path == "/big":
            return 200, [], b"x" * 10_000
        if path == "/ranged":
            if method == "GET" and range_ == "bytes=0-1023":
                return 206, [("Content-Range", "bytes 0-1023/10000")], b"x" * 1024
            return 200, [], b"x" * 10_000
        return 404, [], b"not found"

    def requests(self, path: str | None = None) -> list[tuple[str, str, str | None, float]]:
        with self.lock:
            return [r for r in self.log if path is None or r[1] == path]


@pytest.fixture
def app() -> LinkApp:
    return LinkApp()


@pytest.fixture
def server(app: LinkApp) -> Iterator[PeerServer]:
    with PeerServer(app) as srv:
        yield srv


@pytest.fixture
def checker() -> Iterator[ReachabilityChecker]:
    with ReachabilityChecker(SETTINGS, min_interval=0) as chk:
        yield chk


def test_200_on_head(server: PeerServer, app: LinkApp, checker: ReachabilityChecker) -> None:
    r = checker.check_one(server.url + "ok")
    assert (r.reachable, r.outcome, r.status, r.method) == (True, Outcome.OK, 200, "HEAD")
    assert [m for m, *_ in app.requests()] == ["HEAD"]


def test_404_after_head_and_get(
    server: PeerServer, app: LinkApp, checker: ReachabilityChecker
) -> None:
    r = checker.check_one(server.url + "missing")
    assert (r.reachable, r.outcome, r.status, r.method) == (False, Outcome.HTTP_ERROR, 404, "GET")
    assert [m for m, *_ in app.requests()] == ["HEAD", "GET"]


def test_405_on_head_falls_back_to_a_ranged_get(
    server: PeerServer, app: LinkApp, checker: ReachabilityChecker
) -> None:
    r = checker.check_one(server.url + "nohead")
    assert (r.reachable, r.status, r.method) == (True, 200, "GET")
    assert [(m, rng) for m, _, rng, _ in app.requests()] == [
        ("HEAD", None),
        ("GET", "bytes=0-1023"),
    ]


def test_redirect_is_followed(server: PeerServer, checker: ReachabilityChecker) -> None:
    r = checker.check_one(server.url + "redirect")
    assert (r.reachable, r.status) == (True, 200)
    assert r.final_url == server.url + "ok"


def test_redirect_loop(server: PeerServer, checker: ReachabilityChecker) -> None:
    r = checker.check_one(server.url + "loop")
    assert (r.reachable, r.outcome) == (False, Outcome.TOO_MANY_REDIRECTS)


def test_timeout(server: PeerServer, app: LinkApp, checker: ReachabilityChecker) -> None:
    r = checker.check_one(server.url + "slow")
    assert (r.reachable, r.outcome, r.status) == (False, Outcome.TIMEOUT, None)
    assert [m for m, *_ in app.requests()] == ["HEAD"]  # a timeout is final: no GET


def test_body_over_the_cap(server: PeerServer, app: LinkApp, checker: ReachabilityChecker) -> None:
    # HEAD declares 10 kB (cap 4 kB): ask for a few bytes; the server sends them (206)
    ranged = checker.check_one(server.url + "ranged")
    assert (ranged.outcome, ranged.status, ranged.method) == (Outcome.OK, 206, "GET")
    # a server ignoring Range answers 200 with the whole body: too large, but it answered
    big = checker.check_one(server.url + "big")
    assert (big.reachable, big.outcome, big.method) == (True, Outcome.TOO_LARGE, "GET")


def test_connection_refused_and_other_schemes(checker: ReachabilityChecker) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    r = checker.check_one(f"http://127.0.0.1:{port}/x")
    assert (r.reachable, r.outcome) == (False, Outcome.CONNECTION_ERROR)
    ftp = checker.check_one("ftp://files.example.org/data.csv")
    assert (ftp.outcome, ftp.method) == (Outcome.UNSUPPORTED_SCHEME, "")
    bad = checker.check_one("http://[::1/x")
    assert bad.outcome is Outcome.INVALID_URL


def test_ssrf_guard_refuses_loopback(server: PeerServer, app: LinkApp) -> None:
    guarded = HttpSettings(retries=0, allow_private=False)
    with ReachabilityChecker(guarded, min_interval=0) as chk:
        r = chk.check_one(server.url + "ok")
    assert (r.reachable, r.outcome) == (False, Outcome.BLOCKED)
    assert app.requests() == []


def test_requests_to_one_host_are_spaced() -> None:
    fake = FakeTime()
    app = LinkApp(clock=fake.clock)
    limiter = HostRateLimiter(2.0, clock=fake.clock, sleep=fake.sleep)
    with (
        PeerServer(app) as srv,
        ReachabilityChecker(SETTINGS, limiter=limiter, max_workers=1, clock=fake.clock) as chk,
    ):
        results = chk.check(
            [srv.url + "ok?1", srv.url + "ok?2", srv.url + "ok?1", srv.url + "ok?3"]
        )
    assert len(results) == 3 and all(r.reachable for r in results.values())
    times = [t for *_, t in app.requests()]
    assert [t - times[0] for t in times] == [0.0, 2.0, 4.0]
    assert fake.sleeps == [2.0, 2.0]


def test_rate_limiter_spaces_each_host_on_its_own() -> None:
    fake = FakeTime(now=0.0)
    limiter = HostRateLimiter(1.5, clock=fake.clock, sleep=fake.sleep)
    starts = []
    for url in [
        "http://a.example/1",
        "http://b.example/1",
        "http://a.example/2",
        "http://A.example/3",
    ]:
        limiter.wait(url)
        starts.append((url.split("/")[2].lower(), fake.now))
    assert starts == [
        ("a.example", 0.0),
        ("b.example", 0.0),
        ("a.example", 1.5),
        ("a.example", 3.0),
    ]


def test_cache_ttl(server: PeerServer, app: LinkApp) -> None:
    fake = FakeTime()
    cache = ReachabilityCache(ttl=100, failure_ttl=10, clock=fake.clock)
    with ReachabilityChecker(SETTINGS, cache=cache, min_interval=0, clock=fake.clock) as chk:
        chk.check_one(server.url + "ok")
        chk.check_one(server.url + "missing")  # HEAD + GET
        fake.now += 9
        chk.check([server.url + "ok", server.url + "missing"])
        assert len(app.requests()) == 3  # both cached
        fake.now += 2  # 11 s: the failure expired, the success did not
        chk.check([server.url + "ok", server.url + "missing"])
        assert [p for _, p, *_ in app.requests()] == [
            "/ok",
            "/missing",
            "/missing",
            "/missing",
            "/missing",
        ]
        fake.now += 90  # 101 s
        chk.check_one(server.url + "ok")
        assert len(app.requests("/ok")) == 2


def test_cache_persists_in_sqlite(server: PeerServer, app: LinkApp, tmp_path: Path) -> None:
    fake = FakeTime()
    path = tmp_path / "links.sqlite"
    first = ReachabilityCache(ttl=100, path=path, clock=fake.clock)
    with ReachabilityChecker(SETTINGS, cache=first, min_interval=0, clock=fake.clock) as chk:
        before = chk.check([server.url + "ok", server.url + "nohead"])
    first.close()
    assert len(app.requests()) == 3

    fake.now += 50
    second = ReachabilityCache(ttl=100, path=path, clock=fake.clock)
    with ReachabilityChecker(SETTINGS, cache=second, min_interval=0, clock=fake.clock) as chk:
        after = chk.check([server.url + "ok", server.url + "nohead"])
    assert after == before
    assert len(app.requests()) == 3  # nothing requested again
    fake.now += 60
    assert second.get(server.url + "ok") is None  # expired
    second.purge()
    second.close()


def test_pool_checks_everything_once(server: PeerServer, app: LinkApp) -> None:
    urls = [server.url + f"ok?{i}" for i in range(12)] + [server.url + "missing"]
    with ReachabilityChecker(SETTINGS, min_interval=0, max_workers=4) as chk:
        results = chk.check(urls + urls[:3])
    assert set(results) == set(urls)
    assert sum(r.reachable for r in results.values()) == 12
    assert len(app.requests()) == 12 + 2


def test_results_feed_the_assessment(server: PeerServer, checker: ReachabilityChecker) -> None:
    dataset = "https://d.example.org/ds"
    dist = "https://d.example.org/ds/1"
    nt = (
        f"<{dataset}> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> "
        f"<http://www.w3.org/ns/dcat#Dataset> .\n"
        f"<{dataset}> <http://www.w3.org/ns/dcat#distribution> <{dist}> .\n"
        f"<{dist}> <http://www.w3.org/ns/dcat#accessURL> <{server.url}nohead> .\n"
        f"<{dist}> <http://www.w3.org/ns/dcat#downloadURL> <{server.url}missing> .\n"
    ).encode()
    from aggregator.validate.quality import link_urls

    q = assess(nt, reachability=checker.check(link_urls(nt)))
    access, download = q.indicator("accessUrlReachable"), q.indicator("downloadUrlReachable")
    assert (access.earned, access.checked) == (50, True)
    assert (download.earned, download.checked) == (0, True)
    assert "not reachable (HTTP 404, http-error)" in download.evidence
