"""HTML pages for people: a dataset, a catalogue record, a catalogue page, errors.

Harvested text is hostile. Every value that comes from a record goes through :func:`esc`
(``html.escape`` with quotes), links are only made of ``http``, ``https``, ``ftp`` and
``mailto`` IRIs (a ``javascript:`` access URL is shown as text), language tags are checked
before they become ``lang`` attributes, and the responses carry a Content-Security-Policy
that allows no script at all.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pyoxigraph import BlankNode, Literal, NamedNode, Triple

from aggregator.core.vocab import DCAT, DCT, FOAF, RDF_TYPE
from aggregator.serve.rdf_formats import PAGE_STYLE, PREFIXES, RDF_FORMATS
from aggregator.store.state import RecordRow

if TYPE_CHECKING:
    from aggregator.serve.catalog_data import CatalogInfo, Cursor, Page

VCARD = "http://www.w3.org/2006/vcard/ns#"
SKOS = "http://www.w3.org/2004/02/skos/core#"
_SAFE_SCHEMES = ("http", "https", "ftp", "mailto")
_LANG = re.compile(r"^[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*$")

Term = NamedNode | BlankNode | Literal


@dataclass(frozen=True, slots=True)
class Links:
    """Where our own pages are (the public base URL; IRIs may be under another base)."""

    base_url: str
    local: Callable[[str, str], str]  # (iri, "dataset" | "record") -> URL
    payload_iri: Callable[[str], str]

    def payload(self, sha: str) -> str:
        return f"{self.base_url}payload/{sha}"


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def safe_href(url: str) -> str | None:
    """The URL if it may become a link, else None (javascript:, data:, relative...)."""
    try:
        scheme = urlsplit(url.strip()).scheme.lower()
    except ValueError:
        return None
    return url if scheme in _SAFE_SCHEMES else None


def link(url: str, text: str | None = None) -> str:
    label = esc(text if text is not None else url)
    href = safe_href(url)
    return f'<a href="{esc(href)}">{label}</a>' if href else label


def _lang_attr(lit: Literal) -> str:
    lang = lit.language or ""
    return f' lang="{esc(lang)}"' if lang and _LANG.match(lang) else ""


def _short(iri: str) -> str:
    for prefix, ns in PREFIXES.items():
        if iri.startswith(ns) and len(iri) > len(ns):
            return f"{prefix}:{iri[len(ns) :]}"
    return iri


def _tail(iri: str) -> str:
    tail = re.split(r"[/#]", iri.rstrip("/#"))[-1]
    return tail or iri


class Graph:
    """A tiny subject index over a record's triples, enough to lay out a page."""

    def __init__(self, triples: Iterable[Triple]) -> None:
        self.index: dict[Term, dict[str, list[Term]]] = defaultdict(lambda: defaultdict(list))
        for t in triples:
            if not isinstance(t.subject, Triple) and not isinstance(t.object, Triple):
                self.index[t.subject][t.predicate.value].append(t.object)

    def objects(self, subject: Term, predicate: str) -> list[Term]:
        found = self.index.get(subject)
        return list(found.get(predicate, ())) if found else []

    def literals(self, subject: Term, predicate: str) -> list[Literal]:
        return sorted(
            (o for o in self.objects(subject, predicate) if isinstance(o, Literal)),
            key=lambda lit: (lit.language or "", lit.value),
        )

    def label(self, node: Term, preferred: Sequence[str] = ("en", "")) -> str:
        """A human label: title/name/label literals (English first), else the IRI's tail."""
        if isinstance(node, Literal):
            return node.value
        for prop in (DCT + "title", FOAF + "name", VCARD + "fn", SKOS + "prefLabel"):
            lits = self.literals(node, prop)
            for lang in preferred:
                for lit in lits:
                    if (lit.language or "") == lang:
                        return lit.value
            if lits:
                return lits[0].value
        return _tail(node.value) if isinstance(node, NamedNode) else "(unnamed)"

    def render(self, node: Term, short: bool = False) -> str:
        """One value: a literal with its language, a link for an IRI, a label for a blank.

        An IRI shows its label from the graph, else itself (``short``: its last segment)."""
        if isinstance(node, Literal):
            lang = f' <span class="lang">[{esc(node.language)}]</span>' if node.language else ""
            return f'<span{_lang_attr(node)} class="desc">{esc(node.value)}</span>{lang}'
        if isinstance(node, NamedNode):
            label = self.label(node)
            return link(node.value, label if short or label != _tail(node.value) else node.value)
        return esc(self.label(node))


