"""Link checks for the MQA accessibility indicators: is each access/download URL reachable?

Off by default and outside the harvest's hot path: nothing calls it unless the operator asks
(``aggregator quality --check-links``, say). :meth:`ReachabilityChecker.check` takes URLs
(:func:`aggregator.validate.quality.mqa.link_urls` lists a record's) and returns URL ->
:class:`ReachabilityResult`, the map :func:`aggregator.validate.quality.mqa.assess` reads.

Per URL:

1. a cached result younger than the TTL is returned as it is (:class:`ReachabilityCache`: in
   memory, optionally persisted in a SQLite file across runs);
2. non-http(s) URLs are not requested (``unsupported-scheme``);
3. ``HEAD``; a status below 400 is *reachable*;
4. a HEAD answered with 400 or more (servers that refuse HEAD answer 405, 501, 403 ...), or
   declaring a body over the size cap, falls back to ``GET`` with ``Range: bytes=0-1023``:
   one chunk is read and the connection closed. A GET whose status is below 400 is
   reachable, and so is one whose declared body is over the size cap (the client checks the
   status before the size, so the server did answer below 400): ``too-large``, reachable.
   Timeouts, connection errors, blocked addresses and redirect loops are final (no GET).

Every request goes through :class:`aggregator.net.client.HttpClient` built from the operator's
:class:`~aggregator.config.HttpSettings`: the SSRF guard (also on every redirect hop), the
timeouts, the size cap and the retries on 429/5xx apply. Requests to one host are spaced by
at least ``min_interval`` seconds (:class:`HostRateLimiter`; redirect hops inside the client
are not spaced). A bounded thread pool (``max_workers``) checks several hosts at once.
"""

from __future__ import annotations

import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

import requests
import urllib3.exceptions

from aggregator.config import HttpSettings
from aggregator.core.errors import (
    BlockedAddressError,
    ResponseTooLargeError,
    TooManyRedirectsError,
    TransportError,
)
from aggregator.net.client import HttpClient

__all__ = [
    "HostRateLimiter",
    "Outcome",
    "ReachabilityCache",
    "ReachabilityChecker",
    "ReachabilityResult",
]

log = logging.getLogger(__name__)


class Outcome(StrEnum):
    OK = "ok"  # HTTP status below 400
    TOO_LARGE = "too-large"  # GET below 400 declaring a body over the size cap (reachable)
    HTTP_ERROR = "http-error"  # HTTP status 400 or more (``status`` says which)
    TIMEOUT = "timeout"
    CONNECTION_ERROR = "connection-error"  # refused, reset, DNS failure, TLS failure
    BLOCKED = "blocked-address"  # the SSRF guard refused the address (or a redirect's)
    TOO_MANY_REDIRECTS = "too-many-redirects"
    UNSUPPORTED_SCHEME = "unsupported-scheme"  # ftp:, mailto:, ... never requested
    INVALID_URL = "invalid-url"
    ERROR = "error"  # anything else (logged)


REACHABLE = frozenset({Outcome.OK, Outcome.TOO_LARGE})


@dataclass(frozen=True, slots=True)
class ReachabilityResult:
    url: str
    outcome: Outcome
    status: int | None  # the HTTP status that decided, when there was one
    method: str  # "HEAD" or "GET" (the request that decided); "" when none was sent
    checked_at: float  # seconds since the epoch (the checker's clock)
    final_url: str | None = None  # after redirects
    detail: str = ""

    @property
    def reachable(self) -> bool:
        return self.outcome in REACHABLE


# --- rate limiting ------------------------------------------------------------------------------


def _host(url: str) -> str:
    try:
        return urlsplit(url).netloc.lower()
    except ValueError:
        return ""


