"""The DCAT catalogue of the aggregate, and dereferenceable dataset, record and payload IRIs.

Routes (see docs/serve/catalog.md; :func:`routes` returns them for the app to mount):

- ``/catalog`` (and ``/catalog.ttl|.jsonld|.rdf|.nt|.html``): the ``dcat:Catalog`` of the
  active records, paged by keyset on ``(modified, id)`` with a Hydra
  ``PartialCollectionView``; ``?modified_since=`` limits it to recent changes. Every page
  holds the full descriptions of its datasets and their catalogue records.
- ``/dataset/{source}/{key}`` (minted dataset IRIs) and ``/dataset?iri=`` (any dataset IRI):
  the dataset graph as stored, or an HTML page; 410 for withdrawn datasets.
- ``/record/{source}/{key}``: the ``dcat:CatalogRecord``.
- ``/payload/{sha256}``: the original payload, byte for byte, with its media type.

The functions that read SQLite are framework-neutral, in :mod:`aggregator.serve.catalog_data`
(:func:`load_page`, :func:`find_dataset`, :func:`find_record`, :func:`page_triples`); the
Starlette handlers here only translate HTTP. Everything is read from SQLite
(``ctx.read_db()``); nothing from the graph store, whose datatypes change on insert.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, urlencode

from pyoxigraph import Triple
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from aggregator.config import tile_origin
from aggregator.core.errors import AggregatorError, NotFoundError
from aggregator.serve import pages
from aggregator.serve.catalog_data import (
    MAX_LIMIT,
    CatalogInfo,
    Counter,
    Cursor,
    Entry,
    Page,
    PageRequest,
    decode_cursor,
    find_dataset,
    find_payload,
    find_record,
    load_page,
    page_triples,
    parse_since,
)
from aggregator.serve.context import ServeContext
from aggregator.serve.rdf_formats import (
    ALL_FORMATS,
    HTML,
    HTML_CSP,
    NTRIPLES,
    TURTLE,
    BadRequestError,
    Choice,
    Format,
    choose,
    etag,
    html_csp,
    not_modified,
    parse_ntriples,
    respond,
    select,
    serialize_graph,
    split_suffix,
    with_format,
)
from aggregator.store.commit_barrier import wait_for_commits
from aggregator.store.state import RecordRow

_SHA = re.compile(r"^[0-9a-f]{64}$")


# -- HTTP ---------------------------------------------------------------------------------------
@dataclass
class _Web:
    ctx: ServeContext
    info: CatalogInfo
    counter: Counter = field(default_factory=Counter)

    # links to our own pages (the public base URL, which may differ from the base IRI)
    def local(self, iri: str, kind: str = "dataset") -> str:
        base = self.ctx.store.base_iri
        if iri.startswith(f"{base}{kind}/"):
            return self.ctx.base_url + iri[len(base) :]
        return f"{self.ctx.base_url}{kind}?{urlencode({'iri': iri})}"

    def links(self) -> pages.Links:
        return pages.Links(self.ctx.base_url, self.local, self.ctx.store.payload_iri)


def _error(
    request: Request, err: AggregatorError, extra: Mapping[str, str] | None = None
) -> Response:
    wants_html = choose(request.headers.get("accept"), None, None, ALL_FORMATS, TURTLE)
    # HTML or plain text by Accept: a negotiated answer, 406 included
    headers = {"Vary": "Accept", **(extra or {})}
    if isinstance(wants_html, Choice) and wants_html.fmt is HTML:
        body = pages.error_page(err.http_status, err.message)
        return Response(body, err.http_status, headers, media_type=HTML.content_type)
    return Response(
        err.message + "\n", err.http_status, headers, media_type="text/plain; charset=utf-8"
    )


#: renders a dataset's HTML page: (request, dataset IRI, row, its N-Triples, its triples,
#: links to our own pages) -> HTML (the dashboard's page; default :func:`pages.dataset_page`)
DatasetHtml = Callable[[Request, str, RecordRow, bytes, list[Triple], pages.Links], str]


def routes(ctx: ServeContext, dataset_html: DatasetHtml | None = None) -> list[BaseRoute]:
    """The catalogue, dataset, record and payload routes, for the app to mount at its root."""
    web = _Web(ctx, CatalogInfo.from_context(ctx))
    base_iri = ctx.store.base_iri
    tiles = ctx.settings.serve.map_tiles
    # the dashboard's dataset page may draw the configured tile server's images
    dataset_csp = html_csp(tile_origin(tiles)) if tiles and dataset_html else HTML_CSP

    def guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def run(request: Request) -> Response:
            try:
                return handler(request)
            except AggregatorError as err:
                return _error(request, err)

        return run

    def catalog(request: Request) -> Response:
        suffix = request.path_params.get("ext")
        fmt_suffix = split_suffix(f"c.{suffix}")[1] if suffix else None
        if suffix and fmt_suffix is None:
            raise NotFoundError(f"no catalogue format {suffix!r}")
        choice = select(request, fmt_suffix, ALL_FORMATS)
        params = request.query_params
        try:
            limit = int(params.get("limit") or ctx.settings.serve.catalog_page_size)
        except ValueError:
            raise BadRequestError("limit must be an integer") from None
        if not 1 <= limit <= MAX_LIMIT:
            raise BadRequestError(f"limit must be between 1 and {MAX_LIMIT}")
        since_raw = params.get("modified_since")
        req = PageRequest(decode_cursor(params.get("page")), parse_since(since_raw), limit)
        wait_for_commits(ctx.store.path)  # a commit in flight shows in this page
        page = load_page(ctx.read_db(), req, web.counter)
        path = f"{ctx.base_url}catalog" + (f".{suffix}" if suffix else "")
        fixed: dict[str, str] = {}
        if params.get("format") and not suffix:
            fixed["format"] = choice.fmt.key
        if since_raw:
            fixed["modified_since"] = since_raw
        if limit != ctx.settings.serve.catalog_page_size:
            fixed["limit"] = str(limit)

        def make_link(path: str, fixed: dict[str, str]) -> Callable[[Cursor], str]:
            def link(cursor: Cursor) -> str:
                # the first page too has a page token: a view's IRI is never the catalogue's
                return f"{path}?{urlencode({**fixed, 'page': cursor.token()})}"

            return link

        link = make_link(path, fixed)
        plain = make_link(
            f"{ctx.base_url}catalog", {k: v for k, v in fixed.items() if k != "format"}
        )

        tag = etag(
            "catalog",
            choice.fmt.key,
            link(req.cursor),
            page.total,
            page.version,
            web.info,
            [
                (e.row.id, e.row.modified, e.row.content_hash, e.row.payload_sha)
                for e in page.entries
            ],
        )

        def body() -> bytes | str:
            if choice.fmt is HTML:
                return pages.catalog_page(web.info, page, link, plain(req.cursor), web.links())
            return serialize_graph(page_triples(ctx, web.info, page, link), choice.fmt)

        location = with_format(plain(req.cursor), choice.fmt)
        return respond(
            request,
            body,
            choice.fmt,
            tag,
            page.version[0] or None,
            negotiated=choice.negotiated,
            location=location,
        )

    def dataset_response(
        request: Request, iri: str, entry: Entry | None, suffix: Format | None
    ) -> Response:
        choice = select(request, suffix, ALL_FORMATS)
        if entry is None or entry.row.status == "rejected":
            raise NotFoundError(f"no dataset {iri} in this catalogue")
        row = entry.row
        record_link = web.local(row.record_iri, "record")
        if row.status != "active":
            headers = {"Link": f'<{record_link}>; rel="describedby"', "Vary": "Accept"}
            if choice.fmt is HTML:
                gone_html = pages.gone_page(iri, row, web.links())
                headers["Content-Security-Policy"] = HTML_CSP
                return Response(gone_html, 410, headers, media_type=HTML.content_type)
            gone = f"dataset {iri} was withdrawn on {row.modified}; catalogue record: {record_link}"
            return Response(gone + "\n", 410, headers, media_type="text/plain; charset=utf-8")
        tag = etag(
            "dataset",
            row.id,
            row.modified,
            row.status,
            row.content_hash,
            row.payload_sha,
            choice.fmt.key,
        )

        def body() -> bytes | str:
            if choice.fmt is HTML:
                triples = parse_ntriples(entry.ntriples)
                if dataset_html is not None:
                    return dataset_html(request, iri, row, entry.ntriples, triples, web.links())
                return pages.dataset_page(iri, row, triples, web.links())
            if choice.fmt is NTRIPLES:
                return entry.ntriples  # exactly as stored
            return serialize_graph(parse_ntriples(entry.ntriples), choice.fmt)

        return respond(
            request,
            body,
            choice.fmt,
            tag,
            row.modified,
            negotiated=choice.negotiated,
            location=with_format(web.local(iri), choice.fmt),
            extra={"Link": f'<{record_link}>; rel="describedby"'},
            csp=dataset_csp,
        )

    def dataset(request: Request) -> Response:
        source, key = request.path_params["source"], request.path_params["key"]
        prefix = f"{base_iri}dataset/{quote(source, safe='')}/"
        iri = prefix + quote(key, safe="")
        db = ctx.read_db()
        entry, suffix = find_dataset(db, iri), None
        if entry is None:  # not a key of its own: maybe a key with a format suffix
            stem, suffix = split_suffix(key)
            if suffix is not None:
                iri = prefix + quote(stem, safe="")
                entry = find_dataset(db, iri)
        return dataset_response(request, iri, entry, suffix)

    def dataset_lookup(request: Request) -> Response:
        iri = request.query_params.get("iri")
        if not iri:
            raise BadRequestError("give the dataset IRI: /dataset?iri=<IRI>")
        return dataset_response(request, iri, find_dataset(ctx.read_db(), iri), None)

    def record(request: Request) -> Response:
        source, key = request.path_params["source"], request.path_params["key"]
        prefix = f"{base_iri}record/{quote(source, safe='')}/"
        db = ctx.read_db()
        iri, suffix = prefix + quote(key, safe=""), None
        row = find_record(db, iri)
        if row is None:
            stem, suffix = split_suffix(key)
            if suffix is not None:
                iri = prefix + quote(stem, safe="")
                row = find_record(db, iri)
        choice = select(request, suffix, ALL_FORMATS)
        if row is None:
            raise NotFoundError(f"no catalogue record {iri}")
        found = row
        nt = ctx.store.catalog_record_ntriples(found)
        tag = etag(
            "record",
            found.id,
            found.modified,
            found.status,
            found.content_hash,
            found.payload_sha,
            found.source_datestamp,
            found.job_id,
            choice.fmt.key,
        )

        def body() -> bytes | str:
            if choice.fmt is HTML:
                return pages.record_page(found, parse_ntriples(nt), web.links())
            if choice.fmt is NTRIPLES:
                return nt
            return serialize_graph(parse_ntriples(nt), choice.fmt)

        return respond(
            request,
            body,
            choice.fmt,
            tag,
            found.modified,
            negotiated=choice.negotiated,
            location=with_format(web.local(iri, "record"), choice.fmt),
        )

    def payload(request: Request) -> Response:
        sha = request.path_params["sha"]
        found = find_payload(ctx.read_db(), sha) if _SHA.match(sha) else None
        if found is None:
            raise NotFoundError(f"no payload {sha[:80]}")
        media_type, data = found
        tag = f'"{sha}"'
        headers = {
            "ETag": tag,
            "Cache-Control": "public, max-age=31536000, immutable",  # content-addressed
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox; default-src 'none'",  # harvested bytes
        }
        if not_modified(request.headers.get("if-none-match"), None, tag, None):
            return Response(None, 304, headers)
        # the media type as harvested: Starlette would append a charset to text/* types
        headers["Content-Type"] = media_type
        return Response(data, 200, headers)

    return [
        Route("/catalog", guarded(catalog), methods=["GET"]),
        Route("/catalog.{ext}", guarded(catalog), methods=["GET"]),
        Route("/dataset", guarded(dataset_lookup), methods=["GET"]),
        Route("/dataset/{source}/{key}", guarded(dataset), methods=["GET"]),
        Route("/record/{source}/{key}", guarded(record), methods=["GET"]),
        Route("/payload/{sha}", guarded(payload), methods=["GET"]),
    ]


__all__ = [
    "BadRequestError",
    "CatalogInfo",
    "Counter",
    "Cursor",
    "Page",
    "PageRequest",
    "decode_cursor",
    "find_dataset",
    "find_record",
    "load_page",
    "page_triples",
    "parse_since",
    "routes",
]
