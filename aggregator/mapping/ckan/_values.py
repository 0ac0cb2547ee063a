"""How one CKAN field value becomes RDF: the field kinds of ``mappings/ckan.toml``.

Each kind is a function ``(graph, subject, predicate, value)`` that adds the triples for
one field value to the :class:`Graph` (and a finding to ``graph.findings`` where a value
cannot be written as given). Values are written as the package says them: literals where
CKAN has strings, IRIs only where a value is an absolute URL; the ``dcat`` normalisation rules
that run afterwards turn literals into vocabulary terms.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pyoxigraph import BlankNode, Literal, NamedNode

from aggregator.core.models import Finding, MappedDataset, RawRecord, Severity
from aggregator.mapping.base import content_hash
from aggregator.mapping.ckan._files import emit_checksum, emit_format, emit_size
from aggregator.mapping.ckan._geometry import (
    GeometryError,
    footprint,
    looks_like_geometry,
)
from aggregator.mapping.ckan._graph import (
    _CONTACT_TYPES,
    ACCESS_URL,
    BBOX,
    CENTROID,
    CONCEPT,
    DATE_TIME,
    DCT_TYPE,
    DISTRIBUTION,
    END,
    FOAF_AGENT,
    FOAF_HOMEPAGE,
    FOAF_MBOX,
    FOAF_NAME,
    GEOJSON_LITERAL,
    GEOMETRY,
    KEYWORD,
    LOCATION,
    NOTATION,
    PERIOD,
    PREF_LABEL,
    PROVENANCE,
    RELATION,
    START,
    VCARD_EMAIL,
    VCARD_FN,
    VCARD_KIND,
    VCARD_TEL,
    VCARD_URL,
    WKT_LITERAL,
    A,
    Emit,
    Graph,
    Subject,
    _items,
    is_url,
    tagged,
    text_of,
)
from aggregator.mapping.dcat.mapper import _themes, canonical_quads
from aggregator.mapping.dcat.rules import RuleSet, findings_from
from aggregator.mapping.dcat.vocab import load_vocabularies


def emit_text(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    for literal in tagged(value):
        g.add(s, p, literal)


def emit_literal(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    for item in _items(value):
        text = (
            text_of(item.get("label") or item.get("notation"))
            if isinstance(item, dict)
            else text_of(item)
        )
        if text is not None:
            g.add(s, p, Literal(text))


def emit_iri(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    for item in _items(value):
        if isinstance(item, dict):
            item = item.get("resource") or item.get("uri") or item.get("url") or item.get("label")
        text = text_of(item)
        if text is not None:
            g.add(s, p, NamedNode(text) if is_url(text) else Literal(text))


def emit_source(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    """CKAN's ``source`` (ckanext-dcat's reading of ``dct:source``): in practice the URL of the
    page or system the data came from, which no record describes. DCAT-AP 3.0.1 gives
    ``dct:source`` the range dcat:Dataset (title and description mandatory), so such a URL is
    written as ``prov:wasDerivedFrom`` (PROV-DC's mapping of dct:source: the same derivation,
    no dataset class asserted) and ``dct:relation`` (DCAT-AP's related resource, so DCAT-AP
    readers keep the link); a text that is no URL is a lineage statement, ``dct:provenance``.
    docs/mappings/ckan.md, "source"."""
    urls, texts = [], []
    for item in _items(value):
        if isinstance(item, dict):
            item = item.get("resource") or item.get("uri") or item.get("url") or item.get("label")
        text = text_of(item)
        if text is None:
            continue
        if is_url(text):
            iri = NamedNode(text)
            g.add(s, p, iri)
            g.add(s, RELATION, iri)
            urls.append(text)
        else:
            g.add(s, PROVENANCE, Literal(text))
            texts.append(text)
    written = [
        f"{', '.join(f'<{u}>' for u in urls)} as prov:wasDerivedFrom and dct:relation"
        if urls
        else "",
        f"{', '.join(repr(t) for t in texts)} as dct:provenance" if texts else "",
    ]
    if urls or texts:
        g.note(
            s,
            "ckan-source-as-derivation",
            f"source written {' and '.join(w for w in written if w)}: DCAT-AP 3.0.1's dct:source "
            "must be a dcat:Dataset the record describes, and a CKAN source is a link or a text",
        )


def emit_sample(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    """``sample``: the URL of a sample file. DCAT-AP 3.0.1 wants a ``dcat:Distribution`` (whose
    access URL is mandatory), so the URL is that distribution and its own access URL; a text
    that is no URL is a literal (which the shapes report: nothing to build a sample from)."""
    for item in _items(value):
        if isinstance(item, dict):
            item = item.get("resource") or item.get("uri") or item.get("url")
        text = text_of(item)
        if text is None:
            continue
        if not is_url(text):
            g.add(s, p, Literal(text))
            continue
        sample = NamedNode(text)
        g.add(s, p, sample)
        g.add(sample, A, DISTRIBUTION)
        g.add(sample, ACCESS_URL, sample)


def emit_labelled(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    for item in _items(value):
        if isinstance(item, dict) and ("label" in item or "resource" in item or "uri" in item):
            resource = text_of(item.get("resource") or item.get("uri"))
            if resource is not None and is_url(resource):
                g.add(s, p, NamedNode(resource))
                continue
            for literal in tagged(item.get("label")):
                g.add(s, p, literal)
            continue
        if isinstance(item, dict):  # {lang: text}
            for literal in tagged(item):
                g.add(s, p, literal)
            continue
        text = text_of(item)
        if text is not None:
            g.add(s, p, NamedNode(text) if is_url(text) else Literal(text))


def emit_date(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    for item in _items(value):
        text = text_of(item)
        if text is not None:
            g.add(s, p, Literal(text))


_TIMESTAMP = re.compile(r"-?\d{4,}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?P<zone>Z|[+-]\d\d:\d\d)?")


def emit_timestamp(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    """CKAN's own ``metadata_created`` / ``metadata_modified``: an ``xsd:dateTime``. CKAN
    stores them in UTC and writes them without a zone (``2024-06-18T07:55:02.113480``), so a
    timestamp without one gets ``Z``; any other text is written as given (a plain literal, which
    the dcat rules type or report like any date)."""
    text = text_of(value)
    if text is None:
        return
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        g.add(s, p, Literal(text))
        return
    g.add(s, p, Literal(text if match.group("zone") else text + "Z", datatype=DATE_TIME))


def emit_geometry(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    """The ``spatial`` value of ckanext-spatial (GeoJSON) -> a dct:Location with
    ``locn:geometry``, ``dcat:bbox`` and, for a point, ``dcat:centroid`` (see
    :mod:`._geometry`). A place name or place IRI is written as a ``labelled`` value; a value
    meant as a geometry that is not one is kept as the WARNING finding ``ckan-spatial-invalid``
    quoting it, never dropped in silence."""
    if not looks_like_geometry(value):
        emit_labelled(g, s, p, value)
        return
    try:
        found = footprint(value)
    except GeometryError as err:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        shown = text if len(text) <= 300 else text[:300] + f"... ({len(text):,} characters)"
        g.note(
            s,
            "ckan-spatial-invalid",
            f"the spatial value is not a GeoJSON geometry ({err}); not mapped: {shown}",
            Severity.WARNING,
        )
        return
    node = BlankNode()
    g.add(s, p, node)
    g.add(node, A, LOCATION)
    g.add(node, GEOMETRY, Literal(found.geojson, datatype=GEOJSON_LITERAL))
    g.add(node, BBOX, Literal(found.bbox_wkt, datatype=WKT_LITERAL))
    if found.centroid_wkt is not None:
        g.add(node, CENTROID, Literal(found.centroid_wkt, datatype=WKT_LITERAL))


def _mailto(email: str) -> NamedNode | Literal:
    address = email.removeprefix("mailto:").strip()
    if "@" in address and is_url("http://" + address.replace("@", "at")):
        return NamedNode("mailto:" + address)
    return Literal(email)


def emit_agent(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    for item in _items(value):
        if not isinstance(item, dict):
            text = text_of(item)
            if text is not None:
                g.add(s, p, NamedNode(text) if is_url(text) else Literal(text))
            continue
        resource = text_of(item.get("resource") or item.get("uri"))
        name = tagged(item.get("title") or item.get("name") or item.get("display_name"))
        names = list(name)
        email = text_of(item.get("email") or item.get("mbox"))
        homepage = text_of(item.get("url") or item.get("homepage"))
        kind = text_of(item.get("type")) if item.get("is_organization") is None else None
        if not names and not email and not homepage and resource is None:
            continue
        node: Subject = NamedNode(resource) if resource and is_url(resource) else BlankNode()
        g.add(s, p, node)
        if not names and not email and not homepage and not kind:
            continue  # an IRI alone: the agent is described elsewhere
        if not names and email:
            # plain CKAN's author_email without an author: the address is the only name the
            # package gives (DCAT-AP 3.0.1: an agent's foaf:name is mandatory)
            names = [Literal(email.removeprefix("mailto:"))]
            g.note(s, "ckan-agent-named-by-email", f"agent {email!r} has no name: named by e-mail")
        g.add(node, A, FOAF_AGENT)
        for literal in names:
            g.add(node, FOAF_NAME, literal)
        if email:
            g.add(node, FOAF_MBOX, _mailto(email))
        if homepage:
            g.add(
                node, FOAF_HOMEPAGE, NamedNode(homepage) if is_url(homepage) else Literal(homepage)
            )
        if kind and is_url(kind):
            g.add(node, DCT_TYPE, NamedNode(kind))


def emit_contact(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    for item in _items(value):
        if not isinstance(item, dict):
            text = text_of(item)
            if text is not None:
                g.add(s, p, _mailto(text) if "@" in text and " " not in text else Literal(text))
            continue
        resource = text_of(item.get("resource") or item.get("uri"))
        names = list(tagged(item.get("name") or item.get("fn")))
        email = text_of(item.get("email"))
        url = text_of(item.get("url"))
        phone = text_of(item.get("phone") or item.get("telephone"))
        if not names and not email and not url and not phone and resource is None:
            continue
        node: Subject = NamedNode(resource) if resource and is_url(resource) else BlankNode()
        g.add(s, p, node)
        g.add(node, A, VCARD_KIND)
        kind = _CONTACT_TYPES.get(str(item.get("type") or "").lower().rsplit("#", 1)[-1])
        if kind:
            g.add(node, A, NamedNode(kind))
        for literal in names:
            g.add(node, VCARD_FN, literal)
        if email:
            g.add(node, VCARD_EMAIL, _mailto(email))
        if url:
            g.add(node, VCARD_URL, NamedNode(url) if is_url(url) else Literal(url))
        if phone:
            tel = "tel:" + "".join(c for c in phone if c.isdigit() or c == "+")
            g.add(node, VCARD_TEL, NamedNode(tel) if len(tel) > 4 else Literal(phone))


def emit_period(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    for item in _items(value):
        if not isinstance(item, dict):
            continue
        start, end = text_of(item.get("start_date")), text_of(item.get("end_date"))
        if start is None and end is None:
            continue
        node = BlankNode()
        g.add(s, p, node)
        g.add(node, A, PERIOD)
        if start is not None:
            g.add(node, START, Literal(start))
        if end is not None:
            g.add(node, END, Literal(end))


def emit_tags(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    if isinstance(value, dict):  # {lang: [tags]} (ckanext-fluent)
        emit_text(g, s, p, value)
        return
    for item in _items(value):
        if isinstance(item, dict):
            if item.get("state") not in (None, "active"):
                continue
            item = item.get("display_name") or item.get("name")
        text = text_of(item)
        if text is not None:
            g.add(s, p, Literal(text))


def emit_theme(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    """Theme IRIs (data.europa.eu's ``theme``). A theme given as text is the EU data theme of
    that name or code when there is one; other text is no concept (DCAT-AP 3.0.1 wants a
    concept IRI), so it is kept as a ``dcat:keyword`` and noted in the INFO finding
    ``ckan-theme-as-keyword``."""
    themes = load_vocabularies()["data-theme"]
    for item in _items(value):
        if isinstance(item, dict):
            item = item.get("resource") or item.get("uri") or item.get("label")
        text = text_of(item)
        if text is None:
            continue
        found = NamedNode(text) if is_url(text) else themes.lookup(text)
        if found is not None:
            g.add(s, p, found)
            continue
        g.add(s, KEYWORD, Literal(text))
        g.note(s, "ckan-theme-as-keyword", f"theme {text!r} is no IRI: kept as a dcat:keyword")


def emit_groups(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    """CKAN groups, the portal's own categories: a group's ``uri`` is its theme IRI; a group
    whose name or title is an EU data theme (``economy-and-finance``, ``Economy and finance``,
    ``ECON``) is that theme; another group is a ``skos:Concept`` of the portal with an IRI
    minted for the source and the group's name (``{base}group/{source}/{name}``), its title
    as ``skos:prefLabel`` and its name as ``skos:notation`` (a theme must be a concept IRI in
    DCAT-AP 3.0.1; the categorisation step reads the labels). Without a way to mint, the title
    is a ``dcat:keyword``."""
    themes = load_vocabularies()["data-theme"]
    for item in _items(value):
        if isinstance(item, dict):
            iri = text_of(item.get("uri"))
            if iri is not None and is_url(iri):
                g.add(s, p, NamedNode(iri))
                continue
            name = text_of(item.get("name"))
            title = text_of(item.get("title")) or text_of(item.get("display_name"))
        else:
            name = title = text_of(item)
        if name is None and title is None:
            continue
        if name is not None and title == name and is_url(name):
            g.add(s, p, NamedNode(name))
            continue
        terms = (themes.lookup(t) for t in (name, title) if t is not None)
        found = next((term for term in terms if term is not None), None)
        if found is not None:
            g.add(s, p, found)
            continue
        label = title or name
        assert label is not None
        if g.mint is None or name is None:
            g.add(s, KEYWORD, Literal(label))
            g.note(s, "ckan-theme-as-keyword", f"group {label!r}: kept as a dcat:keyword")
            continue
        concept = NamedNode(g.mint("group", name))
        g.add(s, p, concept)
        g.add(concept, A, CONCEPT)
        g.add(concept, PREF_LABEL, Literal(label))
        g.add(concept, NOTATION, Literal(name))


KINDS: Mapping[str, Emit] = {
    "format": emit_format,
    "text": emit_text,
    "literal": emit_literal,
    "date": emit_date,
    "timestamp": emit_timestamp,
    "geometry": emit_geometry,
    "theme": emit_theme,
    "sample": emit_sample,
    "iri": emit_iri,
    "source": emit_source,
    "labelled": emit_labelled,
    "agent": emit_agent,
    "contact": emit_contact,
    "period": emit_period,
    "tags": emit_tags,
    "groups": emit_groups,
    "size": emit_size,
    "checksum": emit_checksum,
}


def finish(
    rules: RuleSet,
    raw: RawRecord,
    iri: NamedNode,
    g: Graph,
    findings: list[Finding],
) -> MappedDataset:
    """Normalise the built graph with the ``dcat`` rule table and make the mapped dataset
    (canonical N-Triples, content hash, themes): the last step of the JSON mappers."""
    quads, trace, ground = rules.apply_split(g.quads)
    findings.extend(g.findings)
    findings.extend(findings_from(trace, rules))
    ntriples = canonical_quads(quads, ground)
    return MappedDataset(
        local_id=raw.local_id,
        dataset_iri=iri.value,
        ntriples=ntriples,
        content_hash=content_hash(ntriples),
        datestamp=raw.datestamp,
        findings=tuple(findings),
        themes=_themes(ntriples, iri),
    )
