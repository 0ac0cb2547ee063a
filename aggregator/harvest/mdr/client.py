"""The client of a Metadata Replication Service (MDR): zeep over the source's session.

zeep reads our WSDL (``schemas/mdr-service.wsdl``, never fetched from the service), builds
each request and signs it with a WS-Security UsernameToken whose password is a
PasswordDigest over a fresh nonce and ``Created`` (UTC, ``Z``) per request
(:class:`DigestToken`); it posts through the source's :class:`~aggregator.net.client.HttpSession`
(guard, timeouts, size cap). The small answers (getStatus, getMetadataSize,
notifyWebSiteAdmin) are read as zeep objects; the page sets are read with the hardened
parser, so that each page's ``WebPageMetadataVO`` element is kept byte for byte as the
record's payload.

Retries are whole calls, each signed afresh: the session must send each request once
(``transport_retries = False``, :meth:`MdrHarvester.open_session`), since an envelope resent
as it is carries a nonce the service has seen and is refused as a replay. After a 429, 502,
503 or 504, a dropped connection, a read timeout or an answer cut off mid-body, the client
calls the operation again (a new nonce and ``Created``), with the session's retry rule
(:attr:`HttpSession.retry <aggregator.net.client.HttpSession.retry>`: the ``[http]`` retries,
backoff and ``Retry-After`` cap an operator configures, computed by urllib3's ``Retry``).

The password is a :class:`~aggregator.config.Secret`, revealed only to build the digest; no
error message of this module contains it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests
import urllib3.exceptions
import zeep
import zeep.exceptions
from lxml import etree
from zeep.wsdl.bindings.soap import SoapBinding
from zeep.wsse.username import UsernameToken

from aggregator.config import Secret
from aggregator.core.errors import HarvestError, TransportError
from aggregator.core.resources import bundled
from aggregator.core.xml import parse_xml
from aggregator.net.client import HttpSession

log = logging.getLogger(__name__)

TNS = "http://mdc.npi.gov.in"
SOAP = "http://schemas.xmlsoap.org/soap/envelope/"
BINDING = f"{{{TNS}}}MdrServiceSoapBinding"
NO_ERROR = "ERR_NO_ERROR"


def wsdl_path() -> str:
    return str(bundled("schemas", "mdr-service.wsdl"))


class MdrFault(HarvestError):
    """The service answered with a SOAP fault (failed authentication, server error)."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        super().__init__(f"MDR {operation}: {code}: {message}", code="mdrFault")
        self.fault_code = code


class MdrServiceError(HarvestError):
    """The service answered, with an error code other than ERR_NO_ERROR (ERR_CMS_DOWN ...)."""

    def __init__(self, operation: str, err_code: str, description: str) -> None:
        detail = f": {description}" if description else ""
        super().__init__(f"MDR {operation}: {err_code}{detail}", code="mdrError")
        self.err_code = err_code


class DigestToken:
    """A zeep WS-Security plugin: a new UsernameToken (PasswordDigest, fresh nonce, Created
    from ``clock`` in UTC with ``Z``) for every request. ``nonce`` fixes the nonce (a test
    replaying a request); otherwise 16 random bytes each time."""

    def __init__(
        self,
        username: str,
        password: Secret,
        clock: Callable[[], datetime],
        nonce: str | None = None,
    ) -> None:
        self.username = username
        self.password = password
        self.clock = clock
        self.nonce = nonce

    def apply(self, envelope: Any, headers: Any) -> Any:
        token = UsernameToken(
            self.username,
            self.password.reveal(),
            use_digest=True,
            zulu_timestamp=True,
            created=self.clock().astimezone(UTC),
            nonce=self.nonce,
        )
        return token.apply(envelope, headers)

    def verify(self, envelope: Any) -> Any:
        return envelope

    def __repr__(self) -> str:
        return f"DigestToken(username={self.username!r}, password={self.password!r})"


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    service: bool
    cms: bool
    db: bool
    repl_time: datetime | None

    @property
    def healthy(self) -> bool:
        return self.service and self.cms and self.db


@dataclass(frozen=True, slots=True)
class MetadataSize:
    new: int
    modified: int
    exited: int
    total: int
    total_bytes: int


@dataclass(slots=True)
class PageSet:
    """Pages of one answer: their WebPageMetadataVO elements, and the exited URLs."""

    new: list[etree._Element]
    updated: list[etree._Element]
    exited: list[str]
    size_bytes: int  # what the answer's body weighed


