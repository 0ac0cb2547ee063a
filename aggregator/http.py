"""The one HTTP client layer every harvester uses.

- timeouts (connect and read) on every request, and optionally a total deadline per body;
- retries with exponential backoff and jitter on 429, 5xx, connection errors and bodies cut
  off mid-read, honouring ``Retry-After`` (seconds or HTTP date), every delay capped by
  ``max_backoff``; never on other 4xx;
- a response size cap (``Content-Length`` checked first, then the *decoded* bytes counted
  while streaming, so a gzip bomb stops at the cap);
- redirects followed by hand, at most ``max_redirects``, each hop checked by the SSRF guard;
  only 303 turns a POST into a GET; credentials are dropped when a redirect leaves the host;
- a per-host concurrency limit shared by every job using the same client;
- an SSRF guard refusing non-http(s) schemes and hosts that resolve to non-public addresses
  (private, loopback, link-local, multicast, reserved, unspecified, CGNAT; IPv4-mapped, 6to4
  and NAT64 IPv6 forms are unwrapped first) unless ``allow_private`` is set (tests, demo).
  The check is repeated when the socket is opened, and the socket connects to the very
  address that was checked, so DNS rebinding between check and connect does not get through.

Every failure is an :class:`~aggregator.errors.TransportError` (or one of its subclasses);
no ``requests``/``urllib3`` exception escapes. See ``docs/http-and-input-safety.md``.
"""

from __future__ import annotations

import email.utils
import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from types import TracebackType
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
import requests.adapters
import urllib3.exceptions

from aggregator.config import HttpSettings
from aggregator.errors import (
    ResponseTooLargeError,
    TooManyRedirectsError,
    TransportError,
)
from aggregator.http_guard import DEFAULT_PORTS, AddressGuard, GuardedAdapter

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
CHUNK = 64 * 1024
# Headers that must not follow a redirect to another host (requests' rule, applied by hand).
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


@dataclass(frozen=True, slots=True)
class Response:
    url: str  # final URL after redirects
    status: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def media_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def excerpt(self) -> str:
        """The start of the body, for error messages."""
        return self.content[:300].decode("utf-8", errors="replace")

    def status_error(self, what: str) -> TransportError:
        """The error for an HTTP error status: ``what`` (the request or the peer) returned it."""
        return TransportError(
            f"{what} returned HTTP {self.status}: {self.excerpt}", url=self.url, status=self.status
        )

    @property
    def charset(self) -> str | None:
        """The ``charset`` parameter of Content-Type, if any (not checked against codecs)."""
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.partition("=")
            if key.strip().lower() == "charset":
                value = value.strip().strip("\"'").strip()
                if value:
                    return value
        return None

    @property
    def text(self) -> str:
        """The body decoded: declared charset, else a BOM, else UTF-8; never raises.

        An unknown charset name falls back to UTF-8; undecodable bytes become U+FFFD.
        """
        charset = self.charset
        if charset is not None:
            try:
                return self.content.decode(charset, errors="replace")
            except LookupError:
                log.info("unknown charset %r from %s; decoding as UTF-8", charset, self.url)
        if self.content.startswith((b"\xff\xfe", b"\xfe\xff")):
            return self.content.decode("utf-16", errors="replace")
        return self.content.decode("utf-8-sig", errors="replace")


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" dates: RFC 5322 says UTC
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


