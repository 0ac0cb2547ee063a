"""HttpClient against a real local server that misbehaves (aggregator.demo.peers.http_faults)."""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import pytest
import requests

from aggregator.config import HttpSettings, Secret, SourceConfig
from aggregator.core.errors import (
    BlockedAddressError,
    ResponseTooLargeError,
    TooManyRedirectsError,
    TransportError,
)
from aggregator.demo.peers.http_faults import FaultApp, RawFaultServer, gzip_bomb
from aggregator.demo.peers.server import PeerServer
from aggregator.net.client import HttpClient, HttpSession, Response
from aggregator.net.guard import AddressGuard, is_public_address

BASE = HttpSettings(
    timeout=0.5,
    connect_timeout=1.0,
    retries=2,
    backoff=0.01,
    max_backoff=5.0,
    max_bytes=1_000_000,
    allow_private=True,
)


class Sleeps(list[float]):
    """An injected ``sleep`` that records the delays instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture(scope="module")
def app() -> FaultApp:
    return FaultApp()


@pytest.fixture(scope="module")
def server(app: FaultApp) -> Iterator[PeerServer]:
    with PeerServer(app) as srv:
        yield srv


@pytest.fixture(scope="module")
def raw() -> Iterator[RawFaultServer]:
    with RawFaultServer() as srv:
        yield srv


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def client_for(sleeps: Sleeps | None = None, **changes: Any) -> HttpClient:
    settings = replace(BASE, **changes)
    return HttpClient(settings, sleep=sleeps if sleeps is not None else Sleeps())


def unique(prefix: str) -> str:
    return f"{prefix}/{time.monotonic_ns()}"


# -- basics --------------------------------------------------------------------------------
def test_get_sends_user_agent_and_headers(server: PeerServer) -> None:
    client = client_for()
    resp = client.get(server.url + "echo/ua", headers={"X-Test": "yes"})
    doc = json.loads(resp.text)
    assert resp.status == 200
    assert resp.media_type == "application/json"
    assert doc["headers"]["user-agent"] == BASE.user_agent
    assert doc["headers"]["x-test"] == "yes"


def test_params_are_sent(server: PeerServer) -> None:
    resp = client_for().get(server.url + "echo/params", params={"verb": "Identify"})
    assert json.loads(resp.text)["query"] == "verb=Identify"


def test_proxies_from_the_environment_are_not_used(
    server: PeerServer, app: FaultApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy_app = FaultApp()
    with PeerServer(proxy_app) as proxy:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        path = unique("/ok/env")
        assert client_for().get(server.url + path.lstrip("/")).content == b"ok"
        assert proxy_app.total() == 0
        assert app.hits(path) == 1


# -- timeouts and retries ------------------------------------------------------------------
def test_slow_first_byte_times_out_after_the_configured_retries(
    server: PeerServer, app: FaultApp, sleeps: Sleeps
) -> None:
    path = unique("/slow/first-byte")
    client = client_for(sleeps, timeout=0.2, retries=2)
    started = time.monotonic()
    with pytest.raises(TransportError) as info:
        client.get(server.url + path.lstrip("/") + "?delay=1.0")
    assert "3 attempt(s)" in str(info.value)
    assert app.hits(path) == 3
    assert len(sleeps) == 2
    assert time.monotonic() - started < 3


def test_trickle_faster_than_the_read_timeout_succeeds(server: PeerServer) -> None:
    resp = client_for(timeout=0.5).get(server.url + "trickle/ok?chunks=5&interval=0.05")
    assert resp.content == b"xxxxx"


def test_trickle_stalling_mid_body_is_a_retried_transport_error(
    server: PeerServer, app: FaultApp, sleeps: Sleeps
) -> None:
    path = unique("/trickle/stall")
    client = client_for(sleeps, timeout=0.2, retries=1)
    with pytest.raises(TransportError) as info:
        client.get(server.url + path.lstrip("/") + "?chunks=3&interval=0.6")
    assert type(info.value) is TransportError
    assert app.hits(path) == 2
    assert len(sleeps) == 1


def test_total_timeout_bounds_a_slow_trickle(server: PeerServer, app: FaultApp) -> None:
    path = unique("/trickle/slowloris")
    client = HttpClient(replace(BASE, timeout=1.0), sleep=Sleeps(), total_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(TransportError, match="longer than"):
        client.get(server.url + path.lstrip("/") + "?chunks=40&interval=0.05")
    assert time.monotonic() - started < 1.5
    assert app.hits(path) == 1  # a deadline is not retried


def backoff_bounds(attempt: int, backoff: float, cap: float) -> tuple[float, float]:
    """urllib3's schedule: the first retry at once, then backoff * 2**n plus a jitter of up
    to ``backoff`` (we pass backoff as backoff_jitter), every delay capped."""
    if attempt == 0:
        return 0.0, 0.0
    base = backoff * 2.0**attempt
    return min(cap, base), min(cap, base + backoff)


def test_backoff_grows_exponentially_and_is_capped(server: PeerServer, app: FaultApp) -> None:
    path = unique("/status/503")
    sleeps = Sleeps()
    settings = replace(BASE, retries=5, backoff=1.0, max_backoff=5.0)
    client = HttpClient(settings, sleep=sleeps)
    with pytest.raises(TransportError) as info:
        client.get(server.url + path.lstrip("/"))
    assert info.value.status == 503
    assert app.hits(path) == 6
    assert len(sleeps) == 5
    for attempt, delay in enumerate(sleeps):
        low, high = backoff_bounds(attempt, 1.0, 5.0)
        assert low <= delay <= high
    assert sleeps[0] == 0.0  # urllib3 retries once at once: most faults clear at once
    assert sleeps[3:] == [5.0, 5.0]  # 8 and 16 (plus jitter) capped


def test_backoff_jitter_stays_within_bounds(server: PeerServer) -> None:
    sleeps = Sleeps()
    settings = replace(BASE, retries=4, backoff=1.0, max_backoff=60.0)
    client = HttpClient(settings, sleep=sleeps)
    with pytest.raises(TransportError):
        client.get(server.url + unique("status/500"))
    assert len(sleeps) == 4
    for attempt, delay in enumerate(sleeps):
        low, high = backoff_bounds(attempt, 1.0, 60.0)
        assert low <= delay <= high
    # jittered, not a fixed schedule: the fractional parts differ
    assert len({round(d % 1.0, 9) for d in sleeps[1:]}) == 3


def test_retry_after_seconds_is_honoured(server: PeerServer, app: FaultApp, sleeps: Sleeps) -> None:
    path = unique("/flaky/seconds")
    resp = client_for(sleeps).get(server.url + path.lstrip("/") + "?fails=2&retry_after=3")
    assert resp.content == b"recovered"
    assert sleeps == [3.0, 3.0]
    assert app.hits(path) == 3


def test_retry_after_is_capped_by_max_backoff(server: PeerServer, sleeps: Sleeps) -> None:
    url = server.url + unique("flaky/capped") + "?fails=1&retry_after=86400"
    assert client_for(sleeps, max_backoff=7.0).get(url).content == b"recovered"
    assert sleeps == [7.0]


def test_retry_after_http_date_is_honoured(server: PeerServer, sleeps: Sleeps) -> None:
    url = server.url + unique("flaky/date") + "?fails=1&retry_date=30"
    assert client_for(sleeps, max_backoff=60.0).get(url).content == b"recovered"
    assert len(sleeps) == 1
    assert 27.0 <= sleeps[0] <= 31.0  # the date has one-second resolution


def test_an_unreadable_retry_after_falls_back_to_the_backoff(
    server: PeerServer, app: FaultApp, sleeps: Sleeps
) -> None:
    path = unique("/flaky/bad-retry-after")
    resp = client_for(sleeps).get(server.url + path.lstrip("/") + "?fails=2&retry_after=soon")
    assert resp.content == b"recovered"
    assert app.hits(path) == 3
    assert len(sleeps) == 2 and sleeps[0] == 0.0 and 0.02 <= sleeps[1] <= 0.03


def test_413_with_retry_after_is_not_retried(
    server: PeerServer, app: FaultApp, sleeps: Sleeps
) -> None:
    """urllib3 alone retries a 413 that carries Retry-After; a 4xx other than 429 is final."""
    path = unique("/flaky/413")
    with pytest.raises(TransportError) as info:
        client_for(sleeps).get(server.url + path.lstrip("/") + "?fails=5&status=413&retry_after=1")
    assert info.value.status == 413
    assert app.hits(path) == 1
    assert sleeps == []


def test_post_is_retried_too(server: PeerServer, app: FaultApp, sleeps: Sleeps) -> None:
    path = unique("/flaky/post")
    resp = client_for(sleeps).post(server.url + path.lstrip("/") + "?fails=2", data={"q": "x"})
    assert resp.content == b"recovered"
    assert app.hits(path) == 3


def test_errors_carry_status_url_and_body_excerpt(server: PeerServer) -> None:
    url = server.url + unique("status/502").lstrip("/")
    with pytest.raises(TransportError) as info:
        client_for(retries=1).get(url)
    assert info.value.status == 502
    assert info.value.url == url
    assert str(info.value).startswith(f"GET {url} returned HTTP 502 Bad Gateway: status 502")


def test_an_html_error_page_is_kept_as_status_reason_and_a_short_text(server: PeerServer) -> None:
    """A server's 100 kB HTML error page is not a message: the status, its reason and the
    start of the page's text are (for get and for stream alike)."""
    url = server.url + unique("error-page/500").lstrip("/") + "?size=100000"
    expected = (
        f"GET {url} returned HTTP 500 Internal Server Error: The server encountered an"
        " unexpected condition. at com.example.Servlet.service(Servlet.java:42) at"
    )
    with pytest.raises(TransportError) as got:
        client_for(retries=0).get(url)
    with pytest.raises(TransportError) as streamed, client_for(retries=0).stream(url):
        pass
    for info in (got, streamed):
        message = str(info.value)
        assert info.value.status == 500
        assert message.startswith(expected), message
        excerpt = message.split(": ", 1)[1]
        assert len(excerpt) <= 200 and excerpt.endswith("\u2026")
        assert "<" not in excerpt and "font-family" not in excerpt and "dataLayer" not in excerpt


