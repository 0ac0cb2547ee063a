"""A small OGC CSW 2.0.2 client over :class:`~aggregator.net.client.HttpSession` and lxml.

Three operations, each in both bindings (HTTP GET with KVP parameters, HTTP POST with an XML
request body): ``GetCapabilities`` (read into :class:`Capabilities`), ``GetRecords`` and
``GetRecordById``. Every response is parsed by the hardened parser (:mod:`aggregator.core.xml`)
and checked for an ``ows:ExceptionReport``, which is an error whatever the HTTP status (many
servers send it with 200). The client knows no paging policy: the harvester
(:mod:`aggregator.harvest.csw`) drives the pages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from lxml import etree

from aggregator.core.errors import AggregatorError, HarvestError
from aggregator.core.xml import parse_xml
from aggregator.net.client import HttpSession, Response

CSW = "http://www.opengis.net/cat/csw/2.0.2"
OWS = "http://www.opengis.net/ows"
OWS11 = "http://www.opengis.net/ows/1.1"
OGC = "http://www.opengis.net/ogc"
DC = "http://purl.org/dc/elements/1.1/"
XLINK = "http://www.w3.org/1999/xlink"
GMD = "http://www.isotc211.org/2005/gmd"
#: the ISO 19139 output schema URI of the CSW ISO application profile
ISO_SCHEMA = "http://www.isotc211.org/2005/gmd"
#: the one the UK DMS collection interface names (and some servers advertise)
ISO_SCHEMA_DMS = "http://www.isotc211.org/schemas/2005/gmd/"
ISO_SCHEMAS = (ISO_SCHEMA, ISO_SCHEMA_DMS)
#: the record types the data.europa.eu harvester asks for (the ``Type`` queryable)
DEFAULT_TYPES = ("dataset", "datasetcollection", "series", "service")


def is_iso_schema(uri: str) -> bool:
    """Either ISO output schema URI, with or without the trailing slash."""
    return uri.strip().rstrip("/") in {s.rstrip("/") for s in ISO_SCHEMAS}


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    get: bool
    post: bool


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What GetCapabilities said that the harvester uses (kept in the checkpoint)."""

    title: str = ""
    operations: dict[str, Operation] = field(default_factory=dict)
    max_record_default: int | None = None
    #: the queryable name to filter on the metadata date ("apiso:Modified", "Modified"), if any
    modified_queryable: str | None = None
    #: the queryable name of the record type ("apiso:Type"; "Type" when none is advertised)
    type_queryable: str = "Type"
    output_schemas: tuple[str, ...] = ()  # of GetRecords / GetRecordById
    version: str = ""  # the Capabilities document's version attribute ("2.0.2")

    def supports(self, operation: str, binding: str) -> bool:
        op = self.operations.get(operation)
        if op is None:
            return not self.operations  # nothing advertised: assume the standard
        return op.post if binding == "post" else op.get

    def iso_schema(self) -> str:
        """The ISO output schema URI to ask for: the one advertised (the ISO application
        profile's first), else the profile's."""
        for schema in self.output_schemas:
            if schema.rstrip("/") == ISO_SCHEMA:
                return schema
        for schema in self.output_schemas:
            if is_iso_schema(schema):
                return schema
        return ISO_SCHEMA

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Capabilities:
        ops = {k: Operation(**v) for k, v in data.get("operations", {}).items()}
        return cls(
            title=str(data.get("title", "")),
            operations=ops,
            max_record_default=data.get("max_record_default"),
            modified_queryable=data.get("modified_queryable"),
            type_queryable=str(data.get("type_queryable") or "Type"),
            output_schemas=tuple(data.get("output_schemas", ())),
            version=str(data.get("version", "")),
        )


def _local(tag: Any) -> str:
    return etree.QName(tag).localname if isinstance(tag, str) else ""


def _values(element: etree._Element) -> Iterator[str]:
    """The values of an ows:Parameter / ows:Constraint (OWS 1.0 and 1.1 spellings)."""
    for child in element.iter():
        if _local(child.tag) == "Value" and child.text and child.text.strip():
            yield child.text.strip()


def parse_capabilities(root: etree._Element) -> Capabilities:
    """Read the parts of a CSW 2.0.2 Capabilities document the harvester uses."""
    if _local(root.tag) != "Capabilities":
        raise HarvestError(
            f"GetCapabilities answered with <{_local(root.tag)}>, not a Capabilities document",
            code="badCapabilities",
        )
    title = ""
    operations: dict[str, Operation] = {}
    max_default: int | None = None
    modified: str | None = None
    type_name = "Type"
    schemas: list[str] = []
    for element in root.iter():
        name = _local(element.tag)
        parent = element.getparent()
        if name == "Title" and not title and parent is not None:
            if _local(parent.tag) == "ServiceIdentification":
                title = (element.text or "").strip()
        elif name == "Operation":
            op_name = element.get("name", "")
            methods = {_local(m.tag) for m in element.iter() if _local(m.tag) in ("Get", "Post")}
            operations[op_name] = Operation(op_name, "Get" in methods, "Post" in methods)
        elif name in ("Parameter", "Constraint"):
            key = element.get("name", "").lower()
            if key == "outputschema":
                schemas.extend(v for v in _values(element) if v not in schemas)
            elif key == "maxrecorddefault":
                found = next(_values(element), "")
                if found.isdigit() and int(found) > 0:
                    max_default = int(found)
            elif "queryables" in key:
                iso = "iso" in key  # the ISO profile's queryables win over Dublin Core's
                for value in _values(element):
                    local = value.split(":")[-1].lower()
                    if local == "modified" and (modified is None or iso):
                        modified = value
                    elif local == "type" and (type_name == "Type" or iso):
                        type_name = value
    version = root.get("version", "")
    return Capabilities(
        title, operations, max_default, modified, type_name, tuple(schemas), version
    )


