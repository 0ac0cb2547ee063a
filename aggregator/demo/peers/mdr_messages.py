"""The answers of the local MDR service (:mod:`aggregator.demo.peers.mdr`): the value objects
of ``schemas/mdr-service.wsdl`` (document/literal wrapped, namespace ``http://mdc.npi.gov.in``)
as the service sends them, in a SOAP envelope, and the SOAP faults it refuses requests with.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from lxml import etree

from aggregator.core.errors import AggregatorError
from aggregator.demo.peers.mdr_pages import MdrPage, iso

TNS = "http://mdc.npi.gov.in"
SOAP = "http://schemas.xmlsoap.org/soap/envelope/"
WSSE = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
NSMAP: Any = {None: TNS}  # the default namespace (lxml-stubs want str keys)
METADATA_FIELDS = (
    "creatorDeptName",
    "creatorOrgName",
    "creatorEmail",
    "coverageSpatial",
    "coverageTemporal",
    "coverageJurisdiction",
    "description",
    "dateCreated",
    "datePublished",
    "dateModified",
    "format",
    "language",
    "publisherOrgName",
    "publisherDeptName",
    "publisherEmail",
    "publisherAddress",
    "publisherPhone",
    "relation",
    "source",
    "title",
    "titleAlternate",
    "subjectKeywords",
    "subjectClasification",
    "type",
)


class SoapFault(AggregatorError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.fault_code = code


def el(name: str) -> etree._Element:
    return etree.Element(f"{{{TNS}}}{name}", nsmap=NSMAP)


def add(parent: etree._Element, name: str, value: str | None) -> None:
    if value is None:
        return
    child = etree.SubElement(parent, f"{{{TNS}}}{name}")
    child.text = value


def xsd_bool(value: bool) -> str:
    return "true" if value else "false"


def wrap(operation: str, vo: etree._Element) -> etree._Element:
    response = el(f"{operation}Response")
    vo.tag = f"{{{TNS}}}{operation}Return"
    response.append(vo)
    return response


def _times(vo: etree._Element, start: datetime | None, end: datetime | None, repl: Any) -> None:
    add(vo, "startTime", iso(start) if start else None)
    add(vo, "endTime", iso(end) if end else None)
    add(vo, "replTime", iso(repl) if repl else None)


def page_element(page: MdrPage, tag: str = "webPegMetadataVOList") -> etree._Element:
    """A WebPageMetadataVO element of a page (as the service sends it)."""
    vo = etree.Element(f"{{{TNS}}}{tag}", nsmap=NSMAP)
    add(vo, "identifier", page.identifier)
    add(vo, "state", "exited" if page.exited else "published")
    if page.service_errors:
        err = etree.SubElement(vo, f"{{{TNS}}}mdValidationErrVO")
        add(err, "errDescription", f"invalid value of {page.service_errors[0]}")
        for attribute in page.service_errors:
            add(err, "errAttributes", attribute)
        add(err, "metadataValidationErrVOSize", "0")
        add(err, "noOfErrorAttributes", str(len(page.service_errors)))
    md = etree.SubElement(vo, f"{{{TNS}}}metadata")
    for name in METADATA_FIELDS:
        value = page.metadata.get(name)
        if isinstance(value, list | tuple):
            for item in value:
                add(md, name, str(item))
        elif value is not None:
            add(md, name, str(value))
    return vo


def set_vo(
    operation: str,
    pages: Sequence[MdrPage],
    start: datetime | None,
    end: datetime | None,
    err: str,
    repl: datetime | None,
    tag: str = "",
) -> etree._Element:
    vo = el(tag or "set")
    size = 0
    for page in pages:
        element = page_element(page)
        size += len(etree.tostring(element))
        vo.append(element)
    add(vo, "sizeInBytes", str(size))
    add(vo, "noErrWebPages", str(sum(1 for p in pages if p.service_errors)))
    add(vo, "errCode", err)
    add(vo, "errDescr", "" if err == "ERR_NO_ERROR" else "the CMS is down")
    _times(vo, start, end, repl)
    return vo if tag else wrap(operation, vo)


def exited_vo(
    operation: str,
    exited: Sequence[str],
    start: datetime,
    end: datetime,
    err: str,
    repl: datetime | None,
    tag: str = "",
) -> etree._Element:
    vo = el(tag or "set")
    for url in exited:
        add(vo, "exitedWebpagesList", url)
    add(vo, "sizeInBytes", str(sum(len(u) for u in exited)))
    add(vo, "errCode", err)
    add(vo, "errDescr", "")
    _times(vo, start, end, repl)
    return vo if tag else wrap(operation, vo)


def all_vo(
    new: Sequence[MdrPage],
    updated: Sequence[MdrPage],
    exited: Sequence[str],
    start: datetime,
    end: datetime,
    repl: datetime,
) -> etree._Element:
    vo = el("all")
    parts = [
        set_vo("", new, start, end, "ERR_NO_ERROR", repl, "newlyCreatedPagesVO"),
        set_vo("", updated, start, end, "ERR_NO_ERROR", repl, "modifiedPagesVO"),
        exited_vo("", exited, start, end, "ERR_NO_ERROR", repl, "exitedPagesVO"),
    ]
    total = sum(int(p.findtext(f"{{{TNS}}}sizeInBytes") or 0) for p in parts)
    add(vo, "totalByteSize", str(total))
    for part in parts:
        vo.append(part)
    add(vo, "errCode", "ERR_NO_ERROR")
    add(vo, "errDescr", "")
    _times(vo, start, end, repl)
    return wrap("getAllMetadata", vo)


def size_vo(
    new: Sequence[MdrPage],
    updated: Sequence[MdrPage],
    exited: Sequence[str],
    start: datetime,
    end: datetime,
    repl: datetime,
) -> etree._Element:
    def size(pages: Sequence[MdrPage]) -> int:
        return sum(len(etree.tostring(page_element(p))) for p in pages)

    sizes = (size(new), size(updated), sum(len(u) for u in exited))
    vo = el("size")
    for name, value in (
        ("noOfNewWebPages", len(new)),
        ("noOfModifiedWebPages", len(updated)),
        ("noOfExitedWebPages", len(exited)),
        ("totalNoOfAllWebPages", len(new) + len(updated) + len(exited)),
        ("newMetadataSize", sizes[0]),
        ("modifiedMetadataSize", sizes[1]),
        ("exitedPagesSize", sizes[2]),
        ("totalSizeOfAllMetadata", sum(sizes)),
    ):
        add(vo, name, str(value))
    add(vo, "errCode", "ERR_NO_ERROR")
    add(vo, "errDescr", "")
    _times(vo, start, end, repl)
    return wrap("getMetadataSize", vo)


def error_vo(operation: str, code: str, description: str) -> etree._Element:
    vo = el("error")
    if operation == "getAllMetadata":
        add(vo, "totalByteSize", "0")
    elif operation == "getMetadataSize":
        for name in (
            "noOfNewWebPages",
            "noOfModifiedWebPages",
            "noOfExitedWebPages",
            "totalNoOfAllWebPages",
            "newMetadataSize",
            "modifiedMetadataSize",
            "exitedPagesSize",
            "totalSizeOfAllMetadata",
        ):
            add(vo, name, "0")
    else:
        add(vo, "sizeInBytes", "0")
        if operation != "getExitedWebPages":
            add(vo, "noErrWebPages", "0")
    add(vo, "errCode", code)
    add(vo, "errDescr", description)
    return wrap(operation, vo)


def ack(ok: bool, code: str, description: str) -> etree._Element:
    vo = el("ack")
    add(vo, "ackSts", xsd_bool(ok))
    add(vo, "errCode", code)
    add(vo, "errDesc", description)
    return vo


def answer_envelope(answer: etree._Element) -> bytes:
    env = etree.Element(f"{{{SOAP}}}Envelope", nsmap={"soapenv": SOAP})
    etree.SubElement(env, f"{{{SOAP}}}Body").append(answer)
    return etree.tostring(env, xml_declaration=True, encoding="utf-8")


def fault_envelope(fault: SoapFault) -> bytes:
    env = etree.Element(f"{{{SOAP}}}Envelope", nsmap={"soapenv": SOAP, "wsse": WSSE})
    body = etree.SubElement(env, f"{{{SOAP}}}Body")
    node = etree.SubElement(body, f"{{{SOAP}}}Fault")
    etree.SubElement(node, "faultcode").text = fault.fault_code
    etree.SubElement(node, "faultstring").text = fault.message
    return etree.tostring(env, xml_declaration=True, encoding="utf-8")