def test_429_then_success(server: PeerServer, app: FaultApp, sleeps: Sleeps) -> None:
    path = unique("/flaky/429")
    resp = client_for(sleeps).get(server.url + path.lstrip("/") + "?fails=1&status=429")
    assert resp.content == b"recovered"
    assert app.hits(path) == 2


def test_500_for_ever_fails_after_retries(server: PeerServer, app: FaultApp) -> None:
    path = unique("/status/500")
    with pytest.raises(TransportError) as info:
        client_for(retries=3).get(server.url + path.lstrip("/"))
    assert info.value.status == 500
    assert app.hits(path) == 4


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410])
def test_no_retry_on_4xx_other_than_429(
    server: PeerServer, app: FaultApp, sleeps: Sleeps, code: int
) -> None:
    path = unique(f"/status/{code}")
    client = client_for(sleeps)
    with pytest.raises(TransportError) as info:
        client.get(server.url + path.lstrip("/"))
    assert info.value.status == code
    assert app.hits(path) == 1
    assert sleeps == []
    resp = client.get(server.url + path.lstrip("/"), raise_for_status=False)
    assert resp.status == code


def test_connection_closed_without_response_is_retried(raw: RawFaultServer, sleeps: Sleeps) -> None:
    resp = client_for(sleeps, retries=3).get(raw.url + "reset/a?fails=2")
    assert resp.content == b"ok"
    assert raw.hits("/reset/a") == 3
    assert len(sleeps) == 2