class HostRateLimiter:
    """At least ``min_interval`` seconds between the starts of two requests to one host.

    Each caller reserves the next free slot of its host under a lock, then sleeps until it
    (outside the lock), so threads waiting for different hosts do not block each other.
    ``clock`` and ``sleep`` are injectable for tests.
    """

    def __init__(
        self,
        min_interval: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.min_interval = max(0.0, min_interval)
        self._clock = clock
        self._sleep = sleep
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait(self, url: str) -> float:
        """Block until a request to ``url``'s host may start; returns the seconds waited."""
        host = _host(url)
        with self._lock:
            now = self._clock()
            slot = max(now, self._next.get(host, now))
            self._next[host] = slot + self.min_interval
            if len(self._next) > 10_000:  # forget hosts whose next slot has passed
                self._next = {h: t for h, t in self._next.items() if t > now}
        delay = slot - now
        if delay > 0:
            self._sleep(delay)
        return delay


# --- the cache ----------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reachability (
    url TEXT PRIMARY KEY,
    outcome TEXT NOT NULL,
    status INTEGER,
    method TEXT NOT NULL,
    checked_at REAL NOT NULL,
    final_url TEXT,
    detail TEXT NOT NULL
)
"""


class ReachabilityCache:
    """Results by URL, valid for ``ttl`` seconds (``failure_ttl`` for unreachable ones).

    In memory; with ``path``, also in a SQLite file so that results survive between runs
    (entries are read on demand and written as they come). ``clock`` (seconds since the
    epoch) must be the one the checker stamps results with. Thread-safe.
    """

    def __init__(
        self,
        ttl: float = 7 * 86_400,
        *,
        failure_ttl: float | None = None,
        path: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ttl = ttl
        self.failure_ttl = ttl if failure_ttl is None else failure_ttl
        self._clock = clock
        self._memory: dict[str, ReachabilityResult] = {}
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)

    def _fresh(self, result: ReachabilityResult) -> bool:
        ttl = self.ttl if result.reachable else self.failure_ttl
        return self._clock() - result.checked_at < ttl

    def get(self, url: str) -> ReachabilityResult | None:
        with self._lock:
            result = self._memory.get(url)
            if result is None and self._db is not None:
                row = self._db.execute(
                    "SELECT outcome, status, method, checked_at, final_url, detail"
                    " FROM reachability WHERE url = ?",
                    (url,),
                ).fetchone()
                if row is not None:
                    try:
                        outcome = Outcome(row[0])
                    except ValueError:
                        return None  # written by a later version: check again
                    result = ReachabilityResult(
                        url, outcome, row[1], row[2], row[3], row[4], row[5]
                    )
                    self._memory[url] = result
        if result is None or not self._fresh(result):
            return None
        return result

    def put(self, result: ReachabilityResult) -> None:
        with self._lock:
            self._memory[result.url] = result
            if self._db is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO reachability"
                    " (url, outcome, status, method, checked_at, final_url, detail)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        result.url,
                        result.outcome.value,
                        result.status,
                        result.method,
                        result.checked_at,
                        result.final_url,
                        result.detail,
                    ),
                )

    def purge(self) -> int:
        """Drop expired entries (memory and file); returns how many were dropped from memory."""
        with self._lock:
            stale = [u for u, r in self._memory.items() if not self._fresh(r)]
            for url in stale:
                del self._memory[url]
            if self._db is not None:
                oldest = self._clock() - max(self.ttl, self.failure_ttl)
                self._db.execute("DELETE FROM reachability WHERE checked_at <= ?", (oldest,))
        return len(stale)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


# --- the checker --------------------------------------------------------------------------------

_TIMEOUTS = (urllib3.exceptions.TimeoutError, TimeoutError, socket.timeout)
_CONNECTION = (requests.ConnectionError, urllib3.exceptions.HTTPError, OSError)


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def classify(err: TransportError) -> Outcome:
    """The outcome of a failed request, from the exception types (never from the message)."""
    if isinstance(err, BlockedAddressError):
        return Outcome.BLOCKED
    if isinstance(err, TooManyRedirectsError):
        return Outcome.TOO_MANY_REDIRECTS
    if isinstance(err, ResponseTooLargeError):
        return Outcome.TOO_LARGE
    if err.status is not None:
        return Outcome.HTTP_ERROR
    causes = list(_chain(err))[1:]
    if any(isinstance(c, BlockedAddressError) for c in causes):
        return Outcome.BLOCKED  # refused while connecting (the guard inside the socket layer)
    for cause in causes:  # outermost first: requests' own types are the most precise
        if isinstance(cause, requests.Timeout):  # before ConnectionError (ConnectTimeout is both)
            return Outcome.TIMEOUT
        if isinstance(cause, requests.ConnectionError | urllib3.exceptions.NewConnectionError):
            return Outcome.CONNECTION_ERROR  # NewConnectionError subclasses ConnectTimeoutError
        if isinstance(cause, _TIMEOUTS):
            return Outcome.TIMEOUT
    if any(isinstance(c, _CONNECTION) for c in causes):
        return Outcome.CONNECTION_ERROR
    if any(isinstance(c, ValueError) for c in causes):
        return Outcome.INVALID_URL
    return Outcome.ERROR


class ReachabilityChecker:
    """Checks URLs through one :class:`HttpClient`; see the module docstring.

    ``retries`` overrides the operator's retry count for link checks (None keeps it);
    ``clock`` stamps results (seconds since the epoch) and should be the cache's clock.
    """

    def __init__(
        self,
        settings: HttpSettings,
        *,
        cache: ReachabilityCache | None = None,
        limiter: HostRateLimiter | None = None,
        min_interval: float = 1.0,
        max_workers: int = 4,
        range_bytes: int = 1024,
        retries: int | None = None,
        clock: Callable[[], float] = time.time,
        trusted_hosts: Collection[str] = (),
        client: HttpClient | None = None,
    ) -> None:
        if retries is not None:
            settings = replace(settings, retries=retries)
        self._client = client or HttpClient(settings, trusted_hosts=trusted_hosts)
        self._owns_client = client is None
        self.cache = cache if cache is not None else ReachabilityCache(clock=clock)
        self.limiter = limiter or HostRateLimiter(min_interval)
        self.max_workers = max(1, max_workers)
        self.range_bytes = max(1, range_bytes)
        self._clock = clock

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> ReachabilityChecker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- one URL --------------------------------------------------------------------------------
    def _result(
        self,
        url: str,
        outcome: Outcome,
        status: int | None = None,
        method: str = "",
        final_url: str | None = None,
        detail: str = "",
    ) -> ReachabilityResult:
        return ReachabilityResult(url, outcome, status, method, self._clock(), final_url, detail)

    def _failure(self, url: str, method: str, err: TransportError) -> ReachabilityResult:
        return self._result(url, classify(err), err.status, method, err.url, err.message)

    def _get(self, url: str) -> ReachabilityResult:
        self.limiter.wait(url)
        headers = {"Range": f"bytes=0-{self.range_bytes - 1}"}
        try:
            with self._client.stream(url, headers=headers) as (head, chunks):
                next(chunks, b"")  # the first bytes arrive; the rest is never read
        except ResponseTooLargeError as err:
            # stream() checks the status before the declared size: the answer was below 400
            return self._result(url, Outcome.TOO_LARGE, None, "GET", err.url, err.message)
        except TransportError as err:
            return self._failure(url, "GET", err)
        return self._result(url, Outcome.OK, head.status, "GET", head.url)

    def _fetch(self, url: str) -> ReachabilityResult:
        try:
            scheme = urlsplit(url).scheme.lower()
        except ValueError as err:
            return self._result(url, Outcome.INVALID_URL, detail=str(err))
        if scheme not in ("http", "https"):
            return self._result(url, Outcome.UNSUPPORTED_SCHEME, detail=f"scheme {scheme!r}")
        self.limiter.wait(url)
        try:
            resp = self._client.request("HEAD", url, raise_for_status=False)
        except ResponseTooLargeError:
            return self._get(url)  # HEAD declared a big body: ask for a few bytes instead
        except TransportError as err:
            return self._failure(url, "HEAD", err)
        if resp.status < 400:
            return self._result(url, Outcome.OK, resp.status, "HEAD", resp.url)
        return self._get(url)  # the GET's answer decides (HEAD is often refused or wrong)

    def check_one(self, url: str) -> ReachabilityResult:
        """The result for one URL, from the cache when fresh; never raises for the URL."""
        cached = self.cache.get(url)
        if cached is not None:
            return cached
        try:
            result = self._fetch(url)
        except Exception as err:  # one bad URL must not stop the others
            log.warning("link check of %s failed unexpectedly", url, exc_info=True)
            result = self._result(url, Outcome.ERROR, detail=f"{type(err).__name__}: {err}")
        self.cache.put(result)
        return result

    # -- many URLs ------------------------------------------------------------------------------
    def check(self, urls: Iterable[str]) -> dict[str, ReachabilityResult]:
        """URL -> result for every distinct URL; several hosts at once with a thread pool.

        URLs are interleaved host by host, so that workers do not all queue behind the rate
        limit of one host.
        """
        by_host: dict[str, list[str]] = {}
        for url in dict.fromkeys(urls):
            by_host.setdefault(_host(url), []).append(url)
        order: list[str] = []
        queues = list(by_host.values())
        for i in range(max((len(q) for q in queues), default=0)):
            order.extend(q[i] for q in queues if i < len(q))
        if self.max_workers == 1 or len(order) <= 1:
            return {url: self.check_one(url) for url in order}
        with ThreadPoolExecutor(
            max_workers=min(self.max_workers, len(order)), thread_name_prefix="linkcheck"
        ) as pool:
            return dict(zip(order, pool.map(self.check_one, order), strict=True))
