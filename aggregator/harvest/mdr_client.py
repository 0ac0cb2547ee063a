"""The client of a Metadata Replication Service (MDR): zeep over the source's session.

zeep reads our WSDL (``schemas/mdr-service.wsdl``, never fetched from the service), builds
each request and signs it with a WS-Security UsernameToken whose password is a
PasswordDigest over a fresh nonce and ``Created`` (UTC, ``Z``) per request
(:class:`DigestToken`); it posts through the source's :class:`~aggregator.http.HttpSession`
(guard, timeouts, size cap, retries). The small answers (getStatus, getMetadataSize,
notifyWebSiteAdmin) are read as zeep objects; the page sets are taken raw
(``raw_response``) and read with the hardened parser, so that each page's
``WebPageMetadataVO`` element is kept byte for byte as the record's payload.

The password is a :class:`~aggregator.config.Secret`, revealed only to build the digest; no
error message of this module contains it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests
import zeep
import zeep.exceptions
from lxml import etree
from zeep.wsse.username import UsernameToken

from aggregator.config import Secret
from aggregator.errors import HarvestError, TransportError
from aggregator.http import HttpSession
from aggregator.resources import bundled
from aggregator.xml import parse_xml

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
        self.url = url
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
        self.seconds = 0.0  # time spent waiting for data answers
        self.received = 0  # bytes of data answers

    # -- small answers, read by zeep ---------------------------------------------------
    def _call(self, operation: str, *args: Any) -> Any:
        try:
            return getattr(self.service, operation)(*args)
        except zeep.exceptions.Fault as fault:
            raise MdrFault(operation, str(fault.code or "fault"), fault.message) from None
        except zeep.exceptions.TransportError as err:
            raise TransportError(
                f"MDR {operation}: HTTP {err.status_code} from {self.url}",
                url=self.url,
                status=err.status_code,
            ) from None
        except zeep.exceptions.Error as err:
            raise HarvestError(f"MDR {operation}: {err.message}", code="mdrAnswer") from None
        except TransportError:
            raise
        except requests.RequestException as err:
            raise _unreachable(operation, self.url, err) from None

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
        began = time.monotonic()
        with self.client.settings(raw_response=True):
            try:
                response = getattr(self.service, operation)(*args)
            except TransportError:
                raise
            except requests.RequestException as err:
                raise _unreachable(operation, self.url, err) from None
        body = response.content
        self.seconds += time.monotonic() - began
        self.received += len(body)
        status = response.status_code
        if status != 200 and not (status == 500 and b"Fault" in body):
            raise TransportError(
                f"MDR {operation}: HTTP {status} from {self.url}", url=self.url, status=status
            )
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


def _unreachable(operation: str, url: str, err: requests.RequestException) -> TransportError:
    inner = err.args[0] if err.args else err
    reason = getattr(inner, "reason", inner)
    return TransportError(f"MDR {operation}: cannot reach {url}: {reason}", url=url)