def test_connection_refused_is_retried_then_transport_error(sleeps: Sleeps) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TransportError):
        client_for(sleeps, retries=2).get(f"http://127.0.0.1:{port}/")
    assert len(sleeps) == 2


def test_a_session_without_transport_retries_sends_each_request_once(
    server: PeerServer, app: FaultApp, raw: RawFaultServer, sleeps: Sleeps
) -> None:
    """For requests signed for one use (MDR): the caller retries whole calls, signed afresh,
    with the session's rule, which keeps the configured attempts and backoff."""
    client = client_for(sleeps, retries=3)
    with client.session(transport_retries=False) as session:
        assert session.retry.total == 3  # the rule a caller retries with
        flaky = unique("/flaky/once")
        resp = session.post(server.url + flaky.lstrip("/"), data=b"x", raise_for_status=False)
        assert (resp.status, app.hits(flaky)) == (503, 1)
        answer = session.session.post(server.url + flaky.lstrip("/"), data=b"x")  # as zeep
        assert answer.status_code == 200
        assert app.hits(flaky) == 2
        with pytest.raises(TransportError, match="after 1 attempt"):
            session.get(raw.url + "reset/once?fails=2")
        assert raw.hits("/reset/once") == 1
    assert sleeps == []


def test_non_http_answer_is_a_transport_error(raw: RawFaultServer) -> None:
    with pytest.raises(TransportError):
        client_for(retries=0).get(raw.url + "garbage")


# -- redirects -----------------------------------------------------------------------------
def test_redirect_chain_within_the_cap(server: PeerServer) -> None:
    resp = client_for(max_redirects=5).get(server.url + "redirect/5/within")
    assert resp.content == b"done"
    assert resp.url == server.url + "redirect/0/within"


