"""The one HTTP client layer every harvester uses.

- timeouts (connect and read) on every request;
- retries with exponential backoff and full jitter on 429, 5xx and connection errors,
  honouring ``Retry-After`` (seconds or HTTP date), every delay capped by ``max_backoff``;
- a response size cap (``Content-Length`` checked first, then counted while streaming);
- redirects followed by hand, at most ``max_redirects``, each hop checked by the SSRF guard;
- a per-host concurrency limit shared by every job using the same client;
- an SSRF guard refusing non-http(s) schemes and hosts that resolve to private, loopback,
  link-local, multicast or reserved addresses, unless ``allow_private`` is set (tests, demo).
"""

from __future__ import annotations

import email.utils
import ipaddress
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
import urllib3.exceptions

from aggregator.config import HttpSettings
from aggregator.errors import (
    BlockedAddressError,
    ResponseTooLargeError,
    TooManyRedirectsError,
    TransportError,
)

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
CHUNK = 64 * 1024


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
    def text(self) -> str:
        charset = "utf-8"
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip('"')
        return self.content.decode(charset, errors="replace")


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def check_address(url: str, allow_private: bool) -> None:
    """The SSRF guard: raise BlockedAddressError for URLs we must not fetch."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise BlockedAddressError(f"scheme {parts.scheme!r} is not allowed", url=url)
    host = parts.hostname
    if not host:
        raise BlockedAddressError("URL has no host", url=url)
    if allow_private:
        return
    try:
        infos = socket.getaddrinfo(host, parts.port or 80, proto=socket.IPPROTO_TCP)
    except socket.gaierror as err:
        raise TransportError(f"cannot resolve {host}: {err}", url=url) from err
    for info in infos:
        addr = ipaddress.ip_address(info[4][0])
        if (
            addr.is_private
            or addr.is_loopback
            or addr.is_link_local
            or addr.is_multicast
            or addr.is_reserved
            or addr.is_unspecified
        ):
            raise BlockedAddressError(
                f"{host} resolves to {addr}, a non-public address (SSRF guard)", url=url
            )


class HttpClient:
    """Shared by every job in a process; thread-safe."""

    def __init__(
        self,
        settings: HttpSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._local = threading.local()
        self._host_locks: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    # -- plumbing ---------------------------------------------------------------------------
    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.trust_env = False  # no proxies or netrc from the environment
            session.headers["User-Agent"] = self.settings.user_agent
            self._local.session = session
        return session

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
        return min(s.max_backoff, s.backoff * (2**attempt)) * self._rng.uniform(0.5, 1.0)

    @contextmanager
    def _open(
        self, method: str, url: str, **kwargs: Any
    ) -> Iterator[requests.Response]:
        """Send with retries and guarded redirects; yield the final streaming response."""
        s = self.settings
        attempt = 0
        hops = 0
        current = url
        while True:
            check_address(current, s.allow_private)
            slot = self._host_slot(current)
            slot.acquire()
            resp: requests.Response | None = None
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
                    if attempt >= s.retries:
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
                        current = urljoin(current, resp.headers["location"])
                        if resp.status_code == 303:
                            method, kwargs = "GET", {k: v for k, v in kwargs.items() if k != "data"}
                        continue
                    if resp.status_code in RETRY_STATUSES and attempt < s.retries:
                        delay = self._delay(attempt, parse_retry_after(resp.headers.get("retry-after")))
                        log.info("retrying %s in %.1fs after HTTP %s", current, delay, resp.status_code)
                    else:
                        yield resp
                        return
            finally:
                if resp is not None:
                    resp.close()
                slot.release()
            attempt += 1
            self._sleep(delay)

    def _read(self, resp: requests.Response) -> bytes:
        cap = self.settings.max_bytes
        declared = resp.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise ResponseTooLargeError(
                f"{resp.url} declares {declared} bytes, over the cap of {cap}", url=resp.url
            )
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in resp.raw.stream(CHUNK, decode_content=True):
                size += len(chunk)
                if size > cap:
                    raise ResponseTooLargeError(
                        f"{resp.url} sent more than the cap of {cap} bytes", url=resp.url
                    )
                chunks.append(chunk)
        except requests.RequestException as err:
            raise TransportError(f"reading {resp.url} failed: {err}", url=resp.url) from err
        except (OSError, urllib3.exceptions.HTTPError) as err:
            raise TransportError(f"reading {resp.url} failed: {err}", url=resp.url) from err
        return b"".join(chunks)

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
            with self._open(method, url, **kwargs) as resp:
                body = self._read(resp)
                result = Response(
                    url=resp.url,
                    status=resp.status_code,
                    headers={k.lower(): v for k, v in resp.headers.items()},
                    content=body,
                )
        except requests.RequestException as err:
            raise TransportError(f"{method} {url} failed: {err}", url=url) from err
        if raise_for_status and result.status >= 400:
            excerpt = result.content[:300].decode("utf-8", errors="replace")
            raise TransportError(
                f"{method} {result.url} returned HTTP {result.status}: {excerpt}",
                url=result.url,
                status=result.status,
            )
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

        The size cap applies to the chunks as they are read.
        """
        with self._open("GET", url, headers=dict(headers or {})) as resp:
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
            cap = self.settings.max_bytes

            def chunks() -> Iterator[bytes]:
                size = 0
                try:
                    for chunk in resp.raw.stream(CHUNK, decode_content=True):
                        size += len(chunk)
                        if size > cap:
                            raise ResponseTooLargeError(
                                f"{head.url} sent more than the cap of {cap} bytes", url=head.url
                            )
                        yield chunk
                except (requests.RequestException, OSError, urllib3.exceptions.HTTPError) as err:
                    raise TransportError(f"reading {head.url} failed: {err}", url=head.url) from err

            yield head, chunks()