def _page(title: str, body: str, alternates: Iterable[tuple[str, str]] = ()) -> str:
    alt = "".join(
        f'<link rel="alternate" type="{esc(mt)}" href="{esc(href)}">' for mt, href in alternates
    )
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title>{alt}<style>{PAGE_STYLE}</style></head><body>{body}</body></html>"
    )


def _alternates(url: str) -> list[tuple[str, str]]:
    """``url`` (no format suffix) with each RDF format as ``?format=``."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "format"]
    return [
        (f.media_type, urlunsplit(parts._replace(query=urlencode([*query, ("format", f.key)]))))
        for f in RDF_FORMATS
    ]


def _format_links(url: str) -> str:
    names = {"ttl": "Turtle", "jsonld": "JSON-LD", "rdf": "RDF/XML", "nt": "N-Triples"}
    parts = [
        f'<a href="{esc(href)}">{names.get(href.rsplit("=", 1)[-1], mt)}</a>'
        for mt, href in _alternates(url)
    ]
    return "<p>This description as " + ", ".join(parts) + ".</p>"


def _values(g: Graph, subject: Term, prop: str, sep: str = "<br>", short: bool = False) -> str:
    return sep.join(g.render(o, short) for o in g.objects(subject, prop))


def _dl(items: Iterable[tuple[str, str]]) -> str:
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items if v)
    return f"<dl>{rows}</dl>" if rows else ""


def _agent(g: Graph, node: Term) -> str:
    if isinstance(node, Literal):
        return g.render(node)
    names = g.literals(node, FOAF + "name")
    text = "; ".join(
        f"{esc(n.value)}"
        + (f' <span class="lang">[{esc(n.language)}]</span>' if n.language else "")
        for n in names
    )
    if isinstance(node, NamedNode):
        return f"{text} ({link(node.value)})" if text else link(node.value)
    return text or "(unnamed)"


def _contact(g: Graph, node: Term) -> str:
    if not isinstance(node, NamedNode | BlankNode):
        return g.render(node)
    parts = [esc(lit.value) for lit in g.literals(node, VCARD + "fn")]
    parts += [esc(lit.value) for lit in g.literals(node, VCARD + "organization-name")]
    for prop in ("hasEmail", "hasURL", "hasTelephone"):
        for o in g.objects(node, VCARD + prop):
            if isinstance(o, NamedNode):
                parts.append(link(o.value, o.value.removeprefix("mailto:")))
            elif isinstance(o, Literal):
                parts.append(esc(o.value))
            else:  # vcard:hasTelephone [ vcard:hasValue <tel:...> ]
                parts += [g.render(v) for v in g.objects(o, VCARD + "hasValue")]
    if isinstance(node, NamedNode) and not parts:
        parts.append(link(node.value))
    return ", ".join(parts)


def _distribution(g: Graph, node: Term, number: int) -> str:
    title = g.literals(node, DCT + "title")
    if title:
        head = esc(title[0].value)
    elif isinstance(node, NamedNode):
        head = esc(g.label(node))
    else:
        head = f"Distribution {number}"
    props = [
        ("Description", _values(g, node, DCT + "description")),
        ("Access URL", _values(g, node, DCAT + "accessURL")),
        ("Download URL", _values(g, node, DCAT + "downloadURL")),
        ("Format", _values(g, node, DCT + "format", ", ", short=True)),
        ("Media type", _values(g, node, DCAT + "mediaType", ", ", short=True)),
        ("Size (bytes)", _values(g, node, DCAT + "byteSize")),
        ("Licence", _values(g, node, DCT + "license")),
        ("Access service", _values(g, node, DCAT + "accessService")),
    ]
    return f"<li><strong>{head}</strong>{_dl(props)}</li>"


_SHOWN = (
    {DCT + p for p in ("title", "description", "publisher", "issued", "modified", "identifier")}
    | {DCAT + p for p in ("keyword", "theme", "contactPoint", "distribution")}
    | {RDF_TYPE}
)


def dataset_page(iri: str, row: RecordRow, triples: Sequence[Triple], links: Links) -> str:
    g = Graph(triples)
    ds = NamedNode(iri)
    titles = g.literals(ds, DCT + "title")
    main = g.label(ds)
    # one <h1> (the preferred title); the title in other languages below it
    first = next((t for t in titles if t.value == main), titles[0] if titles else None)
    title_html = (
        "".join(
            (f"<h1{_lang_attr(t)}>" if t is first else f'<p class="also-titled"{_lang_attr(t)}>')
            + esc(t.value)
            + (f' <span class="lang">[{esc(t.language)}]</span>' if t.language else "")
            + ("</h1>" if t is first else "</p>")
            for t in sorted(titles, key=lambda t: t is not first)
        )
        or f"<h1>{esc(main)}</h1>"
    )
    descriptions = "".join(
        f'<div class="desc"{_lang_attr(d)}>'
        + (f'<span class="lang">[{esc(d.language)}]</span> ' if d.language else "")
        + f"{esc(d.value)}</div>"
        for d in g.literals(ds, DCT + "description")
    )
    keywords = ", ".join(
        esc(k.value) + (f' <span class="lang">[{esc(k.language)}]</span>' if k.language else "")
        for k in g.literals(ds, DCAT + "keyword")
    )
    facts = [
        ("IRI", link(iri)),
        ("Type", ", ".join(esc(_short(t.value)) for t in g.objects(ds, RDF_TYPE))),
        ("Identifier", _values(g, ds, DCT + "identifier", ", ")),
        ("Keywords", keywords),
        ("Themes", _values(g, ds, DCAT + "theme", ", ", short=True)),
        ("Publisher", "<br>".join(_agent(g, p) for p in g.objects(ds, DCT + "publisher"))),
        ("Contact", "<br>".join(_contact(g, c) for c in g.objects(ds, DCAT + "contactPoint"))),
        ("Issued", _values(g, ds, DCT + "issued")),
        ("Modified", _values(g, ds, DCT + "modified")),
    ]
    others = [
        (_short(prop), "<br>".join(g.render(o) for o in objs))
        for prop, objs in sorted(g.index.get(ds, {}).items())
        if prop not in _SHOWN
    ]
    dists = "".join(
        _distribution(g, d, n) for n, d in enumerate(g.objects(ds, DCAT + "distribution"), 1)
    )
    record_url = links.local(row.record_iri, "record")
    provenance = [
        ("Harvested from source", esc(row.source)),
        ("Fetched from", link(row.url) if row.url else ""),
        ("Source datestamp", esc(row.source_datestamp or "")),
        ("In this catalogue since", esc(row.first_seen)),
        ("Last changed here", esc(row.modified)),
        ("Catalogue record", link(record_url, row.record_iri)),
        ("Original payload", link(links.payload(row.payload_sha)) if row.payload_sha else ""),
    ]
    page_url = links.local(iri, "dataset")
    body = (
        title_html
        + descriptions
        + _dl(facts)
        + (f"<h2>Distributions</h2><ul>{dists}</ul>" if dists else "")
        + (f"<h2>More properties</h2>{_dl(others)}" if others else "")
        + f"<h2>Provenance</h2>{_dl(provenance)}"
        + _format_links(page_url)
        + f'<p><a href="{esc(links.base_url)}catalog">The catalogue</a></p>'
    )
    return _page(main, body, _alternates(page_url))


def record_page(row: RecordRow, triples: Sequence[Triple], links: Links) -> str:
    g = Graph(triples)
    rec = NamedNode(row.record_iri)
    dataset = ""
    if row.dataset_iri:
        dataset = link(links.local(row.dataset_iri, "dataset"), row.dataset_iri)
    facts = [
        ("IRI", link(row.record_iri)),
        ("Status", esc(row.status)),
        ("Dataset", dataset),
        ("Source", esc(row.source)),
        ("Identifier at the source", esc(row.local_id)),
        ("Fetched from", link(row.url) if row.url else ""),
        ("Source format", esc(row.format or "")),
        ("Source datestamp", esc(row.source_datestamp or "")),
        ("First seen", esc(row.first_seen)),
        ("Modified", esc(row.modified)),
        ("Harvest job", esc(row.job_id if row.job_id is not None else "")),
        ("Content hash (SHA-256)", esc(row.content_hash or "")),
        ("Original payload", link(links.payload(row.payload_sha)) if row.payload_sha else ""),
    ]
    others = [
        (_short(prop), "<br>".join(g.render(o) for o in objs))
        for prop, objs in sorted(g.index.get(rec, {}).items())
    ]
    page_url = links.local(row.record_iri, "record")
    body = f"<h1>Catalogue record</h1>{_dl(facts)}<h2>As RDF</h2>{_dl(others)}" + _format_links(
        page_url
    )
    return _page(f"Catalogue record {row.local_id}", body, _alternates(page_url))


def gone_page(iri: str, row: RecordRow, links: Links) -> str:
    record_url = links.local(row.record_iri, "record")
    body = (
        "<h1>410 Gone</h1>"
        f"<p>The dataset {esc(iri)} was withdrawn from this catalogue on {esc(row.modified)}.</p>"
        f"<p>Its catalogue record: {link(record_url, row.record_iri)}</p>"
    )
    return _page("Dataset withdrawn", body)


def error_page(status: int, message: str) -> str:
    return _page(f"{status}", f"<h1>{status}</h1><p>{esc(message)}</p>")


def catalog_page(
    info: CatalogInfo, page: Page, url: Callable[[Cursor], str], plain: str, links: Links
) -> str:
    """One page of the catalogue; ``url`` makes paging links, ``plain`` is this page's URL
    without a format (for the links to its RDF forms)."""
    from aggregator.serve.catalog_data import FIRST, LAST
    from aggregator.serve.rdf_formats import parse_ntriples

    items = []
    for entry in page.entries:
        row = entry.row
        if not row.dataset_iri:
            continue
        g = Graph(parse_ntriples(entry.ntriples))
        label = g.label(NamedNode(row.dataset_iri))
        items.append(
            f"<li>{link(links.local(row.dataset_iri, 'dataset'), label)}"
            f' <span class="lang">{esc(row.source)} · {esc(row.modified)}</span></li>'
        )
    nav = [("first", url(FIRST))]
    if page.previous is not None:
        nav.append(("previous", url(page.previous)))
    if page.next is not None:
        nav.append(("next", url(page.next)))
    nav.append(("last", url(LAST)))
    nav_html = "<nav>" + "".join(f'<a href="{esc(h)}">{n}</a>' for n, h in nav) + "</nav>"
    body = (
        f"<h1>{esc(info.title)}</h1><p>{esc(info.description)}</p>"
        f"<p>{page.total} dataset(s)"
        + (f" changed since {esc(page.request.since)}" if page.request.since else "")
        + f".</p>{nav_html}<ul>{''.join(items)}</ul>{nav_html}"
        + _format_links(plain)
    )
    return _page(info.title, body, _alternates(plain))