class MdrClient:
    def __init__(
        self,
        url: str,
        http: HttpSession,
        username: str,
        password: Secret,
        *,
        clock: Callable[[], datetime] | None = None,
        nonce: str | None = None,
    ) -> None:
        if http.transport_retries:
            raise ValueError(
                "an MDR client needs a session that sends each request once"
                " (MdrHarvester.open_session): a resent envelope is a replay"
            )
        self.url = url
        self.retry = http.retry  # whole calls, each signed afresh
        self.clock = clock or (lambda: datetime.now(UTC))
        settings = zeep.Settings(strict=True, forbid_dtd=True, forbid_entities=True)
        transport = zeep.Transport(session=http.session, timeout=http.settings.timeout)
        self.client = zeep.Client(
            wsdl_path(),
            transport=transport,
            wsse=DigestToken(username, password, self.clock, nonce),
            settings=settings,
        )
        self.service = self.client.create_service(BINDING, url)
        binding = self.client.wsdl.bindings[BINDING]
        if not isinstance(binding, SoapBinding):
            raise TypeError(f"{BINDING} is not a SOAP binding in {wsdl_path()}")
        self.binding = binding
        self.seconds = 0.0  # time spent waiting for data answers
        self.received = 0  # bytes of data answers

    # -- one call: signed, sent, retried ---------------------------------------------------
    def _send(self, operation: str, *args: Any) -> tuple[requests.Response, float]:
        """Call ``operation``; return the answer of the last attempt (its body read) and the
        seconds that attempt took.

        Each attempt is a new call through zeep, so :class:`DigestToken` signs it with a new
        nonce and ``Created``; the session resends nothing itself. urllib3's ``Retry`` (the
        session's rule) decides which failures are retried and how long to wait."""
        retry = self.retry
        while True:
            began = time.monotonic()
            try:
                with self.client.settings(raw_response=True):
                    response: requests.Response = getattr(self.service, operation)(*args)
            except TransportError:
                raise  # the size cap, the deadline, a blocked address: final
            except zeep.exceptions.Error as err:  # the request could not be built
                raise HarvestError(f"MDR {operation}: {err.message}", code="mdrAnswer") from None
            except requests.RequestException as err:
                cause = _cause(err)
                try:
                    retry = retry.increment("POST", self.url, error=cause)
                except urllib3.exceptions.MaxRetryError:
                    attempts = len(retry.history) + 1
                    raise _unreachable(operation, self.url, err, attempts) from None
                log.info("MDR %s: %s; calling again, signed afresh", operation, cause)
                retry.sleep()
                continue
            status = response.status_code
            if retry.is_retry("POST", status, bool(response.headers.get("Retry-After"))):
                try:
                    retry = retry.increment("POST", self.url, response=response.raw)
                except urllib3.exceptions.MaxRetryError:
                    return response, time.monotonic() - began  # the caller reports it
                log.info("MDR %s: HTTP %s; calling again, signed afresh", operation, status)
                retry.sleep(response.raw)
                continue
            return response, time.monotonic() - began

    def _answered(self, operation: str, response: requests.Response) -> None:
        """Raise unless the answer is a 200, or a 500 holding a SOAP fault."""
        status = response.status_code
        if status != 200 and not (status == 500 and b"Fault" in response.content):
            raise TransportError(
                f"MDR {operation}: HTTP {status} from {self.url}", url=self.url, status=status
            )

    # -- small answers, read by zeep ---------------------------------------------------
    def _call(self, operation: str, *args: Any) -> Any:
        response, _ = self._send(operation, *args)
        self._answered(operation, response)
        try:
            return self.binding.process_reply(self.client, self.binding.get(operation), response)
        except zeep.exceptions.Fault as fault:
            raise MdrFault(operation, str(fault.code or "fault"), fault.message) from None
        except zeep.exceptions.Error as err:
            raise HarvestError(f"MDR {operation}: {err.message}", code="mdrAnswer") from None

    def status(self) -> ServiceStatus:
        vo = self._call("getStatus")
        return ServiceStatus(
            service=bool(vo.MDRServiceStatus),
            cms=bool(vo.CMSStatus),
            db=bool(vo.DBStatus),
            repl_time=vo.replTime,
        )

    def size(self, start: datetime, end: datetime) -> MetadataSize:
        vo = self._call("getMetadataSize", start, end)
        if (vo.errCode or NO_ERROR) != NO_ERROR:
            raise MdrServiceError("getMetadataSize", vo.errCode, vo.errDescr or "")
        return MetadataSize(
            new=vo.noOfNewWebPages,
            modified=vo.noOfModifiedWebPages,
            exited=vo.noOfExitedWebPages,
            total=vo.totalNoOfAllWebPages,
            total_bytes=vo.totalSizeOfAllMetadata,
        )

    def notify_admin(self, event_id: str, error_no: str, source: str, description: str) -> bool:
        """notifyWebSiteAdmin; True when the service acknowledged it."""
        info = self.client.get_type(f"{{{TNS}}}NotificationInfoVO")(
            eventDesc=description, errorNo=error_no, source=source, event_id=event_id
        )
        ack = self._call("notifyWebSiteAdmin", info)
        return bool(ack.ackSts)

    # -- page sets, read raw -------------------------------------------------------------
    def _raw(self, operation: str, *args: Any) -> etree._Element:
        response, seconds = self._send(operation, *args)
        body = response.content
        self.seconds += seconds
        self.received += len(body)
        self._answered(operation, response)
        root = parse_xml(body, url=self.url)
        fault = root.find(f"{{{SOAP}}}Body/{{{SOAP}}}Fault")
        if fault is not None:
            raise MdrFault(
                operation,
                (fault.findtext("faultcode") or "fault").strip(),
                (fault.findtext("faultstring") or "").strip(),
            )
        vo = root.find(f"{{{SOAP}}}Body/{{{TNS}}}{operation}Response/{{{TNS}}}{operation}Return")
        if vo is None:
            raise HarvestError(f"MDR {operation}: the answer has no {operation}Return")
        _check(operation, vo)
        return vo

    def new(self, start: datetime, end: datetime) -> PageSet:
        vo = self._raw("getNewMetadata", start, end)
        return PageSet(_pages(vo), [], [], self.received)

    def updated(self, start: datetime, end: datetime) -> PageSet:
        vo = self._raw("getUpdatedMetadata", start, end)
        return PageSet([], _pages(vo), [], self.received)

    def exited(self, start: datetime, end: datetime) -> PageSet:
        vo = self._raw("getExitedWebPages", start, end)
        return PageSet([], [], _exited(vo), self.received)

    def all(self, start: datetime, end: datetime) -> PageSet:
        vo = self._raw("getAllMetadata", start, end)
        parts = {}
        for name in ("newlyCreatedPagesVO", "modifiedPagesVO", "exitedPagesVO"):
            part = vo.find(f"{{{TNS}}}{name}")
            if part is not None:
                _check(f"getAllMetadata {name}", part)
            parts[name] = part
        new, mod, gone = (
            parts["newlyCreatedPagesVO"],
            parts["modifiedPagesVO"],
            parts["exitedPagesVO"],
        )
        return PageSet(
            _pages(new) if new is not None else [],
            _pages(mod) if mod is not None else [],
            _exited(gone) if gone is not None else [],
            self.received,
        )

    def pages(self, urls: list[str]) -> list[etree._Element]:
        """getWebpageMetadata: the current metadata of these pages (exited ones omitted)."""
        return _pages(self._raw("getWebpageMetadata", urls))


