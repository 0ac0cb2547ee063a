"""Content negotiation, RDF serialisation and HTTP caching helpers for the republishing routes.

Formats are chosen in this order: a format suffix on the path (``.ttl``, ``.jsonld``, ``.rdf``,
``.nt``, ``.html``), then a ``format`` query parameter, then the ``Accept`` header
(:mod:`aggregator.serve.negotiation`; equal preferences go to the range listed first, then to the
route's default).

Serialisation is pyoxigraph's throughout, JSON-LD included: pyoxigraph 0.5 writes expanded
JSON-LD (full IRIs, ``@value``/``@language``/``@type`` objects), which needs no context and
keeps every literal's datatype. N-Triples of one record are served as the stored bytes.
Graphs are never read back from the graph store (its datatypes change on insert): they come
from the canonical N-Triples kept in SQLite.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

from pyoxigraph import BlankNode, Literal, NamedNode, RdfFormat, Triple, parse, serialize
from starlette.requests import Request
from starlette.responses import Response

from aggregator.core.errors import AggregatorError
from aggregator.serve.negotiation import best_offer

PREFIXES = {
    "dcat": "http://www.w3.org/ns/dcat#",
    "dct": "http://purl.org/dc/terms/",
    "foaf": "http://xmlns.com/foaf/0.1/",
    "hydra": "http://www.w3.org/ns/hydra/core#",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
    "vcard": "http://www.w3.org/2006/vcard/ns#",
    "adms": "http://www.w3.org/ns/adms#",
    "prov": "http://www.w3.org/ns/prov#",
    "spdx": "http://spdx.org/rdf/terms#",
    "agg": "https://w3id.org/ld-aggregator/ns#",
}


@dataclass(frozen=True, slots=True)
class Format:
    key: str  # the suffix without its dot, and the canonical ?format= value
    media_type: str
    content_type: str  # what the Content-Type header says
    rdf: RdfFormat | None  # None: HTML
    aliases: tuple[str, ...] = ()  # other ?format= values and Accept media types


TURTLE = Format("ttl", "text/turtle", "text/turtle; charset=utf-8", RdfFormat.TURTLE, ("turtle",))
JSONLD = Format(
    "jsonld",
    "application/ld+json",
    "application/ld+json",
    RdfFormat.JSON_LD,
    ("json-ld", "json", "application/json"),
)
RDFXML = Format(
    "rdf",
    "application/rdf+xml",
    "application/rdf+xml",
    RdfFormat.RDF_XML,
    ("rdfxml", "xml", "application/xml", "text/xml"),
)
NTRIPLES = Format(
    "nt", "application/n-triples", "application/n-triples", RdfFormat.N_TRIPLES, ("ntriples",)
)
HTML = Format("html", "text/html", "text/html; charset=utf-8", None, ("application/xhtml+xml",))

RDF_FORMATS: tuple[Format, ...] = (TURTLE, JSONLD, RDFXML, NTRIPLES)
ALL_FORMATS: tuple[Format, ...] = (*RDF_FORMATS, HTML)
BY_SUFFIX = {f".{f.key}": f for f in ALL_FORMATS}


def by_name(name: str, offered: Sequence[Format]) -> Format | None:
    """A ``?format=`` value (key, alias or media type) among ``offered``."""
    name = name.strip().lower()
    for fmt in offered:
        if name in (fmt.key, fmt.media_type, *fmt.aliases):
            return fmt
    return None


def split_suffix(segment: str) -> tuple[str, Format | None]:
    """``'key.ttl'`` -> ``('key', TURTLE)``; a segment without a known suffix is unchanged."""
    stem, dot, ext = segment.rpartition(".")
    if dot and stem:
        fmt = BY_SUFFIX.get(f".{ext.lower()}")
        if fmt is not None:
            return stem, fmt
    return segment, None


def negotiate(accept: str | None, offered: Sequence[Format], default: Format) -> Format | None:
    """The offered format the Accept header prefers (:mod:`aggregator.serve.negotiation`: highest
    q, then the range listed first, then ``default``, then the order of ``offered``); without
    a header, ``default``. Returns None when the header rules out every offered format
    (answer 406)."""
    ordered = (
        [default, *(f for f in offered if f is not default)] if default in offered else offered
    )
    return best_offer(
        accept,
        [(fmt, (fmt.media_type, *(a for a in fmt.aliases if "/" in a))) for fmt in ordered],
    )


@dataclass(frozen=True, slots=True)
class Choice:
    fmt: Format
    negotiated: bool  # chosen from Accept (the response must say Vary: Accept)


def choose(
    accept: str | None,
    suffix: Format | None,
    format_param: str | None,
    offered: Sequence[Format],
    default: Format,
) -> Choice | str | None:
    """Suffix, then ``?format=``, then Accept. A string is an error message (answer 400)."""
    if suffix is not None:
        return Choice(suffix, False) if suffix in offered else f"no {suffix.key} form here"
    if format_param:
        fmt = by_name(format_param, offered)
        if fmt is None:
            keys = ", ".join(f.key for f in offered)
            return f"unknown format {format_param!r} (offered: {keys})"
        return Choice(fmt, False)
    fmt = negotiate(accept, offered, default)
    return None if fmt is None else Choice(fmt, True)


# -- graphs -------------------------------------------------------------------------------------
def parse_ntriples(data: bytes, scope: str = "") -> list[Triple]:
    """Parse stored N-Triples; blank nodes get ``scope`` as a label prefix, so that the graphs
    of several records can share one document without their blank nodes merging. Parsed
    leniently: pyoxigraph wrote them from terms it had already checked (oai_formats.py)."""
    triples = [q.triple for q in parse(data, RdfFormat.N_TRIPLES, lenient=True)]
    if not scope:
        return triples
    return [_rescope(t, scope) for t in triples]


def _rescope(t: Triple, scope: str) -> Triple:
    s, o = t.subject, t.object
    if isinstance(s, BlankNode):
        s = BlankNode(f"{scope}{s.value}")
    if isinstance(o, BlankNode):
        o = BlankNode(f"{scope}{o.value}")
    return Triple(s, t.predicate, o) if (s is not t.subject or o is not t.object) else t


def serialize_graph(triples: Iterable[Triple], fmt: Format) -> bytes:
    """Serialise triples in an RDF format (prefixes for Turtle and RDF/XML)."""
    assert fmt.rdf is not None
    prefixes = PREFIXES if fmt in (TURTLE, RDFXML) else None
    data = serialize(triples, format=fmt.rdf, prefixes=prefixes)
    return data or b""


def iri(value: str) -> NamedNode:
    return NamedNode(value)


def literal(value: str, datatype: str | None = None, language: str | None = None) -> Literal:
    if datatype:
        return Literal(value, datatype=NamedNode(datatype))
    if language:
        return Literal(value, language=language)
    return Literal(value)


# -- HTTP caching ---------------------------------------------------------------------------------
def etag(*parts: object) -> str:
    """A strong ETag from the values a representation depends on."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()
    return f'"{digest[:32]}"'