def exception_report(root: etree._Element, what: str) -> HarvestError | None:
    """The error an ``ows:ExceptionReport`` stands for, or None for any other document."""
    if _local(root.tag) != "ExceptionReport":
        return None
    parts = []
    code = "cswException"
    for exc in root.iter():
        if _local(exc.tag) != "Exception":
            continue
        exc_code = exc.get("exceptionCode", "")
        locator = exc.get("locator")
        texts = [(t.text or "").strip() for t in exc.iter() if _local(t.tag) == "ExceptionText"]
        detail = "; ".join(t for t in texts if t)
        parts.append(f"{exc_code}{f' ({locator})' if locator else ''}: {detail}".strip(": "))
        if exc_code and code == "cswException":
            code = exc_code
    message = " | ".join(parts) or "an empty exception report"
    return HarvestError(f"{what} answered with an OWS exception report: {message}", code=code)


@dataclass(frozen=True, slots=True)
class SearchResults:
    """One GetRecords page: the counts as the server gave them and the records it held."""

    matched: int | None
    returned: int | None
    next_record: int | None
    records: list[etree._Element]  # the children of csw:SearchResults, in order


def _int_attr(element: etree._Element, name: str) -> int | None:
    value = element.get(name)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


class CswClient:
    """The three operations against one CSW endpoint, in one binding (``get`` or ``post``)."""

    def __init__(self, http: HttpSession, url: str, binding: str = "post") -> None:
        self.http = http
        self.url = url
        self.binding = binding

    # -- transport ----------------------------------------------------------------------------
    def _send(self, what: str, params: dict[str, str], body: bytes) -> etree._Element:
        response: Response
        if self.binding == "post":
            response = self.http.post(
                self.url,
                data=body,
                headers={"Content-Type": "application/xml; charset=utf-8"},
                raise_for_status=False,
            )
        else:
            response = self.http.get(self.url, params=params, raise_for_status=False)
        try:
            root = parse_xml(response.content, url=response.url)
        except AggregatorError as err:
            if response.status >= 400:
                raise response.status_error(f"{what} ({self.binding.upper()})") from err
            raise HarvestError(f"{what}: {err.message}", code=err.code) from err
        error = exception_report(root, f"{what} ({self.binding.upper()} {response.url})")
        if error is not None:
            raise error
        if response.status >= 400:
            raise response.status_error(f"{what} ({self.binding.upper()})")
        return root

    # -- operations ---------------------------------------------------------------------------
    def get_capabilities(self) -> Capabilities:
        params = {"service": "CSW", "request": "GetCapabilities", "acceptVersions": "2.0.2"}
        body = (
            f'<csw:GetCapabilities xmlns:csw="{CSW}" xmlns:ows="{OWS}" service="CSW">'
            "<ows:AcceptVersions><ows:Version>2.0.2</ows:Version></ows:AcceptVersions>"
            "</csw:GetCapabilities>"
        ).encode()
        return parse_capabilities(self._send("GetCapabilities", params, body))

    def get_records(
        self,
        start: int,
        max_records: int,
        *,
        identifiers_only: bool,
        output_schema: str = ISO_SCHEMA,
        types: Sequence[str] = (),
        type_queryable: str = "Type",
        modified_queryable: str | None = None,
        since: str | None = None,
    ) -> SearchResults:
        """One page. ``identifiers_only``: the DMS request (``csw:Record``, ``dc:identifier``
        only, no filter); else the full ISO records with the Type and Modified filter."""
        filter_xml = (
            "" if identifiers_only else _filter(types, type_queryable, modified_queryable, since)
        )
        params = {
            "service": "CSW",
            "version": "2.0.2",
            "request": "GetRecords",
            "resultType": "results",
            "startPosition": str(start),
            "maxRecords": str(max_records),
        }
        if identifiers_only:
            params.update(typeNames="csw:Record", ElementName="dc:identifier")
            query = (
                '<csw:Query typeNames="csw:Record">'
                "<csw:ElementName>dc:identifier</csw:ElementName></csw:Query>"
            )
            schema_attr = ""
        else:
            params.update(
                typeNames="gmd:MD_Metadata",
                namespace=f"xmlns(gmd={GMD})",
                outputSchema=output_schema,
                outputFormat="application/xml",
                ElementSetName="full",
            )
            constraint = ""
            if filter_xml:
                params.update(
                    constraintLanguage="FILTER",
                    constraint_language_version="1.1.0",
                    constraint=filter_xml,
                )
                constraint = f'<csw:Constraint version="1.1.0">{filter_xml}</csw:Constraint>'
            query = (
                '<csw:Query typeNames="gmd:MD_Metadata">'
                f"<csw:ElementSetName>full</csw:ElementSetName>{constraint}</csw:Query>"
            )
            schema_attr = f' outputSchema={quoteattr(output_schema)} outputFormat="application/xml"'
        body = (
            f'<csw:GetRecords xmlns:csw="{CSW}" xmlns:ogc="{OGC}" xmlns:gmd="{GMD}" '
            f'xmlns:dc="{DC}" service="CSW" version="2.0.2" resultType="results" '
            f'startPosition="{start}" maxRecords="{max_records}"{schema_attr}>{query}'
            "</csw:GetRecords>"
        ).encode()
        root = self._send(f"GetRecords (startPosition {start})", params, body)
        results = root.find(f"{{{CSW}}}SearchResults")
        if results is None:
            raise HarvestError(
                f"GetRecords (startPosition {start}) answered with <{_local(root.tag)}>"
                " and no csw:SearchResults",
                code="malformedResponse",
            )
        return SearchResults(
            _int_attr(results, "numberOfRecordsMatched"),
            _int_attr(results, "numberOfRecordsReturned"),
            _int_attr(results, "nextRecord"),
            [child for child in results if isinstance(child.tag, str)],
        )

    def get_record_by_id(self, ids: Sequence[str], output_schema: str) -> list[etree._Element]:
        """The records of ``ids`` (comma-separated in one request), as the response holds
        them (children of ``csw:GetRecordByIdResponse``)."""
        params = {
            "service": "CSW",
            "version": "2.0.2",
            "request": "GetRecordById",
            "id": ",".join(ids),
            "outputSchema": output_schema,
            "ElementSetName": "full",
        }
        id_elements = "".join(f"<csw:Id>{escape(i)}</csw:Id>" for i in ids)
        body = (
            f'<csw:GetRecordById xmlns:csw="{CSW}" service="CSW" version="2.0.2" '
            f"outputSchema={quoteattr(output_schema)}>{id_elements}"
            "<csw:ElementSetName>full</csw:ElementSetName></csw:GetRecordById>"
        ).encode()
        root = self._send(f"GetRecordById ({len(ids)} ids)", params, body)
        if _local(root.tag) != "GetRecordByIdResponse":
            raise HarvestError(
                f"GetRecordById answered with <{_local(root.tag)}>",
                code="malformedResponse",
            )
        return [child for child in root if isinstance(child.tag, str)]


