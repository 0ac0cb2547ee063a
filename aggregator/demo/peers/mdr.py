"""A strict local Metadata Replication Service (MDR): the SOAP service of the India Portal's
Metadata Replication Service specification 2.2, for the tests, the benchmark and the demo.

It implements ``schemas/mdr-service.wsdl`` (document/literal wrapped, namespace
``http://mdc.npi.gov.in``), serves it at ``?wsdl``, and answers every operation from pages
held in memory, each with the times it was published, modified and exited (the answers and
faults it writes: :mod:`aggregator.demo.peers.mdr_messages`). It enforces the
message-level security of section 2.3 strictly: every request must carry a WS-Security
UsernameToken with a PasswordDigest (``Base64(SHA-1(nonce + created + password))``) of a
known user, a ``Created`` no older than 300 s nor more than 60 s ahead of its clock, and a
nonce never seen before; anything else is a ``wsse:FailedAuthentication`` fault (HTTP 500).

Its states can be switched: ``service_up = False`` answers 503 to everything (the web
service is down); ``cms_up``/``db_up = False`` are reported by ``getStatus`` and make the
data operations answer ``ERR_CMS_DOWN`` (the database: a ``soapenv:Server`` fault).
``down_after_calls`` takes the service down after that many data calls (a service failing in
the middle of a replication window). Windows are ``[startTime, endTime)``.

Transient failures: :meth:`MdrService.fail_next` makes the next requests (of one operation,
or of any) fail *after* their token was accepted (its nonce is spent), as a busy gateway or
a dropped connection would: with 502, 503 (``Retry-After: 1``) or 504, with the connection
closed before any answer (``"drop"``), or with the answer cut off in the middle of its body
(``"cut"``). A client that resends such a request as it is gets the replay refusal.
``accepted`` lists (operation, nonce) of every request whose token was accepted.

``clock_skew`` sets the service's clock apart from ``clock`` (negative: it runs behind); the
service checks ``Created`` and stamps the changes made through :meth:`modify` and
:meth:`exit` (without an explicit time) by its own clock.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from lxml import etree

from aggregator.core.errors import AggregatorError
from aggregator.core.resources import bundled
from aggregator.core.xml import parse_xml
from aggregator.demo.peers.mdr_messages import (
    SOAP,
    TNS,
    WSSE,
    SoapFault,
    ack,
    add,
    all_vo,
    answer_envelope,
    el,
    error_vo,
    exited_vo,
    fault_envelope,
    set_vo,
    size_vo,
    wrap,
    xsd_bool,
)
from aggregator.demo.peers.mdr_pages import MdrPage, iso, parse_time
from aggregator.demo.peers.server import DropConnection, respond

WSU = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
DIGEST = (
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0"
    "#PasswordDigest"
)
MAX_AGE = timedelta(seconds=300)
MAX_AHEAD = timedelta(seconds=60)
DATA_OPERATIONS = (
    "getMetadataSize",
    "getAllMetadata",
    "getNewMetadata",
    "getUpdatedMetadata",
    "getExitedWebPages",
    "getWebpageMetadata",
    "notifyWebSiteAdmin",
)


#: how a request fails after its token was accepted (see :meth:`MdrService.fail_next`)
Fault = Literal[502, 503, 504, "drop", "cut"]


@dataclass(slots=True)
class Notification:
    event_id: str
    error_no: str
    source: str
    description: str
    user: str


class MdrService:
    """The WSGI app. ``users``: user id -> password; ``clock``: the service's time."""

    def __init__(
        self,
        users: Mapping[str, str],
        pages: Iterable[MdrPage] = (),
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock_skew: timedelta = timedelta(0),
        base_url: str = "",
    ) -> None:
        self.users = dict(users)
        self.clock = clock
        self.clock_skew = clock_skew
        self.base_url = base_url
        self.pages: dict[str, MdrPage] = {p.identifier: p for p in pages}
        self.service_up = True
        self.cms_up = True
        self.db_up = True
        self.down_after_calls: int | None = None
        self.calls: list[tuple[str, str, str]] = []  # (operation, startTime, endTime)
        self.notifications: list[Notification] = []
        self.refused: list[str] = []  # why each refused request was refused
        self.repl_time: datetime | None = None
        self.accepted: list[tuple[str, str]] = []  # (operation, nonce) of accepted tokens
        self._faults: dict[str | None, deque[Fault]] = {}  # operation (None: any) -> faults
        self._nonces: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self._wsdl = bundled("schemas", "mdr-service.wsdl").read_bytes()

    def now(self) -> datetime:
        """The service's time: ``clock`` plus ``clock_skew``."""
        return self.clock() + self.clock_skew

    def fail_next(self, *faults: Fault, operation: str | None = None) -> None:
        """Fail the next requests whose token is accepted (of ``operation`` only, if given),
        one fault each, in order."""
        with self._lock:
            self._faults.setdefault(operation, deque()).extend(faults)

    def _next_fault(self, operation: str) -> Fault | None:
        with self._lock:
            for key in (operation, None):
                queued = self._faults.get(key)
                if queued:
                    return queued.popleft()
        return None

    # -- the portal's content ----------------------------------------------------------
    def publish(self, page: MdrPage) -> None:
        with self._lock:
            self.pages[page.identifier] = page

    def modify(self, identifier: str, at: datetime | None = None, **changes: Any) -> None:
        """Change a page, stamped ``at`` (default: the service's now)."""
        at = self.now() if at is None else at
        with self._lock:
            page = self.pages[identifier]
            page.metadata.update(changes)
            page.metadata["dateModified"] = iso(at)
            page.modified = at

    def exit(self, identifier: str, at: datetime | None = None) -> None:
        at = self.now() if at is None else at
        with self._lock:
            self.pages[identifier].exited = at

    # -- WSGI ----------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if not self.service_up:
            return respond(start_response, 503, b"MDR service unavailable", "text/plain")
        if environ["REQUEST_METHOD"] == "GET":
            if environ.get("QUERY_STRING", "").lower() == "wsdl":
                location = self.base_url or _own_url(environ)
                body = self._wsdl.replace(
                    b"http://localhost/mdr/services/MdrService", location.encode()
                )
                return respond(start_response, 200, body, "text/xml; charset=utf-8")
            return respond(start_response, 405, b"POST SOAP requests here", "text/plain")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        data = environ["wsgi.input"].read(length)
        try:
            envelope = parse_xml(data)
            request = envelope.find(f"{{{SOAP}}}Body/*")
            operation = etree.QName(request).localname if request is not None else ""
            user = self._authenticate(envelope, operation)
            if request is None or etree.QName(request).namespace != TNS:
                raise SoapFault("soapenv:Client", "no operation of http://mdc.npi.gov.in")
            fault = self._next_fault(operation)
            if isinstance(fault, int):  # a gateway's answer: the service never ran
                retry_after = [("Retry-After", "1")] if fault == 503 else []
                return respond(start_response, fault, b"busy", "text/plain", retry_after)
            if fault == "drop":
                raise DropConnection("the MDR service dropped the connection")
            answer = self._operation(operation, request, user)
        except SoapFault as refused:
            return respond(start_response, 500, fault_envelope(refused), "text/xml; charset=utf-8")
        except AggregatorError as err:  # the request did not parse
            unreadable = SoapFault("soapenv:Client", err.message)
            return respond(
                start_response, 500, fault_envelope(unreadable), "text/xml; charset=utf-8"
            )
        if answer is None:  # went down during the call
            return respond(start_response, 503, b"MDR service unavailable", "text/plain")
        body = answer_envelope(answer)
        if fault == "cut":  # the length of the whole answer, half of it sent, then closed
            start_response(
                "200 OK",
                [("Content-Type", "text/xml; charset=utf-8"), ("Content-Length", str(len(body)))],
            )
            return [body[: len(body) // 2]]
        return respond(start_response, 200, body, "text/xml; charset=utf-8")

    # -- message-level security (section 2.3) ----------------------------------------------
    def _authenticate(self, envelope: etree._Element, operation: str) -> str:
        token = envelope.find(f"{{{SOAP}}}Header/{{{WSSE}}}Security/{{{WSSE}}}UsernameToken")
        if token is None:
            return self._refuse("no wsse:UsernameToken in the SOAP header")
        user = (token.findtext(f"{{{WSSE}}}Username") or "").strip()
        password = token.find(f"{{{WSSE}}}Password")
        nonce = (token.findtext(f"{{{WSSE}}}Nonce") or "").strip()
        created = (token.findtext(f"{{{WSU}}}Created") or "").strip()
        if password is None or password.get("Type") != DIGEST:
            return self._refuse("the password must be a PasswordDigest")
        if not nonce or not created:
            return self._refuse("a PasswordDigest needs a Nonce and a Created")
        if not created.endswith("Z"):
            return self._refuse(f"Created {created!r} is not a UTC time ending in Z")
        try:
            when = parse_time(created)
            raw_nonce = base64.b64decode(nonce, validate=True)
        except ValueError:
            return self._refuse("unreadable Created or Nonce")
        now = self.now()
        if now - when > MAX_AGE:
            return self._refuse(f"Created {created} is older than 300 s")
        if when - now > MAX_AHEAD:
            return self._refuse(f"Created {created} is more than 60 s in the future")
        secret = self.users.get(user)
        digest = base64.b64encode(
            hashlib.sha1(raw_nonce + created.encode() + (secret or "").encode()).digest()  # noqa: S324
        ).decode()
        if secret is None or (password.text or "").strip() != digest:
            return self._refuse(f"the digest does not match the password of {user!r}")
        with self._lock:
            for seen, at in list(self._nonces.items()):
                if now - at > MAX_AGE + MAX_AHEAD:
                    del self._nonces[seen]
            if nonce in self._nonces:
                return self._refuse("the nonce was used before (a replayed request)")
            self._nonces[nonce] = now
            self.accepted.append((operation, nonce))
        return user

    def _refuse(self, why: str) -> str:
        self.refused.append(why)
        raise SoapFault("wsse:FailedAuthentication", f"authentication failed: {why}")

    # -- operations ----------------------------------------------------------------------
    def _operation(self, name: str, request: etree._Element, user: str) -> etree._Element | None:
        if name == "getStatus":
            self.calls.append((name, "", ""))
            return self._status()
        if name not in DATA_OPERATIONS:
            raise SoapFault("soapenv:Client", f"unknown operation {name!r}")
        with self._lock:
            if self.down_after_calls is not None:
                if self.down_after_calls <= 0:
                    self.service_up = False
                    return None
                self.down_after_calls -= 1
        if not self.db_up:
            raise SoapFault("soapenv:Server", "the MDR service's database is unavailable")
        start, end = _window(request) if name not in _NO_WINDOW else (None, None)
        self.calls.append((name, iso(start) if start else "", iso(end) if end else ""))
        err = "ERR_NO_ERROR" if self.cms_up else "ERR_CMS_DOWN"
        if name == "notifyWebSiteAdmin":
            return self._notify(request, user, err)
        if name == "getWebpageMetadata":
            urls = [u.text or "" for u in request.findall(f"{{{TNS}}}webpageUrls")]
            if not self.cms_up:
                return set_vo("getWebpageMetadata", [], None, None, err, None)
            pages = [self.pages[u] for u in urls if u in self.pages and not self.pages[u].exited]
            return set_vo("getWebpageMetadata", pages, None, None, err, None)
        assert start is not None
        assert end is not None
        if end < start:
            return error_vo(name, "ERR_INV_ARG", "endTime is before startTime")
        if not self.cms_up:
            return error_vo(name, err, "the content management system is down")
        new, updated, exited = self._events(start, end)
        self.repl_time = end
        match name:
            case "getNewMetadata":
                return set_vo(name, new, start, end, err, end)
            case "getUpdatedMetadata":
                return set_vo(name, updated, start, end, err, end)
            case "getExitedWebPages":
                return exited_vo(name, exited, start, end, err, end)
            case "getAllMetadata":
                return all_vo(new, updated, exited, start, end, end)
            case _:
                return size_vo(new, updated, exited, start, end, end)

    def _events(
        self, start: datetime, end: datetime
    ) -> tuple[list[MdrPage], list[MdrPage], list[str]]:
        with self._lock:
            pages = sorted(self.pages.values(), key=lambda p: (p.published, p.identifier))
        new = [p for p in pages if start <= p.published < end]
        updated = [p for p in pages if p.modified is not None and start <= p.modified < end]
        exited = [p.identifier for p in pages if p.exited is not None and start <= p.exited < end]
        return new, updated, exited

    def _status(self) -> etree._Element:
        vo = el("getStatusReturn")
        add(vo, "CMSStatus", xsd_bool(self.cms_up))
        add(vo, "DBStatus", xsd_bool(self.db_up))
        add(vo, "MDRServiceStatus", xsd_bool(self.service_up))
        add(vo, "replTime", iso(self.repl_time) if self.repl_time else None)
        return wrap("getStatus", vo)

    def _notify(self, request: etree._Element, user: str, err: str) -> etree._Element:
        info = request.find(f"{{{TNS}}}notificationInfo")
        if info is None:
            return wrap("notifyWebSiteAdmin", ack(False, "ERR_INV_ARG", "no notificationInfo"))

        def text(name: str) -> str:
            return (info.findtext(f"{{{TNS}}}{name}") if info is not None else None) or ""

        self.notifications.append(
            Notification(text("event_id"), text("errorNo"), text("source"), text("eventDesc"), user)
        )
        return wrap("notifyWebSiteAdmin", ack(True, err, ""))


_NO_WINDOW = ("getWebpageMetadata", "notifyWebSiteAdmin")


def _own_url(environ: dict[str, Any]) -> str:
    host = environ.get("HTTP_HOST") or f"{environ['SERVER_NAME']}:{environ['SERVER_PORT']}"
    return f"http://{host}{environ.get('PATH_INFO', '/')}"


def _window(request: etree._Element) -> tuple[datetime, datetime]:
    try:
        start = parse_time(request.findtext(f"{{{TNS}}}startTime") or "")
        end = parse_time(request.findtext(f"{{{TNS}}}endTime") or "")
    except ValueError:
        raise SoapFault("soapenv:Client", "startTime and endTime must be xsd:dateTime") from None
    return start, end