# -- the SSRF guard ------------------------------------------------------------------------
def _origin(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return (parts.hostname or "", parts.port or DEFAULT_PORTS.get(parts.scheme, 0))


def _keeps_credentials(old: str, new: str) -> bool:
    """Same host and port, or the same host upgraded from http:80 to https:443."""
    if _origin(old) == _origin(new):
        return urlsplit(old).scheme == urlsplit(new).scheme or urlsplit(new).scheme == "https"
    old_parts, new_parts = urlsplit(old), urlsplit(new)
    return (
        old_parts.hostname == new_parts.hostname
        and old_parts.scheme == "http"
        and new_parts.scheme == "https"
        and old_parts.port in (None, 80)
        and new_parts.port in (None, 443)
    )


def _transient(err: requests.RequestException) -> bool:
    """Connection-level failures worth another attempt (not TLS or malformed requests)."""
    if isinstance(err, requests.exceptions.SSLError):
        return False
    return isinstance(
        err,
        requests.ConnectionError | requests.Timeout | requests.exceptions.ChunkedEncodingError,
    )


class HttpClient:
    """Shared by every job in a process; thread-safe.

    ``sleep`` and ``rng`` are injectable so that tests can record the retry delays.
    ``trusted_hosts`` (``host:port``) are exempt from the SSRF address rule. ``total_timeout``
    (seconds, off by default) bounds the time spent reading one body, which the per-read
    ``timeout`` does not: a server trickling a byte every few seconds never trips it.
    """

    def __init__(
        self,
        settings: HttpSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        trusted_hosts: Collection[str] = (),
        total_timeout: float | None = None,
    ) -> None:
        self.settings = settings
        self.total_timeout = total_timeout
        self._guard = AddressGuard(
            allow_private=settings.allow_private,
            trusted_hosts=frozenset(h.lower() for h in trusted_hosts),
        )
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._host_locks: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    # -- plumbing ---------------------------------------------------------------------------
    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.trust_env = False  # no proxies or netrc from the environment
            session.headers["User-Agent"] = self.settings.user_agent
            if not self._guard.allow_private:
                adapter = GuardedAdapter(self._guard)
                session.mount("http://", adapter)
                session.mount("https://", adapter)
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def close(self) -> None:
        """Close every thread's connection pool (the client stays usable: pools reopen)."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        self._local = threading.local()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _host_slot(self, url: str) -> threading.BoundedSemaphore:
        host = urlsplit(url).netloc.lower()
        with self._lock:
            sem = self._host_locks.get(host)
            if sem is None:
                sem = threading.BoundedSemaphore(self.settings.per_host_concurrency)
                self._host_locks[host] = sem
            return sem

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        s = self.settings
        if retry_after is not None:
            return min(retry_after, s.max_backoff)
        base = min(s.max_backoff, s.backoff * (2.0 ** min(attempt, 64)))
        return base * self._rng.uniform(0.5, 1.0)

    @contextmanager
    def _open(
        self, method: str, url: str, *, read_body: bool, **kwargs: Any
    ) -> Iterator[tuple[requests.Response, bytes]]:
        """Send with retries and guarded redirects; yield the final response (and its body).

        With ``read_body`` the body is read here, so that a body cut off mid-read is retried
        like any other connection error; without it the response is still streaming.
        The host slot is held until the caller leaves the ``with`` block; the connection is
        closed (never leaked to the pool half-read) on every path.
        """
        s = self.settings
        attempt = 0
        hops = 0
        current = url
        while True:
            self._guard.check_url(current)
            slot = self._host_slot(current)
            slot.acquire()
            resp: requests.Response | None = None
            delay = 0.0
            try:
                try:
                    resp = self._session().request(
                        method,
                        current,
                        timeout=(s.connect_timeout, s.timeout),
                        allow_redirects=False,
                        stream=True,
                        **kwargs,
                    )
                except requests.RequestException as err:
                    if attempt >= s.retries or not _transient(err):
                        raise TransportError(
                            f"{method} {current} failed after {attempt + 1} attempt(s): {err}",
                            url=current,
                        ) from err
                    delay = self._delay(attempt, None)
                    log.info("retrying %s in %.1fs after %s", current, delay, type(err).__name__)
                else:
                    if resp.status_code in REDIRECT_STATUSES and "location" in resp.headers:
                        hops += 1
                        if hops > s.max_redirects:
                            raise TooManyRedirectsError(
                                f"more than {s.max_redirects} redirects from {url}", url=current
                            )
                        target = self._follow(current, resp.headers["location"])
                        kwargs = self._redirected_kwargs(resp.status_code, current, target, kwargs)
                        if resp.status_code == 303 and method != "HEAD":
                            method = "GET"
                        current = target
                        continue
                    if resp.status_code in RETRY_STATUSES and attempt < s.retries:
                        retry_after = parse_retry_after(resp.headers.get("retry-after"))
                        delay = self._delay(attempt, retry_after)
                        log.info(
                            "retrying %s in %.1fs after HTTP %s", current, delay, resp.status_code
                        )
                    else:
                        body = b""
                        failed = False
                        if read_body:
                            try:
                                body = self._read(resp)
                            except TransportError as err:
                                if attempt >= s.retries or not _retryable_read(err):
                                    raise
                                failed = True
                                delay = self._delay(attempt, None)
                                log.info("retrying %s in %.1fs after %s", current, delay, err)
                        if not failed:
                            yield resp, body
                            return
            finally:
                if resp is not None:
                    resp.close()
                slot.release()
            attempt += 1
            self._sleep(delay)

    @staticmethod
    def _follow(current: str, location: str) -> str:
        try:
            return urljoin(current, location.strip())
        except ValueError as err:
            raise TransportError(
                f"{current} redirects to an invalid URL {location!r}", url=current
            ) from err

    @staticmethod
    def _redirected_kwargs(
        status: int, current: str, target: str, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        kwargs = dict(kwargs)
        kwargs.pop("params", None)  # already part of the URL that was redirected
        headers = dict(kwargs.get("headers") or {})
        if status == 303:
            kwargs.pop("data", None)
            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        if not _keeps_credentials(current, target):
            headers = {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS}
        kwargs["headers"] = headers
        return kwargs

    def _check_declared(self, resp: requests.Response) -> None:
        cap = self.settings.max_bytes
        declared = resp.headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > cap:
            raise ResponseTooLargeError(
                f"{resp.url} declares {declared} bytes, over the cap of {cap}", url=resp.url
            )

    def _chunks(self, resp: requests.Response) -> Iterator[bytes]:
        """The decoded body in chunks; cap, deadline and wrapping of every read error."""
        cap = self.settings.max_bytes
        deadline = None if self.total_timeout is None else time.monotonic() + self.total_timeout
        size = 0
        try:
            while True:
                # read1: whatever one socket read gives (a slow trickle does not block here
                # until CHUNK bytes have arrived), decoded, at most CHUNK bytes at a time
                chunk = resp.raw.read1(CHUNK, decode_content=True)
                if not chunk:
                    return
                size += len(chunk)
                if size > cap:
                    raise ResponseTooLargeError(
                        f"{resp.url} sent more than the cap of {cap} bytes", url=resp.url
                    )
                if deadline is not None and time.monotonic() > deadline:
                    raise TransportError(
                        f"reading {resp.url} took longer than {self.total_timeout}s", url=resp.url
                    )
                yield chunk
        except (
            requests.RequestException,
            urllib3.exceptions.HTTPError,
            OSError,
            ValueError,  # e.g. http.client rejecting a malformed chunk size
        ) as err:
            raise TransportError(f"reading {resp.url} failed: {err}", url=resp.url) from err
        except Exception as err:  # http.client.HTTPException and friends
            if isinstance(err, TransportError):
                raise
            raise TransportError(f"reading {resp.url} failed: {err}", url=resp.url) from err

    def _read(self, resp: requests.Response) -> bytes:
        self._check_declared(resp)
        return b"".join(self._chunks(resp))

    # -- public API -------------------------------------------------------------------------
    def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        data: Mapping[str, str] | bytes | None = None,
        headers: Mapping[str, str] | None = None,
        raise_for_status: bool = True,
    ) -> Response:
        """Send a request; return the whole body (size-capped). Raises TransportError."""
        kwargs: dict[str, Any] = {"params": params, "headers": dict(headers or {})}
        if data is not None:
            kwargs["data"] = data
        try:
            with self._open(method, url, read_body=True, **kwargs) as (resp, body):
                result = Response(
                    url=resp.url,
                    status=resp.status_code,
                    headers={k.lower(): v for k, v in resp.headers.items()},
                    content=body,
                )
        except requests.RequestException as err:
            raise TransportError(f"{method} {url} failed: {err}", url=url) from err
        if raise_for_status and result.status >= 400:
            raise result.status_error(f"{method} {result.url}")
        return result

    def get(
        self,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        raise_for_status: bool = True,
    ) -> Response:
        return self.request(
            "GET", url, params=params, headers=headers, raise_for_status=raise_for_status
        )

    def post(
        self,
        url: str,
        *,
        data: Mapping[str, str] | bytes | None = None,
        headers: Mapping[str, str] | None = None,
        raise_for_status: bool = True,
    ) -> Response:
        return self.request(
            "POST", url, data=data, headers=headers, raise_for_status=raise_for_status
        )

    @contextmanager
    def stream(
        self, url: str, *, headers: Mapping[str, str] | None = None
    ) -> Iterator[tuple[Response, Iterator[bytes]]]:
        """GET for large bodies: yields (response without content, chunk iterator).

        The size cap applies to the chunks as they are read (a declared Content-Length over
        the cap is refused before any chunk). Consume the chunks inside the ``with`` block;
        a body cut off mid-read raises TransportError and is not retried.
        """
        with self._open("GET", url, read_body=False, headers=dict(headers or {})) as (resp, _):
            head = Response(
                url=resp.url,
                status=resp.status_code,
                headers={k.lower(): v for k, v in resp.headers.items()},
                content=b"",
            )
            if head.status >= 400:
                raise TransportError(
                    f"GET {head.url} returned HTTP {head.status}", url=head.url, status=head.status
                )
            self._check_declared(resp)
            yield head, self._chunks(resp)


def _retryable_read(err: TransportError) -> bool:
    """A body read failure caused by the connection (not by the cap or a corrupt encoding)."""
    cause = err.__cause__
    if type(err) is not TransportError or cause is None:  # cap, deadline: final
        return False
    return not isinstance(cause, urllib3.exceptions.DecodeError | ValueError)