def test_redirect_chain_beyond_the_cap(server: PeerServer, app: FaultApp) -> None:
    name = unique("beyond")
    with pytest.raises(TooManyRedirectsError):
        client_for(max_redirects=3).get(server.url + f"redirect/6/{name}")
    hops = sum(app.hits(f"/redirect/{n}/{name}") for n in range(7))
    assert hops == 4  # the first request and three redirects followed


def test_redirect_loop(server: PeerServer, app: FaultApp) -> None:
    path = unique("/loop")
    with pytest.raises(TooManyRedirectsError):
        client_for(max_redirects=5).get(server.url + path.lstrip("/"))
    assert app.hits(path) == 6


@pytest.mark.parametrize(
    "target", ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://127.0.0.1:70/_x"]
)
def test_redirect_to_a_non_http_scheme_is_blocked(server: PeerServer, target: str) -> None:
    url = server.url + "redirect-to/scheme?url=" + quote(target, safe="")
    with pytest.raises(BlockedAddressError):
        client_for().get(url)


def test_303_turns_post_into_get(server: PeerServer) -> None:
    url = server.url + "redirect-to/303?code=303&url=" + quote("/echo/after-303", safe="")
    resp = client_for().post(url, data={"query": "x"})
    doc = json.loads(resp.text)
    assert doc["method"] == "GET"
    assert doc["body"] == ""
    # wsgiref reports text/plain when no Content-Type was sent
    assert doc["headers"].get("content-type", "text/plain") == "text/plain"


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_other_redirects_keep_post_and_body(server: PeerServer, code: int) -> None:
    """Only 303 turns a POST into a GET (requests alone, like browsers, does it on 301/302
    too, and drops the body)."""
    url = server.url + f"redirect-to/{code}?code={code}&url=" + quote("/echo/k", safe="")
    doc = json.loads(client_for().post(url, data={"query": "x"}).text)
    assert doc["method"] == "POST"
    assert doc["body"] == "query=x"
    assert doc["headers"]["content-type"] == "application/x-www-form-urlencoded"


def test_params_are_not_appended_again_after_a_redirect(server: PeerServer) -> None:
    url = server.url + "redirect-to/params"
    resp = client_for().get(url, params={"url": "/echo/p?verb=Identify"})
    assert json.loads(resp.text)["query"] == "verb=Identify"


def test_credentials_do_not_follow_a_redirect_to_another_host(server: PeerServer) -> None:
    client = client_for()
    auth = {"Authorization": "Bearer secret", "Cookie": "s=1"}
    same = server.url + "redirect-to/same?url=" + quote("/echo/same", safe="")
    doc = json.loads(client.get(same, headers=auth).text)
    assert doc["headers"]["authorization"] == "Bearer secret"
    other = f"http://localhost:{server.port}/echo/other"
    cross = server.url + "redirect-to/cross?url=" + quote(other, safe="")
    doc = json.loads(client.get(cross, headers=auth).text)
    assert "authorization" not in doc["headers"]
    assert "cookie" not in doc["headers"]


# -- SSRF guard ----------------------------------------------------------------------------
def test_guard_blocks_the_loopback_server_itself(server: PeerServer, app: FaultApp) -> None:
    path = unique("/ok/guarded")
    with pytest.raises(BlockedAddressError):
        client_for(allow_private=False).get(server.url + path.lstrip("/"))
    assert app.hits(path) == 0


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.1.2.3:8080/",
        "http://localhost/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://[::ffff:10.0.0.1]/",
        "http://[::]/",
        "http://0.0.0.0/",
        "http://10.1.2.3/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/",
        "http://224.0.0.1/",
        "http://255.255.255.255/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://[2002:7f00:1::]/",  # 6to4 wrapping 127.0.0.1
        "http://[64:ff9b::a00:1]/",  # NAT64 wrapping 10.0.0.1
        "http://user:pw@127.0.0.1/",
        "https://127.0.0.1/",
    ],
)
def test_guard_blocks_non_public_addresses(url: str) -> None:
    with pytest.raises(BlockedAddressError):
        AddressGuard(allow_private=False).check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",  # decimal 127.0.0.1
        "http://0x7f000001/",  # hex
        "http://0177.0.0.1/",  # octal
        "http://127.1/",  # short form
        "http://0/",
    ],
)
def test_guard_blocks_odd_ip_notations_the_resolver_accepts(url: str) -> None:
    # glibc's resolver turns these into 127.0.0.1/0.0.0.0; if a resolver refused them the
    # request would fail to resolve, which is also safe.
    with pytest.raises(TransportError) as info:
        AddressGuard(allow_private=False).check_url(url)
    host = url.split("//")[1].rstrip("/")
    try:
        socket.getaddrinfo(host, 80)
    except socket.gaierror:
        return
    assert isinstance(info.value, BlockedAddressError)


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.org/", "gopher://example.org/", "data:,x"]
)
def test_guard_blocks_other_schemes_even_when_private_is_allowed(url: str) -> None:
    with pytest.raises(BlockedAddressError):
        AddressGuard(allow_private=True).check_url(url)
    with pytest.raises(BlockedAddressError):
        client_for(allow_private=True).get(url)


