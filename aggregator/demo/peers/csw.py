"""A local OGC CSW 2.0.2 server (WSGI) of ISO 19139 records, with switchable misbehaviours.

It answers what the ``csw`` harvester sends, in both bindings (KVP GET and XML POST):
``GetCapabilities``; ``GetRecords`` for the catalogue's ids (``ElementName=dc:identifier``,
``csw:Record`` with the catalogue's internal id, which is not the fileIdentifier) or for
full ISO records (``outputSchema`` either ISO URI, the ``Type`` and ``Modified`` filter);
``GetRecordById`` with comma-separated ids. :class:`CswFaults` switches on what real servers
do wrong: an ``ows:ExceptionReport`` with HTTP 200, a wrong or backwards ``nextRecord``,
short pages, a result cap, a count that drifts, records missing from GetRecordById, slow
responses. ``requests`` counts the operations served.

The catalogue is any sequence of :class:`CswItem`; :class:`GeneratedCatalogue` makes its
items on demand (the benchmark serves 20,000 records without holding them).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from lxml import etree

from aggregator.core.xml import parse_xml
from aggregator.demo.peers.gemini_samples import generate_gemini_record, strip_declaration
from aggregator.demo.peers.server import respond
from aggregator.harvest.csw.client import CSW, ISO_SCHEMA, OGC, is_iso_schema
from aggregator.harvest.gemini import record_facts

StartResponse = Callable[..., Any]
_XML = "application/xml; charset=utf-8"


@dataclass(frozen=True, slots=True)
class CswItem:
    internal_id: str  # the catalogue's own id (what GetRecords lists, GetRecordById takes)
    file_identifier: str
    modified: str  # the dateStamp as written
    type: str  # hierarchy level
    payload: bytes  # the record document, without XML declaration


def item_of(internal_id: str, document: bytes) -> CswItem:
    facts = record_facts(parse_xml(document))
    stamp = facts.date_stamp.strftime("%Y-%m-%dT%H:%M:%S") if facts.date_stamp else ""
    return CswItem(
        internal_id,
        facts.file_identifier,
        stamp,
        facts.hierarchy_level or "dataset",
        strip_declaration(document),
    )


class GeneratedCatalogue(Sequence[CswItem]):
    """``count`` generated records (:func:`generate_gemini_record`), made when asked for.
    ``make``: how record ``i`` is made instead (a benchmark's, which changes some records
    between two harvests or reads them from where it made them before the clock)."""

    def __init__(
        self, count: int, revision: int = 0, make: Callable[[int], CswItem] | None = None
    ) -> None:
        self.size = count
        self.revision = revision
        self.make = make

    def matching(self, types: tuple[str, ...], since: str | None) -> Sequence[int] | None:
        """The indexes a query selects, without making a record, where that needs none:
        every generated record is a dataset (None: the caller looks at each record)."""
        if types and "dataset" not in types:
            return range(0)
        return range(self.size) if since is None else None

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> CswItem: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[CswItem]: ...
    def __getitem__(self, index: int | slice) -> CswItem | Sequence[CswItem]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        if not 0 <= index < self.size:
            raise IndexError(index)
        if self.make is not None:
            return self.make(index)
        return item_of(f"gen-{index}", generate_gemini_record(index, self.revision))


@dataclass(slots=True)
class CswFaults:
    exception_on_page: int | None = None  # this GetRecords page: ExceptionReport, HTTP 200
    exception_on_capabilities: bool = False
    next_record: Literal["ok", "zero", "backwards", "beyond", "skip"] = "ok"
    next_record_page: int = 1  # the page whose nextRecord is wrong
    short_pages: int | None = None  # at most this many records per page
    cap: int | None = None  # past this many results, pages are empty (nextRecord=0)
    drift_after_page: int | None = None  # numberOfRecordsMatched grows by one after it
    missing_by_id: frozenset[str] = frozenset()  # internal ids GetRecordById leaves out
    ignore_output_schema: bool = False  # answer full requests with csw:Record
    delay: float = 0.0  # seconds before every answer
    doctype_attack: bool = False  # GetRecords answers start with an external-entity DOCTYPE
    bindings: tuple[str, ...] = ("get", "post")  # advertised for GetRecords
    modified_queryable: bool = True
    max_record_default: int | None = 10
    schema_uri: str = ISO_SCHEMA  # the ISO output schema URI advertised
    version: str = "2.0.2"  # the Capabilities document's version attribute


@dataclass(slots=True)
class _Query:
    start: int = 1
    max_records: int = 10
    identifiers: bool = False
    schema: str = ""
    types: tuple[str, ...] = ()
    since: str | None = None
    ids: tuple[str, ...] = ()


class CswPeer:
    """The WSGI app: mount it at any path; it answers every path the same."""

    def __init__(self, items: Sequence[CswItem], faults: CswFaults | None = None) -> None:
        self.items = items
        self.faults = faults or CswFaults()
        self.requests: Counter[str] = Counter()
        self.bindings_seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._cache: dict[tuple[tuple[str, ...], str | None], Sequence[int]] = {}
        self._by_id: dict[str, int] | None = None

    @classmethod
    def of_documents(cls, documents: Iterable[bytes], faults: CswFaults | None = None) -> CswPeer:
        items = [item_of(f"cat-{n:05d}", doc) for n, doc in enumerate(documents, start=1)]
        return cls(items, faults)

    # -- HTTP -----------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        if self.faults.delay:
            time.sleep(self.faults.delay)
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            if method == "POST":
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = environ["wsgi.input"].read(length)
                operation, args = _from_xml(body)
                self.bindings_seen["post"] += 1
            else:
                query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
                operation, args = _from_kvp({k.lower(): v[0] for k, v in query.items()})
                self.bindings_seen["get"] += 1
        except (ValueError, etree.XMLSyntaxError) as err:
            return respond(start_response, 400, _exception("NoApplicableCode", str(err)), _XML)
        with self._lock:
            self.requests[operation] += 1
        if operation == "GetCapabilities":
            if self.faults.exception_on_capabilities:
                return respond(start_response, 200, _exception("NoApplicableCode", "down"), _XML)
            return respond(start_response, 200, self._capabilities(), _XML)
        if operation == "GetRecords":
            return respond(start_response, 200, self._get_records(args), _XML)
        if operation == "GetRecordById":
            return respond(start_response, 200, self._get_record_by_id(args), _XML)
        body = _exception("OperationNotSupported", f"unknown request {operation!r}", "request")
        return respond(start_response, 400, body, _XML)

    # -- operations -------------------------------------------------------------------------
    def _capabilities(self) -> bytes:
        f = self.faults

        def operation(name: str, bindings: Iterable[str]) -> str:
            methods = "".join(
                f'<ows:{b.capitalize()} xlink:href="http://127.0.0.1/csw"/>' for b in bindings
            )
            return (
                f'<ows:Operation name="{name}"><ows:DCP><ows:HTTP>{methods}</ows:HTTP></ows:DCP>'
                '<ows:Parameter name="outputSchema">'
                f"<ows:Value>http://www.opengis.net/cat/csw/2.0.2</ows:Value>"
                f"<ows:Value>{escape(f.schema_uri)}</ows:Value></ows:Parameter>"
                + (
                    '<ows:Constraint name="SupportedISOQueryables">'
                    "<ows:Value>apiso:Type</ows:Value><ows:Value>apiso:Modified</ows:Value>"
                    "</ows:Constraint>"
                    if name == "GetRecords" and f.modified_queryable
                    else ""
                )
                + "</ows:Operation>"
            )

        max_default = (
            '<ows:Constraint name="MaxRecordDefault">'
            f"<ows:Value>{f.max_record_default}</ows:Value></ows:Constraint>"
            if f.max_record_default
            else ""
        )
        return (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<csw:Capabilities xmlns:csw="{CSW}" xmlns:ows="http://www.opengis.net/ows" '
            'xmlns:xlink="http://www.w3.org/1999/xlink" '
            f'version="{escape(f.version)}">'
            "<ows:ServiceIdentification><ows:Title>Local CSW fixture</ows:Title>"
            "<ows:ServiceType>CSW</ows:ServiceType><ows:ServiceTypeVersion>2.0.2"
            "</ows:ServiceTypeVersion></ows:ServiceIdentification>"
            "<ows:OperationsMetadata>"
            + operation("GetCapabilities", ("get", "post"))
            + operation("GetRecords", f.bindings)
            + operation("GetRecordById", ("get", "post"))
            + max_default
            + "</ows:OperationsMetadata></csw:Capabilities>"
        ).encode()

    def _matching(self, q: _Query) -> Sequence[int]:
        key = (() if q.identifiers else q.types, None if q.identifiers else q.since)
        with self._lock:
            found = self._cache.get(key)
        if found is None and isinstance(self.items, GeneratedCatalogue):
            found = self.items.matching(*key)  # none made (bench/million.py)
        if found is None:
            found = [
                n
                for n, item in enumerate(self.items)
                if (not key[0] or item.type in key[0])
                and (key[1] is None or item.modified >= key[1])
            ]
            with self._lock:
                self._cache[key] = found
        return found

    def _get_records(self, args: _Query) -> bytes:
        f = self.faults
        with self._lock:
            page_no = self.requests["GetRecords"]
        if f.exception_on_page is not None and page_no == f.exception_on_page:
            return _exception("NoApplicableCode", "database connection lost")
        if not args.identifiers and not is_iso_schema(args.schema):
            return _exception(
                "InvalidParameterValue", f"outputSchema {args.schema}", "outputSchema"
            )
        matching = self._matching(args)
        matched = len(matching)
        visible = matched if f.cap is None else min(matched, f.cap)
        size = args.max_records if f.short_pages is None else min(args.max_records, f.short_pages)
        first = max(args.start, 1) - 1
        chosen = matching[first : min(first + size, visible)] if first < visible else []
        nxt = first + len(chosen) + 1
        if not chosen or nxt > matched:
            nxt = 0
        if page_no == f.next_record_page:
            nxt = {
                "ok": nxt,
                "zero": 0,
                "backwards": 1,
                "beyond": matched + 5,
                "skip": nxt + 3 if nxt else 0,
            }[f.next_record]
        if f.drift_after_page is not None and page_no > f.drift_after_page:
            matched += 1
        parts = []
        for n in chosen:
            item = self.items[n]
            if args.identifiers or f.ignore_output_schema:
                parts.append(
                    f'<csw:Record xmlns:dc="http://purl.org/dc/elements/1.1/">'
                    f"<dc:identifier>{escape(item.internal_id)}</dc:identifier></csw:Record>"
                )
            else:
                parts.append(item.payload.decode("utf-8"))
        attack = (
            '<!DOCTYPE r [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>' if f.doctype_attack else ""
        )
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>{attack}'
            f'<csw:GetRecordsResponse xmlns:csw="{CSW}" version="2.0.2">'
            f'<csw:SearchStatus timestamp="2026-11-26T08:00:00Z"/>'
            f'<csw:SearchResults numberOfRecordsMatched="{matched}" '
            f'numberOfRecordsReturned="{len(chosen)}" nextRecord="{nxt}" '
            f'elementSet="{"brief" if args.identifiers else "full"}">'
            + "".join(parts)
            + "</csw:SearchResults></csw:GetRecordsResponse>"
        ).encode("utf-8")

    def _get_record_by_id(self, args: _Query) -> bytes:
        if not is_iso_schema(args.schema):
            return _exception(
                "InvalidParameterValue", f"outputSchema {args.schema}", "outputSchema"
            )
        with self._lock:
            if self._by_id is None:
                self._by_id = {item.internal_id: n for n, item in enumerate(self.items)}
        parts = []
        for wanted in args.ids:
            n = self._by_id.get(wanted)
            if n is not None and wanted not in self.faults.missing_by_id:
                parts.append(self.items[n].payload.decode("utf-8"))
        return (
            f'<?xml version="1.0" encoding="UTF-8"?><csw:GetRecordByIdResponse xmlns:csw="{CSW}">'
            + "".join(parts)
            + "</csw:GetRecordByIdResponse>"
        ).encode("utf-8")


# -- request parsing ----------------------------------------------------------------------
def _filter_of(filter_xml: str) -> tuple[tuple[str, ...], str | None]:
    if not filter_xml:
        return (), None
    root = parse_xml(filter_xml.encode("utf-8"))
    types: list[str] = []
    since = None
    for element in root.iter(
        f"{{{OGC}}}PropertyIsEqualTo", f"{{{OGC}}}PropertyIsGreaterThanOrEqualTo"
    ):
        name = (element.findtext(f"{{{OGC}}}PropertyName") or "").split(":")[-1].lower()
        literal = (element.findtext(f"{{{OGC}}}Literal") or "").strip()
        if name == "type" and element.tag.endswith("EqualTo") and "Greater" not in element.tag:
            types.append(literal)
        elif name == "modified":
            since = literal
    return tuple(types), since


def _from_kvp(args: dict[str, str]) -> tuple[str, _Query]:
    operation = args.get("request", "")
    q = _Query()
    if operation == "GetRecords":
        q.start = int(args.get("startposition", "1") or 1)
        q.max_records = int(args.get("maxrecords", "10") or 10)
        q.identifiers = args.get("elementname", "") == "dc:identifier"
        q.schema = args.get("outputschema", "http://www.opengis.net/cat/csw/2.0.2")
        q.types, q.since = _filter_of(args.get("constraint", ""))
    elif operation == "GetRecordById":
        q.schema = args.get("outputschema", "")
        q.ids = tuple(i for i in args.get("id", "").split(",") if i)
    return operation, q


def _from_xml(body: bytes) -> tuple[str, _Query]:
    root = parse_xml(body)
    operation = etree.QName(root).localname
    q = _Query()
    if operation == "GetRecords":
        q.start = int(root.get("startPosition", "1"))
        q.max_records = int(root.get("maxRecords", "10"))
        q.schema = root.get("outputSchema", "http://www.opengis.net/cat/csw/2.0.2")
        names = [e.text for e in root.iter(f"{{{CSW}}}ElementName")]
        q.identifiers = names == ["dc:identifier"]
        found = root.find(f".//{{{OGC}}}Filter")
        if found is not None:
            q.types, q.since = _filter_of(etree.tostring(found).decode())
    elif operation == "GetRecordById":
        q.schema = root.get("outputSchema", "")
        q.ids = tuple((e.text or "").strip() for e in root.iter(f"{{{CSW}}}Id"))
    return operation, q


def _exception(code: str, text: str, locator: str | None = None) -> bytes:
    where = f' locator="{escape(locator)}"' if locator else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ows:ExceptionReport xmlns:ows="http://www.opengis.net/ows" version="1.2.0">'
        f'<ows:Exception exceptionCode="{escape(code)}"{where}>'
        f"<ows:ExceptionText>{escape(text)}</ows:ExceptionText></ows:Exception>"
        "</ows:ExceptionReport>"
    ).encode()


__all__ = ["CswFaults", "CswItem", "CswPeer", "GeneratedCatalogue", "item_of"]