def parse_stamp(stamp: str) -> datetime | None:
    """Our 'YYYY-MM-DDTHH:MM:SS.ffffffZ' stamps as aware datetimes."""
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        try:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)
        except ValueError:
            return None


def http_date(stamp: str) -> str | None:
    when = parse_stamp(stamp)
    return format_datetime(when.replace(microsecond=0), usegmt=True) if when else None


def not_modified(
    if_none_match: str | None, if_modified_since: str | None, tag: str, stamp: str | None
) -> bool:
    """RFC 9110 13.2.2: If-None-Match when present, else If-Modified-Since."""
    if if_none_match is not None:
        tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
        return "*" in tags or tag in tags
    if if_modified_since and stamp:
        when = parse_stamp(stamp)
        try:
            since = parsedate_to_datetime(if_modified_since)
        except (TypeError, ValueError):
            return False
        if when is None or since.tzinfo is None:
            return False
        return when.replace(microsecond=0) <= since
    return False


# -- responses -------------------------------------------------------------------------------------
CACHE_CONTROL = "public, no-cache"  # may be stored; revalidated each time (ETag, cheap 304)
# The style of the pages made in aggregator.serve.pages, allowed by its hash: the CSP admits
# scripts and styles from our own static files and this one stylesheet, nothing else inline.
PAGE_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:1rem auto;padding:0 1rem;"
    "line-height:1.45}dt{font-weight:600}dd{margin:0 0 .5rem 1rem}.lang{color:#666;"
    "font-size:.8em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem"
    " .4rem;vertical-align:top;text-align:left}.desc{white-space:pre-line}nav a{margin-right:1rem}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(PAGE_STYLE.encode()).digest()).decode()


def html_csp(images_from: str = "") -> str:
    """The pages' Content-Security-Policy; ``images_from``: one more source of images (the
    configured map tile server's origin, on the dataset page)."""
    img = f"'self' data: {images_from}" if images_from else "'self' data:"
    return (
        "default-src 'none'; script-src 'self'; "
        f"style-src 'self' 'sha256-{_STYLE_HASH}'; img-src {img}; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )


HTML_CSP = html_csp()


class BadRequestError(AggregatorError):
    http_status = 400
    code = "badRequest"


class NotAcceptableError(AggregatorError):
    http_status = 406
    code = "notAcceptable"


def select(
    request: Request,
    suffix: Format | None,
    offered: Sequence[Format],
    default: Format = TURTLE,
) -> Choice:
    """:func:`choose` for a request; raises BadRequestError (400) or NotAcceptableError (406)."""
    chosen = choose(
        request.headers.get("accept"), suffix, request.query_params.get("format"), offered, default
    )
    if isinstance(chosen, str):
        raise BadRequestError(chosen)
    if chosen is None:
        types = ", ".join(f.media_type for f in offered)
        raise NotAcceptableError(f"not acceptable; this resource is offered as {types}")
    return chosen


def with_format(url: str, fmt: Format) -> str:
    return f"{url}{'&' if '?' in url else '?'}format={fmt.key}"


def respond(
    request: Request,
    body: Callable[[], bytes | str],
    fmt: Format,
    tag: str,
    stamp: str | None,
    *,
    negotiated: bool,
    location: str | None = None,
    extra: Mapping[str, str] | None = None,
    csp: str = HTML_CSP,
) -> Response:
    """A 200 with validators and caching headers, or a 304 (``body`` is then never built).

    A negotiated response says ``Vary: Accept`` and names the format-specific URL it also
    lives at in ``Content-Location``.
    """
    headers = {"ETag": tag, "Cache-Control": CACHE_CONTROL}
    last_modified = http_date(stamp) if stamp else None
    if last_modified:
        headers["Last-Modified"] = last_modified
    if negotiated:
        headers["Vary"] = "Accept"
        if location:
            headers["Content-Location"] = location
    headers.update(extra or {})
    if not_modified(
        request.headers.get("if-none-match"), request.headers.get("if-modified-since"), tag, stamp
    ):
        return Response(None, 304, headers)
    if fmt is HTML:
        headers["Content-Security-Policy"] = csp
        headers["X-Content-Type-Options"] = "nosniff"
    return Response(body(), 200, headers, media_type=fmt.content_type)