@pytest.mark.parametrize(
    "addr", ["8.8.8.8", "2001:4860:4860::8888", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_public_addresses_are_public(addr: str) -> None:
    assert is_public_address(ipaddress.ip_address(addr))


@pytest.mark.parametrize("url", ["http://[::1/", "http://host:notaport/", "http:///nohost"])
def test_invalid_urls_are_transport_errors(url: str) -> None:
    with pytest.raises(TransportError):
        client_for(allow_private=False).get(url)


def test_redirect_to_loopback_is_refused_by_the_guard(server: PeerServer, app: FaultApp) -> None:
    """The first hop is trusted; the redirect to another loopback origin is checked."""
    client = HttpClient(
        replace(BASE, allow_private=False),
        sleep=Sleeps(),
        trusted_hosts=[f"127.0.0.1:{server.port}"],
    )
    assert client.get(server.url + "ok/trusted").content == b"ok"
    path = unique("/ok/after-redirect")
    for target in (
        f"http://localhost:{server.port}{path}",
        f"http://[::1]:{server.port}{path}",
        f"http://127.0.0.2:{server.port}{path}",
    ):
        url = server.url + "redirect-to/ssrf?url=" + quote(target, safe="")
        with pytest.raises(BlockedAddressError):
            client.get(url)
    assert app.hits(path) == 0


def test_dns_rebinding_between_check_and_connect_is_refused(
    server: PeerServer, app: FaultApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name resolves to a public address for the check, then to loopback."""
    real = socket.getaddrinfo
    calls = {"n": 0}

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.test":
            calls["n"] += 1
            ip = "93.184.216.34" if calls["n"] == 1 else "127.0.0.1"
            return real(ip, port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    path = unique("/ok/rebind")
    client = client_for(allow_private=False, retries=0)
    with pytest.raises(BlockedAddressError):
        client.get(f"http://rebind.test:{server.port}{path}")
    assert calls["n"] == 2
    assert app.hits(path) == 0


def test_guarded_sockets_connect_to_the_checked_address(
    server: PeerServer, app: FaultApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = socket.getaddrinfo
    seen: list[str] = []

    def resolver(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(host))
        if host == "catalogue.test":
            return real("127.0.0.1", port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    client = HttpClient(
        replace(BASE, allow_private=False),
        sleep=Sleeps(),
        trusted_hosts=[f"catalogue.test:{server.port}"],
    )
    path = unique("/ok/pinned")
    assert client.get(f"http://catalogue.test:{server.port}{path}").content == b"ok"
    assert app.hits(path) == 1
    assert "127.0.0.1" in seen  # the socket was opened to the resolved, checked address


# -- size caps -----------------------------------------------------------------------------
def test_declared_length_over_the_cap_is_refused_before_reading(
    server: PeerServer, app: FaultApp, sleeps: Sleeps
) -> None:
    path = unique("/big/declared")
    with pytest.raises(ResponseTooLargeError, match="declares"):
        client_for(sleeps, max_bytes=1000).get(server.url + path.lstrip("/") + "?size=2000")
    assert app.hits(path) == 1
    assert sleeps == []


def test_lying_content_length_over_the_cap(server: PeerServer) -> None:
    with pytest.raises(ResponseTooLargeError):
        client_for().get(server.url + "declare/huge?length=1000000000000")


def test_undeclared_body_over_the_cap_is_cut_while_streaming(
    server: PeerServer, app: FaultApp
) -> None:
    path = unique("/big/undeclared")
    with pytest.raises(ResponseTooLargeError, match="more than"):
        client_for(max_bytes=100_000).get(server.url + path.lstrip("/") + "?size=500000&chunked=1")
    assert app.hits(path) == 1


def test_body_at_the_cap_is_accepted(server: PeerServer) -> None:
    url = server.url + "big/exact?size=100000&chunked=1"
    assert len(client_for(max_bytes=100_000).get(url).content) == 100_000


def test_gzip_is_decoded(server: PeerServer) -> None:
    resp = client_for().get(server.url + "gzip/plain?text=hello")
    assert resp.content == b"hello"


def test_gzip_bomb_is_capped_on_decoded_bytes(server: PeerServer) -> None:
    url = server.url + "gzip/bomb?bomb=1&size=100000000"  # 100 MB of zeros, ~100 KB sent
    assert len(gzip_bomb(100_000_000)) < 200_000  # built (and cached) before measuring
    tracemalloc.start()
    try:
        started = time.monotonic()
        with pytest.raises(ResponseTooLargeError):
            client_for(max_bytes=1_000_000, timeout=20.0).get(url)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 20
    assert peak < 20_000_000


def test_connection_dropped_mid_body_is_retried_then_fails(
    raw: RawFaultServer, sleeps: Sleeps
) -> None:
    with pytest.raises(TransportError) as info:
        client_for(sleeps, retries=2).get(raw.url + "drop/a?length=1000&sent=100")
    assert type(info.value) is TransportError
    assert raw.hits("/drop/a") == 3
    assert len(sleeps) == 2


def test_more_bytes_than_content_length_are_ignored(raw: RawFaultServer) -> None:
    client = client_for()
    assert client.get(raw.url + "extra/a?length=5&sent=50").content == b"eeeee"
    assert client.get(raw.url + "extra/b?length=5&sent=50").content == b"eeeee"


# -- per-host concurrency ------------------------------------------------------------------
def _run_parallel(client: HttpClient, url: str, n: int) -> list[BaseException]:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            client.get(url)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    return errors


def test_per_host_concurrency_limit(server: PeerServer, app: FaultApp) -> None:
    path = unique("/slow/concurrency")
    client = client_for(per_host_concurrency=2, timeout=5.0)
    started = time.monotonic()
    errors = _run_parallel(client, server.url + path.lstrip("/") + "?delay=0.2", 6)
    assert errors == []
    assert app.hits(path) == 6
    assert app.peak(path) == 2
    assert time.monotonic() - started >= 0.55  # three waves of two


def test_concurrency_is_per_host_not_global(server: PeerServer, app: FaultApp) -> None:
    path = unique("/slow/wider")
    client = client_for(per_host_concurrency=4, timeout=5.0)
    assert _run_parallel(client, server.url + path.lstrip("/") + "?delay=0.3", 4) == []
    assert app.peak(path) >= 3


def test_slots_are_released_on_every_failure_path(server: PeerServer, raw: RawFaultServer) -> None:
    client = client_for(per_host_concurrency=1, retries=1)
    failing = [
        server.url + "status/404",
        server.url + "status/503",
        server.url + "big/x?size=2000000",
        server.url + "big/y?size=2000000&chunked=1",
        server.url + "loop/release",
        server.url + "redirect-to/r?url=" + quote("file:///etc/passwd", safe=""),
    ]
    for url in failing:
        with pytest.raises(TransportError):
            client.get(url)
    with pytest.raises(TransportError), client.stream(server.url + "status/404"):
        pass

    def give_up() -> None:
        with client.stream(server.url + "big/s?size=10"):
            raise ResponseTooLargeError("consumer gave up")

    with pytest.raises(ResponseTooLargeError):
        give_up()
    for url in (raw.url + "drop/rel?length=1000&sent=10", raw.url + "garbage"):
        with pytest.raises(TransportError):
            client.get(url)
    # with one slot per host, a leaked slot would make these block for ever
    assert _run_parallel(client, server.url + "ok/after", 2) == []
    assert _run_parallel(client, raw.url + "reset/after?fails=0", 2) == []


# -- stream() ------------------------------------------------------------------------------
def test_stream_yields_chunks(server: PeerServer) -> None:
    client = client_for()
    with client.stream(server.url + "big/stream?size=300000&chunked=1") as (head, chunks):
        assert head.status == 200
        assert head.content == b""
        parts = list(chunks)
    assert len(parts) > 1
    assert sum(len(p) for p in parts) == 300_000


def test_stream_enforces_the_cap_while_reading(server: PeerServer) -> None:
    client = client_for(max_bytes=100_000)
    received: list[int] = []

    def consume() -> None:
        url = server.url + "big/stream-cap?size=500000&chunked=1"
        with client.stream(url) as (_, chunks):
            for chunk in chunks:
                received.append(len(chunk))

    with pytest.raises(ResponseTooLargeError):
        consume()
    assert 0 < sum(received) <= 100_000


def test_stream_refuses_a_declared_length_over_the_cap(server: PeerServer) -> None:
    client = client_for(max_bytes=1000)
    with (
        pytest.raises(ResponseTooLargeError, match="declares"),
        client.stream(server.url + "big/stream-declared?size=5000"),
    ):
        pytest.fail("the body must not be offered")


def test_stream_caps_a_gzip_bomb(server: PeerServer) -> None:
    client = client_for(max_bytes=1_000_000)
    with (
        pytest.raises(ResponseTooLargeError),
        client.stream(server.url + "gzip/stream-bomb?bomb=1&size=20000000") as (_, chunks),
    ):
        for _chunk in chunks:
            pass


def test_stream_wraps_a_dropped_connection(raw: RawFaultServer) -> None:
    client = client_for()
    with (
        pytest.raises(TransportError) as info,
        client.stream(raw.url + "drop/stream?length=1000&sent=10") as (_, chunks),
    ):
        b"".join(chunks)
    assert info.value.__cause__ is not None


def test_stream_raises_on_http_errors_after_retries(server: PeerServer, app: FaultApp) -> None:
    path = unique("/status/503")
    client = client_for(retries=1)
    with pytest.raises(TransportError) as info, client.stream(server.url + path.lstrip("/")):
        pass
    assert info.value.status == 503
    assert app.hits(path) == 2


# -- Response.text and Retry-After parsing ---------------------------------------------------
@pytest.mark.parametrize(
    ("charset", "text"), [("iso-8859-1", "café"), ("shift_jis", "日本語"), ("utf-16", "é")]
)
def test_text_uses_the_declared_charset(server: PeerServer, charset: str, text: str) -> None:
    resp = client_for().get(server.url + "charset/x", params={"cs": charset, "text": text})
    assert resp.text == text


def test_text_defaults_to_utf8(server: PeerServer) -> None:
    resp = client_for().get(server.url + "charset/undeclared?declare=0&text=caf%C3%A9")
    assert resp.text == "café"


def make(content: bytes, content_type: str) -> Response:
    return Response("http://x/", 200, {"content-type": content_type}, content)


@pytest.mark.parametrize(
    ("content", "ctype", "expected"),
    [
        ("café".encode("latin-1"), 'text/plain; charset="ISO-8859-1"', "café"),
        ("café".encode("latin-1"), "text/plain;charset = 'latin1' ", "café"),
        ("café".encode(), "text/plain; charset=x-no-such-codec", "café"),
        (b"\xef\xbb\xbfcaf\xc3\xa9", "application/xml", "café"),
        ("café".encode("utf-16"), "application/xml", "café"),
        (b"caf\xff", "text/plain", "caf\ufffd"),
        (b"", "", ""),
    ],
)
def test_text_charset_edge_cases(content: bytes, ctype: str, expected: str) -> None:
    assert make(content, ctype).text == expected


# -- one session per source ------------------------------------------------------------------
def source(name: str, url: str, headers: dict[str, str | Secret] | None = None) -> SourceConfig:
    return SourceConfig(name=name, type="oai-pmh", url=url, headers=headers or {})


def echoed(http: HttpSession | HttpClient, url: str) -> dict[str, str]:
    headers: dict[str, str] = json.loads(http.get(url).text)["headers"]
    return headers


def test_cookies_are_never_shared_between_sources(server: PeerServer) -> None:
    client = client_for()
    echo = server.url + "echo/cookies"
    with client.session(source("a", server.url)) as a, client.session(source("b", server.url)) as b:
        a.get(server.url + "cookie/a?name=token&value=A")
        assert echoed(a, echo)["cookie"] == "token=A"
        assert "cookie" not in echoed(b, echo)  # same host, another source
        b.get(server.url + "cookie/b?name=token&value=B")
        assert echoed(a, echo)["cookie"] == "token=A"
        assert echoed(b, echo)["cookie"] == "token=B"
        assert "cookie" not in echoed(client, echo)  # nor the client's own session
        # a cookie of this host does not follow a redirect to another host
        other = f"http://localhost:{server.port}/echo/other"
        assert "cookie" not in echoed(a, server.url + "redirect-to/c?url=" + quote(other, safe=""))


def test_source_headers_and_secrets_go_only_to_their_source(server: PeerServer) -> None:
    key = Secret("PORTAL_KEY", "s3cr3t")
    a = source("a", server.url, {"X-API-Key": key, "Accept-Language": "en"})
    client = client_for()
    with client.session(a) as sa, client.session(source("b", server.url)) as sb:
        mine = echoed(sa, server.url + "echo/a")
        assert mine["x-api-key"] == "s3cr3t" and mine["accept-language"] == "en"
        assert mine["user-agent"] == BASE.user_agent
        theirs = echoed(sb, server.url + "echo/b")
        assert "x-api-key" not in theirs and "accept-language" not in theirs
        same = server.url + "redirect-to/s?url=" + quote("/echo/same", safe="")
        assert echoed(sa, same)["x-api-key"] == "s3cr3t"
        other = f"http://localhost:{server.port}/echo/other"
        cross = echoed(sa, server.url + "redirect-to/x?url=" + quote(other, safe=""))
        assert "x-api-key" not in cross  # a credential does not leave the host
        assert cross["accept-language"] == "en"  # a plain header does


def test_a_library_calling_session_get_is_retried_capped_and_timed_out(
    server: PeerServer, app: FaultApp
) -> None:
    """What zeep (``Transport(session=http.session)``) or OWSLib do: plain session calls."""
    sleeps = Sleeps()
    with client_for(sleeps, max_bytes=100_000, retries=2).session() as http:
        session = http.session
        path = unique("/flaky/library")
        resp = session.get(server.url + path.lstrip("/") + "?fails=2&retry_after=1")
        assert (resp.status_code, resp.content) == (200, b"recovered")
        assert app.hits(path) == 3 and sleeps == [1.0, 1.0]
        path = unique("/flaky/library-post")
        resp = session.post(server.url + path.lstrip("/") + "?fails=1&status=502", data=b"<x/>")
        assert resp.content == b"recovered" and app.hits(path) == 2
        for url in (
            server.url + "big/library?size=200000",  # declared
            server.url + "big/library-chunked?size=200000&chunked=1",  # counted
            server.url + "gzip/library-bomb?bomb=1&size=20000000",  # decoded bytes counted
        ):
            with pytest.raises(ResponseTooLargeError):
                session.get(url)
        path = unique("/slow/library")
        started = time.monotonic()
        with pytest.raises(requests.ConnectionError):  # no timeout given: 0.5 s applies
            session.get(server.url + path.lstrip("/") + "?delay=2")
        assert app.hits(path) == 3
        assert time.monotonic() - started < 4


def test_a_library_calling_session_get_is_guarded(server: PeerServer, app: FaultApp) -> None:
    path = unique("/ok/library-guarded")
    with client_for(allow_private=False).session() as http:
        with pytest.raises(BlockedAddressError):
            http.session.get(server.url + path.lstrip("/"))
        assert app.hits(path) == 0
    trusted = HttpClient(
        replace(BASE, allow_private=False),
        sleep=Sleeps(),
        trusted_hosts=[f"127.0.0.1:{server.port}"],
    )
    with trusted.session() as http:
        assert http.session.get(server.url + "ok/library-trusted").content == b"ok"
        for target in (f"http://localhost:{server.port}{path}", "file:///etc/passwd"):
            url = server.url + "redirect-to/lib?url=" + quote(target, safe="")
            with pytest.raises(BlockedAddressError):
                http.session.get(url)
    assert app.hits(path) == 0


def test_per_host_limit_is_shared_by_every_session(server: PeerServer, app: FaultApp) -> None:
    """Six sources (and a library call through one of them) on one host: two at a time."""
    path = unique("/slow/shared")
    client = client_for(per_host_concurrency=2, timeout=5.0)
    sessions = [client.session(source(f"s{i}", server.url)) for i in range(6)]
    url = server.url + path.lstrip("/") + "?delay=0.2"
    errors: list[BaseException] = []

    def work(http: HttpSession, library: bool) -> None:
        try:
            http.session.get(url).close() if library else http.get(url)
        except BaseException as err:
            errors.append(err)

    threads = [
        threading.Thread(target=work, args=(http, i % 2 == 0)) for i, http in enumerate(sessions)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    for http in sessions:
        http.close()
    assert errors == []
    assert app.hits(path) == 6
    assert app.peak(path) == 2


def test_client_close_releases_sessions(server: PeerServer) -> None:
    with client_for() as client:
        assert client.get(server.url + "ok/close").content == b"ok"
    assert client.get(server.url + "ok/reopen").content == b"ok"  # usable after close
    client.close()
