"""The one HTTP client layer every harvester uses: :class:`HttpClient` (one per process)
hands out an :class:`HttpSession` per source; both send with :meth:`~HttpSession.request`.

The rules live in the session's adapter (:mod:`aggregator.net.session`), so a library given
``HttpSession.session`` (zeep, OWSLib) gets them too:

- timeouts (connect and read) on every request, and optionally a total deadline per body;
- retries through :class:`urllib3.util.Retry` on 429, 500, 502, 503, 504 and connection
  errors, for every method (POST included), with exponential backoff and jitter, honouring
  ``Retry-After`` (seconds or HTTP date), every delay capped by ``max_backoff``; never on
  other 4xx. A body cut off mid-read (which Retry no longer sees: requests hands the
  response over before reading it) is retried here, with the same Retry. A session opened
  with ``transport_retries=False`` resends nothing, for requests signed for one use (a
  nonce): its caller retries whole calls, signed afresh, with :attr:`HttpSession.retry`;
- a response size cap (``Content-Length`` checked first, then the *decoded* bytes counted
  while reading, so a gzip bomb stops at the cap);
- redirects followed by requests' session, at most ``max_redirects``, each hop checked by the
  SSRF guard; only 303 turns a POST into a GET; ``Authorization``, cookies and the source's
  credential headers are not sent to another host;
- a per-host concurrency limit shared by every session of the client, so by every job;
- cookies, default headers and credentials per source: never shared between sources;
- an SSRF guard refusing non-http(s) schemes and hosts that resolve to non-public addresses
  (private, loopback, link-local, multicast, reserved, unspecified, CGNAT; IPv4-mapped, 6to4
  and NAT64 IPv6 forms are unwrapped first) unless ``allow_private`` is set (tests, demo).
  The check is repeated when the socket is opened, and the socket connects to the very
  address that was checked, so DNS rebinding between check and connect does not get through.

Every failure is an :class:`~aggregator.core.errors.TransportError` (or one of its subclasses);
no ``requests``/``urllib3`` exception escapes. See ``docs/http-and-input-safety.md``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType
from typing import Any

import requests
import urllib3.exceptions

from aggregator.config import HttpSettings, SourceConfig
from aggregator.core.errors import TooManyRedirectsError, TransportError
from aggregator.net.guard import AddressGuard
from aggregator.net.session import HostSlots, PoliteRetry, SafeAdapter, SourceSession
from aggregator.net.words import EXCERPT_BYTES, body_excerpt, in_words

log = logging.getLogger(__name__)

CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Response:
    url: str  # final URL after redirects
    status: int
    headers: Mapping[str, str]
    content: bytes
    reason: str = ""  # the status line's reason phrase ("Internal Server Error")

    @property
    def media_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def excerpt(self) -> str:
        """The start of the body as text, for error messages (an HTML page's text, not its
        markup; about 200 characters)."""
        return body_excerpt(self.content, charset=self.charset)

    def status_error(self, what: str) -> TransportError:
        """The error for an HTTP error status: ``what`` (the request or the peer) returned
        it; the status, its reason and the start of the page's text."""
        return status_error(what, self.url, self.status, self.reason, self.content, self.charset)

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


def source_headers(source: SourceConfig) -> tuple[dict[str, str], frozenset[str]]:
    """A source's default headers, secrets revealed, and the names of those that are
    credentials (their value comes from a secret: never sent to another host)."""
    values = {
        name: value if isinstance(value, str) else value.reveal()
        for name, value in source.headers.items()
    }
    credentials = frozenset(n for n, v in source.headers.items() if not isinstance(v, str))
    return values, credentials


