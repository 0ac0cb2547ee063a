"""The ``requests.Session`` every source gets, with the safety rules in the session itself.

A library that takes a session (zeep's ``Transport(session=...)``, OWSLib) and calls
``session.get``/``session.post`` directly gets the same rules as
:class:`aggregator.net.client.HttpClient`:

- :class:`SafeAdapter` (mounted for http and https): the SSRF guard at connect time (from
  :class:`~aggregator.net.guard.GuardedAdapter`), default connect/read timeouts, the per-host
  concurrency slot (held until the body is read or the response closed), a size cap on the
  declared ``Content-Length`` and on the decoded bytes read, and retries through
  :class:`urllib3.util.Retry` (:class:`PoliteRetry`);
- :class:`SourceSession`: the guard's URL check before every request and redirect hop, no
  proxies or netrc from the environment, only 303 turning a POST into a GET, and the source's
  credential headers dropped (with ``Authorization``) when a redirect leaves the host.

Errors a library sees are requests' own (``requests.ConnectionError`` ...) or our
:class:`~aggregator.core.errors.TransportError` subclasses (blocked address, body over the cap);
``HttpClient`` turns all of them into ``TransportError``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from requests.models import PreparedRequest
from urllib3.util.retry import Retry

from aggregator.config import HttpSettings
from aggregator.core.errors import ResponseTooLargeError, TransportError
from aggregator.net.guard import AddressGuard, GuardedAdapter

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class PoliteRetry(Retry):
    """urllib3's Retry with our rules: any method, 429/5xx and connection errors, never other
    4xx; ``Retry-After`` honoured but capped by ``backoff_max`` (urllib3 alone would wait up
    to ``retry_after_max``, six hours by default); every wait goes through ``sleeper``."""

    #: a Retry-After on a status outside the forcelist (413) must not start a retry
    RETRY_AFTER_STATUS_CODES = frozenset({429, 503})

    sleeper: Callable[[float], None] = staticmethod(time.sleep)

    @classmethod
    def from_settings(
        cls, settings: HttpSettings, sleeper: Callable[[float], None] = time.sleep
    ) -> PoliteRetry:
        retry = cls(
            total=settings.retries,
            other=0,  # TLS and proxy failures: final
            allowed_methods=None,  # every method, POST included (as the hand-written loop)
            status_forcelist=RETRY_STATUSES,
            backoff_factor=settings.backoff,
            backoff_jitter=settings.backoff,
            backoff_max=settings.max_backoff,
            raise_on_status=False,  # the last response is returned: its status and body
        )
        retry.sleeper = sleeper
        return retry

    def new(self, **kw: Any) -> PoliteRetry:
        retry = super().new(**kw)
        retry.sleeper = self.sleeper
        return retry

    def get_retry_after(self, response: urllib3.BaseHTTPResponse) -> float | None:
        try:
            seconds = super().get_retry_after(response)
        except urllib3.exceptions.InvalidHeader:
            return None  # an unreadable Retry-After: the backoff applies
        return None if seconds is None else min(seconds, self.backoff_max)

    def sleep(self, response: urllib3.BaseHTTPResponse | None = None) -> None:
        delay = self.get_retry_after(response) if response is not None else None
        self.sleeper(self.get_backoff_time() if delay is None else delay)


class HostSlots:
    """At most ``limit`` requests in flight per host, shared by every session of a client."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def acquire(self, url: str) -> Callable[[], None]:
        """Wait for a slot of ``url``'s host; return the (idempotent) release."""
        host = urlsplit(url).netloc.lower()
        with self._lock:
            slot = self._slots.get(host)
            if slot is None:
                slot = self._slots[host] = threading.BoundedSemaphore(self.limit)
        slot.acquire()
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                slot.release()

        return release