def identifiers_of(records: Sequence[etree._Element]) -> list[str | None]:
    """The ``dc:identifier`` of each record of an identifiers page (None when missing)."""
    found: list[str | None] = []
    for record in records:
        text = record.findtext(f"{{{DC}}}identifier")
        found.append(text.strip() if text and text.strip() else None)
    return found


def _filter(types: Sequence[str], type_name: str, modified: str | None, since: str | None) -> str:
    """The OGC Filter 1.1 of a full-records request: ``Type`` any of ``types`` (dataset,
    series ...) and, for selective harvesting, ``Modified >= since``."""
    clauses = []
    if types:
        equals = [
            f"<ogc:PropertyIsEqualTo><ogc:PropertyName>{escape(type_name)}</ogc:PropertyName>"
            f"<ogc:Literal>{escape(t)}</ogc:Literal></ogc:PropertyIsEqualTo>"
            for t in types
        ]
        clauses.append(equals[0] if len(equals) == 1 else f"<ogc:Or>{''.join(equals)}</ogc:Or>")
    if modified and since:
        clauses.append(
            "<ogc:PropertyIsGreaterThanOrEqualTo>"
            f"<ogc:PropertyName>{escape(modified)}</ogc:PropertyName>"
            f"<ogc:Literal>{escape(since)}</ogc:Literal></ogc:PropertyIsGreaterThanOrEqualTo>"
        )
    if not clauses:
        return ""
    inner = clauses[0] if len(clauses) == 1 else f"<ogc:And>{''.join(clauses)}</ogc:And>"
    return f'<ogc:Filter xmlns:ogc="{OGC}">{inner}</ogc:Filter>'


def dump_checkpoint(since: str | None, capabilities: Capabilities) -> str:
    return json.dumps({"since": since, "capabilities": capabilities.to_json()}, sort_keys=True)


def load_checkpoint(value: str | None) -> tuple[str | None, Capabilities | None]:
    """(since, cached capabilities) from a checkpoint; (None, None) when unreadable."""
    if not value:
        return None, None
    try:
        data = json.loads(value)
        caps = Capabilities.from_json(data["capabilities"])
        since = data.get("since")
        return (since if isinstance(since, str) else None), caps
    except (ValueError, KeyError, TypeError):
        return None, None