class HttpSession:
    """One source's HTTP session: its own cookies, default headers and credentials.

    ``session`` is the ``requests.Session`` itself, for libraries that take one (zeep's
    ``Transport(session=...)``, OWSLib): guard, timeouts, retries, slots and the size cap are
    in its adapter, so they hold for its ``get``/``post`` too. Used by one job (its listing
    thread and the page it fetches ahead); closed when the job ends.
    """

    def __init__(
        self,
        client: HttpClient,
        headers: Mapping[str, str] | None = None,
        credential_headers: Collection[str] = (),
        retry_statuses: Collection[int] | None = None,
        transport_retries: bool = True,
    ) -> None:
        self.client = client
        self.settings = client.settings
        #: the client's retry rule, or one retrying only ``retry_statuses`` (a protocol whose
        #: error answers are final: SOAP sends its faults with 500)
        self.retry: PoliteRetry = (
            client.retry
            if retry_statuses is None
            else client.retry.new(status_forcelist=frozenset(retry_statuses))
        )
        #: whether the session itself resends a failed request (off: each request is sent
        #: once, and the caller retries whole calls with :attr:`retry`, for requests that are
        #: signed for one use, with a nonce and a timestamp: resent as they are, a strict
        #: service refuses them as replays)
        self.transport_retries = transport_retries
        self._resend: PoliteRetry = self.retry if transport_retries else self.retry.new(total=0)
        self.session = SourceSession(client.guard, credential_headers)
        self.session.max_redirects = self.settings.max_redirects
        self.session.headers["User-Agent"] = self.settings.user_agent
        self.session.headers.update(headers or {})
        adapter = SafeAdapter(
            client.guard, self.settings, client.slots, self._resend, client.total_timeout
        )
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> HttpSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------
    def _failure(self, method: str, url: str, err: Exception) -> TransportError:
        if isinstance(err, requests.TooManyRedirects):
            return TooManyRedirectsError(
                f"more than {self.settings.max_redirects} redirects from {url}", url=url
            )
        inner = err.args[0] if err.args else None
        if isinstance(inner, urllib3.exceptions.MaxRetryError):
            final = isinstance(inner.reason, urllib3.exceptions.SSLError)
            attempts = 1 if final or not self.transport_retries else self.settings.retries + 1
            return TransportError(
                f"{method} {url} failed after {attempts} attempt(s): {in_words(inner, url)}",
                url=url,
            )
        return TransportError(f"{method} {url} failed: {in_words(err, url)}", url=url)

    @contextmanager
    def _send(self, method: str, url: str, **kwargs: Any) -> Iterator[requests.Response]:
        """Send (retries, redirects and guard in the session); yield the streaming response.

        The host slot is held until the body is read or the response closed; the response
        is closed (never left half-read in the pool) on every path."""
        s = self.settings
        try:
            resp = self.session.request(
                method, url, stream=True, timeout=(s.connect_timeout, s.timeout), **kwargs
            )
        except TransportError:
            raise
        except (requests.RequestException, urllib3.exceptions.HTTPError, ValueError) as err:
            # after retries, the cause is urllib3's last reason (a read timeout, a refused
            # connection ...), not requests' wrapper, which calls a read timeout a
            # ConnectionError: callers classify failures by the cause's type
            inner = err.args[0] if err.args else None
            cause = inner.reason if isinstance(inner, urllib3.exceptions.MaxRetryError) else err
            raise self._failure(method, url, err) from cause
        try:
            yield resp
        finally:
            resp.close()

    @classmethod
    def _error_page(cls, resp: requests.Response) -> bytes:
        """The start of an error answer's body (for its excerpt); what cannot be read is
        left out."""
        page = b""
        try:
            for chunk in cls._chunks(resp):
                page += chunk
                if len(page) >= EXCERPT_BYTES:
                    break
        except TransportError:
            pass
        return page

    @staticmethod
    def _chunks(resp: requests.Response) -> Iterator[bytes]:
        """The decoded body in chunks (the adapter's body counts them against the cap and
        the deadline); every read error a TransportError."""
        try:
            while True:
                # read1: whatever one socket read gives (a slow trickle does not block here
                # until CHUNK bytes have arrived), decoded, at most CHUNK bytes at a time
                chunk = resp.raw.read1(CHUNK, decode_content=True)
                if not chunk:
                    return
                yield chunk
        except TransportError:
            raise
        except Exception as err:  # urllib3, OSError, http.client, ValueError (bad chunk size)
            raise TransportError(
                f"reading {resp.url} failed: {in_words(err, resp.url)}", url=resp.url
            ) from err

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
        retry = self._resend
        while True:
            with self._send(method, url, **kwargs) as resp:  # its failures were retried
                try:
                    content = b"".join(self._chunks(resp))
                except TransportError as err:
                    if type(err) is not TransportError or not isinstance(err.__cause__, _CUT_OFF):
                        raise  # the cap, the deadline, a corrupt encoding: final
                    cut, cause = err, err.__cause__
                else:
                    result = Response(
                        url=resp.url,
                        status=resp.status_code,
                        headers={k.lower(): v for k, v in resp.headers.items()},
                        content=content,
                        reason=_reason(resp),
                    )
                    break
            # the body was cut off mid-read: the response is closed, its host slot free
            try:
                retry = retry.increment(method, url, error=cause)
            except urllib3.exceptions.MaxRetryError:
                attempts = len(retry.history) + 1
                raise TransportError(
                    f"{method} {url} failed after {attempts} attempt(s): {cut.message}", url=url
                ) from cut
            log.info("retrying %s after %s", url, cut.message)
            retry.sleep()
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
        with self._send("GET", url, headers=dict(headers or {})) as resp:
            head = Response(
                url=resp.url,
                status=resp.status_code,
                headers={k.lower(): v for k, v in resp.headers.items()},
                content=b"",
                reason=_reason(resp),
            )
            if head.status >= 400:
                page = self._error_page(resp)
                raise status_error(
                    f"GET {head.url}", head.url, head.status, head.reason, page, head.charset
                )
            yield head, self._chunks(resp)