def _check(operation: str, vo: etree._Element) -> None:
    code = (vo.findtext(f"{{{TNS}}}errCode") or NO_ERROR).strip() or NO_ERROR
    if code != NO_ERROR:
        raise MdrServiceError(operation, code, (vo.findtext(f"{{{TNS}}}errDescr") or "").strip())


def _pages(vo: etree._Element) -> list[etree._Element]:
    return vo.findall(f"{{{TNS}}}webPegMetadataVOList")


def _exited(vo: etree._Element) -> list[str]:
    return [
        (e.text or "").strip()
        for e in vo.findall(f"{{{TNS}}}exitedWebpagesList")
        if (e.text or "").strip()
    ]


def _cause(err: requests.RequestException) -> Exception:
    """urllib3's error under requests' wrapper (which calls a read timeout a ConnectionError
    and a cut-off body a ChunkedEncodingError): what ``Retry`` classifies."""
    inner = err.args[0] if err.args else None
    if isinstance(inner, urllib3.exceptions.MaxRetryError) and inner.reason is not None:
        return inner.reason
    return inner if isinstance(inner, urllib3.exceptions.HTTPError) else err


def _unreachable(
    operation: str, url: str, err: requests.RequestException, attempts: int
) -> TransportError:
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    return TransportError(f"MDR {operation}: cannot reach {url}{tried}: {_cause(err)}", url=url)