class CappedBody:
    """A response body (urllib3's) that counts the decoded bytes read and stops at the cap,
    stops at the deadline, and releases the host slot at its end, on close or on error.

    It stands in for ``requests.Response.raw``; what it does not define is urllib3's.
    """

    def __init__(
        self,
        raw: urllib3.BaseHTTPResponse,
        url: str,
        cap: int,
        total_timeout: float | None,
        release: Callable[[], None],
    ) -> None:
        self._raw = raw
        self._url = url
        self._cap = cap
        self._total_timeout = total_timeout
        self._deadline = None if total_timeout is None else time.monotonic() + total_timeout
        self._release = release
        self._size = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def _count(self, chunk: bytes) -> bytes:
        self._size += len(chunk)
        if self._size > self._cap:
            self.close()
            raise ResponseTooLargeError(
                f"{self._url} sent more than the cap of {self._cap} bytes", url=self._url
            )
        if self._deadline is not None and time.monotonic() > self._deadline:
            self.close()
            raise TransportError(
                f"reading {self._url} took longer than {self._total_timeout}s", url=self._url
            )
        if not chunk:
            self._release()
        return chunk

    def _guarded(self, read: Callable[[], bytes]) -> bytes:
        try:
            return self._count(read())
        except BaseException:
            self._release()
            raise

    def read(self, amt: int | None = None, decode_content: bool | None = None) -> bytes:
        return self._guarded(lambda: self._raw.read(amt, decode_content=decode_content))

    def read1(self, amt: int | None = None, decode_content: bool | None = None) -> bytes:
        return self._guarded(lambda: self._raw.read1(amt, decode_content=decode_content))

    def stream(
        self, amt: int | None = 2**16, decode_content: bool | None = None
    ) -> Iterator[bytes]:
        try:
            for chunk in self._raw.stream(amt, decode_content=decode_content):
                yield self._count(chunk)
        finally:
            self._release()

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            self._release()

    def release_conn(self) -> None:
        try:
            self._raw.release_conn()
        finally:
            self._release()


class SafeAdapter(GuardedAdapter):
    """The transport adapter of every session: guard, timeouts, slots, cap, retries."""

    def __init__(
        self,
        guard: AddressGuard,
        settings: HttpSettings,
        slots: HostSlots,
        retry: PoliteRetry,
        total_timeout: float | None = None,
    ) -> None:
        self.settings = settings
        self.slots = slots
        self.total_timeout = total_timeout
        super().__init__(guard)
        self.max_retries = retry

    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        s = self.settings
        release = self.slots.acquire(request.url or "")
        try:
            response = super().send(
                request,
                stream=stream,
                timeout=(s.connect_timeout, s.timeout) if timeout is None else timeout,
                verify=verify,
                cert=cert,
                proxies=proxies,
            )
            declared = response.headers.get("content-length", "").strip()
            if declared.isdigit() and int(declared) > s.max_bytes:
                response.close()
                raise ResponseTooLargeError(
                    f"{response.url} declares {declared} bytes, over the cap of {s.max_bytes}",
                    url=response.url,
                )
        except BaseException:
            release()
            raise
        response.raw = CappedBody(
            response.raw, response.url, s.max_bytes, self.total_timeout, release
        )
        return response


class SourceSession(requests.Session):
    """One source's session: its own cookies, default headers and credential headers."""

    def __init__(self, guard: AddressGuard, credential_headers: Collection[str] = ()) -> None:
        super().__init__()
        self.trust_env = False  # no proxies or netrc from the environment
        self.guard = guard
        self.credential_headers = frozenset(h.lower() for h in credential_headers)

    def send(self, request: PreparedRequest, **kwargs: Any) -> requests.Response:
        # every hop of a redirect comes through here: scheme and address checked up front
        # (the adapter checks the address again when it connects)
        self.guard.check_url(request.url or "")
        return super().send(request, **kwargs)

    def rebuild_method(
        self, prepared_request: PreparedRequest, response: requests.Response
    ) -> None:
        """Only 303 turns a request into a GET (requests, like browsers, also turns POST
        into GET on 301 and 302)."""
        if response.status_code == 303 and prepared_request.method != "HEAD":
            prepared_request.method = "GET"

    def rebuild_auth(self, prepared_request: PreparedRequest, response: requests.Response) -> None:
        # Authorization, when leaving the host (types-requests leaves these two untyped)
        super().rebuild_auth(prepared_request, response)  # type: ignore[no-untyped-call]
        original = response.request
        leaving = self.should_strip_auth(  # type: ignore[no-untyped-call]
            original.url or "", prepared_request.url or ""
        )
        if self.credential_headers and leaving:
            for name in list(prepared_request.headers):
                if name.lower() in self.credential_headers:
                    del prepared_request.headers[name]
        # requests drops the body of a 301/302 redirect (it has made the request a GET);
        # the request kept its method here, so it keeps its body too
        if (
            response.status_code in (301, 302)
            and prepared_request.method == original.method
            and original.body is not None
            and prepared_request.body is None
        ):
            prepared_request.body = original.body
            for name in ("Content-Type", "Content-Length"):
                if name in original.headers:
                    prepared_request.headers[name] = original.headers[name]