def status_error(
    what: str, url: str, status: int, reason: str, content: bytes, charset: str | None = None
) -> TransportError:
    """``what returned HTTP 500 Internal Server Error: <the page's text>``."""
    line = f"{status} {reason}".strip()
    text = body_excerpt(content, charset=charset, drop=line)
    return TransportError(
        f"{what} returned HTTP {line}{f': {text}' if text else ''}", url=url, status=status
    )


def _reason(resp: requests.Response) -> str:
    if resp.reason:
        return str(resp.reason)
    try:
        return HTTPStatus(resp.status_code).phrase
    except ValueError:
        return ""


# a body cut off mid-read: the connection dropped, or no byte within the read timeout
_CUT_OFF = (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError)


class HttpClient:
    """One per process: the settings, the SSRF guard, the per-host slots and the retry rule
    shared by every :class:`HttpSession` it hands out (:meth:`session`, one per source).

    Its own ``get``/``post``/``request``/``stream`` use a session of the calling thread with
    no source's headers (reachability checks, tests). ``sleep`` is injectable so that tests
    can record the retry delays. ``trusted_hosts`` (``host:port``) are exempt from the SSRF
    address rule. ``total_timeout`` (seconds, off by default) bounds the time spent reading
    one body, which the per-read ``timeout`` does not: a server trickling a byte every few
    seconds never trips it.
    """

    def __init__(
        self,
        settings: HttpSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        trusted_hosts: Collection[str] = (),
        total_timeout: float | None = None,
    ) -> None:
        self.settings = settings
        self.total_timeout = total_timeout
        self.guard = AddressGuard(
            allow_private=settings.allow_private,
            trusted_hosts=frozenset(h.lower() for h in trusted_hosts),
        )
        self.slots = HostSlots(settings.per_host_concurrency)
        self.retry = PoliteRetry.from_settings(settings, sleep)
        self._local = threading.local()
        self._sessions: list[HttpSession] = []
        self._lock = threading.Lock()

    def session(
        self,
        source: SourceConfig | None = None,
        *,
        retry_statuses: Collection[int] | None = None,
        transport_retries: bool = True,
    ) -> HttpSession:
        """A new session for one source (its headers and credentials), or an anonymous one.
        ``retry_statuses`` narrows the statuses retried (default: 429 and 5xx; see
        :attr:`aggregator.harvest.base.Harvester.retry_statuses`); ``transport_retries =
        False`` sends each request once, for a caller that retries whole calls itself (see
        :attr:`aggregator.harvest.base.Harvester.transport_retries`). The caller closes it."""
        if source is None:
            return HttpSession(
                self, retry_statuses=retry_statuses, transport_retries=transport_retries
            )
        headers, credentials = source_headers(source)
        return HttpSession(self, headers, credentials, retry_statuses, transport_retries)

    def _default(self) -> HttpSession:
        session: HttpSession | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = HttpSession(self)
            with self._lock:
                self._sessions.append(session)
        return session

    def close(self) -> None:
        """Close every thread's session (the client stays usable: sessions reopen)."""
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
        return self._default().request(
            method,
            url,
            params=params,
            data=data,
            headers=headers,
            raise_for_status=raise_for_status,
        )

    def get(
        self,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        raise_for_status: bool = True,
    ) -> Response:
        return self._default().get(
            url, params=params, headers=headers, raise_for_status=raise_for_status
        )

    def post(
        self,
        url: str,
        *,
        data: Mapping[str, str] | bytes | None = None,
        headers: Mapping[str, str] | None = None,
        raise_for_status: bool = True,
    ) -> Response:
        return self._default().post(
            url, data=data, headers=headers, raise_for_status=raise_for_status
        )

    @contextmanager
    def stream(
        self, url: str, *, headers: Mapping[str, str] | None = None
    ) -> Iterator[tuple[Response, Iterator[bytes]]]:
        with self._default().stream(url, headers=headers) as pair:
            yield pair
