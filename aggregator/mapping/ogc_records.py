"""The ``ogc-records`` mapper: one OGC API - Records (Part 1) record feature -> DCAT-AP 3.

A GeoJSON feature (``{"id", "type": "Feature", "geometry", "time", "properties", "links"}``):

* ``id`` -> ``dct:identifier`` and the dataset IRI (minted under the base IRI from the id);
* ``properties`` fields by the table ``mappings/ogc-records.toml`` (title, description,
  keywords, created, updated, ...), text tagged with the record's ``language`` when it gives one;
* ``themes`` -> ``dcat:theme`` concepts: the concept's ``url`` as its IRI, ``skos:prefLabel``
  (title, else id), ``skos:notation`` (id), ``skos:inScheme`` (scheme); a concept without a
  ``url`` cannot be a theme (DCAT-AP 3.0.1: an IRI): its label is a ``dcat:keyword`` and the
  concept a ``dct:subject`` blank node, with an INFO finding ``ogc-theme-without-iri``;
* ``contacts`` by role -> ``dct:publisher`` / ``dct:creator`` agents or ``dcat:contactPoint``;
* ``links`` by relation -> distributions, landing page, documentation pages, licence;
* ``formats`` -> ``dct:format`` of the distribution with the same media type;
* ``license`` / ``rights`` -> ``dct:license`` / ``dct:rights`` of every distribution;
* ``geometry`` (or ``bbox``, or ``extent.spatial.bbox``) -> ``dct:spatial`` with a
  ``dcat:bbox`` WKT polygon; ``time`` (or ``extent.temporal.interval``) -> ``dct:temporal``;
* ``language`` / ``languages`` -> ``dct:language``; ``externalIds`` -> ``adms:identifier``.

The graph is then normalised with the ``dcat`` rule table, as for CKAN. A feature that is not
an object, has no ``id``, no ``properties`` object or no title is a ``MappingError``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pyoxigraph import BlankNode, Literal, NamedNode

from aggregator.core.errors import ConfigError, MappingError
from aggregator.core.models import Finding, MappedDataset, Severity, Stage
from aggregator.core.resources import bundled
from aggregator.core.vocab import DCAT, DCT, FOAF, RDFS, SKOS
from aggregator.mapping.base import Mapper, MappingContext, mint_iri
from aggregator.mapping.ckan import (
    KINDS,
    A,
    FieldRow,
    Graph,
    Subject,
    emit_agent,
    emit_contact,
    field_rows,
    file_type,
    finish,
    is_url,
    text_of,
)
from aggregator.mapping.dcat.rule_table import DEFAULT_RULES_PATH, load_rules
from aggregator.mapping.dcat.rules import RuleSet
from aggregator.mapping.dcat.vocab import load_vocabularies
from aggregator.mapping.payload import ParsedPayload

DEFAULT_TABLE_PATH = bundled("mappings", "ogc-records.toml")
WKT = NamedNode("http://www.opengis.net/ont/geosparql#wktLiteral")
ROLES = ("distribution", "landing-page", "page", "licence", "ignore")


def _n(term: str) -> NamedNode:
    return NamedNode(term)


DATASET, DISTRIBUTION = _n(DCAT + "Dataset"), _n(DCAT + "Distribution")
P = {
    "distribution": _n(DCAT + "distribution"),
    "accessURL": _n(DCAT + "accessURL"),
    "downloadURL": _n(DCAT + "downloadURL"),
    "mediaType": _n(DCAT + "mediaType"),
    "byteSize": _n(DCAT + "byteSize"),
    "landingPage": _n(DCAT + "landingPage"),
    "theme": _n(DCAT + "theme"),
    "keyword": _n(DCAT + "keyword"),
    "subject": _n(DCT + "subject"),
    "bbox": _n(DCAT + "bbox"),
    "centroid": _n(DCAT + "centroid"),
    "startDate": _n(DCAT + "startDate"),
    "endDate": _n(DCAT + "endDate"),
    "title": _n(DCT + "title"),
    "format": _n(DCT + "format"),
    "license": _n(DCT + "license"),
    "rights": _n(DCT + "rights"),
    "spatial": _n(DCT + "spatial"),
    "temporal": _n(DCT + "temporal"),
    "language": _n(DCT + "language"),
    "identifier": _n(DCT + "identifier"),
    "publisher": _n(DCT + "publisher"),
    "creator": _n(DCT + "creator"),
    "contactPoint": _n(DCAT + "contactPoint"),
    "page": _n(FOAF + "page"),
    "prefLabel": _n(SKOS + "prefLabel"),
    "notation": _n(SKOS + "notation"),
    "inScheme": _n(SKOS + "inScheme"),
    "adms_identifier": _n("http://www.w3.org/ns/adms#identifier"),
    "label": _n(RDFS + "label"),
}
LOCATION, PERIOD = _n(DCT + "Location"), _n(DCT + "PeriodOfTime")


@dataclass(frozen=True, slots=True)
class RecordsTable:
    properties: tuple[FieldRow, ...]
    links: Mapping[str, str]
    contact_roles: Mapping[str, NamedNode]


@lru_cache(maxsize=4)
def load_table(path: Path = DEFAULT_TABLE_PATH) -> RecordsTable:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"cannot read the OGC API - Records table {path}: {err}") from err
    links = dict(data.get("links", {}))
    bad = sorted(r for r, role in links.items() if role not in ROLES)
    if bad:
        raise ConfigError(f"{path}: [links] {', '.join(bad)}: the role must be one of {ROLES}")
    roles = {k: {"dct:publisher": P["publisher"], "dct:creator": P["creator"],
                 "dcat:contactPoint": P["contactPoint"]}.get(v) for k, v in
             data.get("contact-roles", {}).items()}  # fmt: skip
    if any(v is None for v in roles.values()):
        raise ConfigError(f"{path}: [contact-roles] values must be dct:publisher, dct:creator"
                          " or dcat:contactPoint")  # fmt: skip
    return RecordsTable(
        field_rows(data.get("properties"), data.get("prefixes", {}), "[properties]"),
        MappingProxyType(links),
        MappingProxyType({k: v for k, v in roles.items() if v is not None}),
    )


def _coordinates(value: Any) -> Iterator[tuple[float, float]]:
    if (
        isinstance(value, list)
        and len(value) >= 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value[:2])
    ):
        yield float(value[0]), float(value[1])
        return
    if isinstance(value, list):
        for item in value:
            yield from _coordinates(item)


def bbox_of(feature: Mapping[str, Any], props: Mapping[str, Any]) -> tuple[float, ...] | None:
    """(minx, miny, maxx, maxy) from the geometry, the feature's bbox or extent.spatial."""
    geometry = feature.get("geometry")
    if isinstance(geometry, dict):
        points = list(_coordinates(geometry.get("coordinates")))
        if points:
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            return min(xs), min(ys), max(xs), max(ys)
    extent = props.get("extent")
    spatial = extent.get("spatial") if isinstance(extent, dict) else None
    boxes = [feature.get("bbox")]
    if isinstance(spatial, dict) and isinstance(spatial.get("bbox"), list):
        boxes.extend(spatial["bbox"])
    for box in boxes:
        if (
            isinstance(box, list)
            and len(box) in (4, 6)
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in box)
        ):
            half = len(box) // 2
            return float(box[0]), float(box[1]), float(box[half]), float(box[half + 1])
    return None


def wkt_polygon(box: tuple[float, ...]) -> str:
    x0, y0, x1, y1 = (f"{v:g}" for v in box)
    return f"POLYGON(({x0} {y0}, {x1} {y0}, {x1} {y1}, {x0} {y1}, {x0} {y0}))"


def interval_of(
    feature: Mapping[str, Any], props: Mapping[str, Any]
) -> tuple[str | None, str | None]:
    time = feature.get("time")
    if isinstance(time, dict):
        interval = time.get("interval")
        if isinstance(interval, list) and len(interval) == 2:
            return _open(interval[0]), _open(interval[1])
        for key in ("date", "timestamp"):
            if isinstance(time.get(key), str):
                return time[key], time[key]
    extent = props.get("extent")
    temporal = extent.get("temporal") if isinstance(extent, dict) else None
    if isinstance(temporal, dict):
        intervals = temporal.get("interval")
        if isinstance(intervals, list) and intervals and isinstance(intervals[0], list):
            first = intervals[0]
            if len(first) == 2:
                return _open(first[0]), _open(first[1])
    return None, None


def _open(value: Any) -> str | None:
    text = text_of(value)
    return None if text in (None, "..") else text


def _language(props: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """The record's language code (for tagging its text) and every language it names."""
    codes = []
    for entry in [props.get("language"), *(props.get("languages") or [])]:
        code = text_of(entry.get("code")) if isinstance(entry, dict) else text_of(entry)
        if code:
            codes.append(code)
    return (codes[0] if codes else None), codes


def _tag(value: Any, lang: str | None) -> Any:
    if lang and isinstance(value, str):
        return {lang: value}
    if lang and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {lang: value}
    return value


def _media(text: str) -> str:
    return text.split(";")[0].strip().lower()


class OgcRecordsMapper(Mapper):
    """An OGC API - Records record (GeoJSON feature) -> a DCAT-AP 3 graph."""

    name = "ogc-records"

    def __init__(self, table_path: Path | None = None, rules_path: Path | None = None) -> None:
        self.table = load_table(table_path or DEFAULT_TABLE_PATH)
        self.rules: RuleSet = load_rules(rules_path or DEFAULT_RULES_PATH)
        self.licences = load_vocabularies()["licence"]

    def map_payload(self, payload: ParsedPayload, ctx: MappingContext) -> list[MappedDataset]:
        raw = payload.raw
        feature = payload.json()
        if not isinstance(feature, dict):
            raise MappingError(f"{raw.local_id!r} is not a record (a GeoJSON feature object)")
        fid = feature.get("id")
        fid = str(fid) if isinstance(fid, int) and not isinstance(fid, bool) else fid
        if not isinstance(fid, str) or not fid.strip():
            raise MappingError(f"{raw.local_id!r}: the feature has no id")
        props = feature.get("properties")
        if not isinstance(props, dict):
            raise MappingError(f"record {fid!r}: 'properties' is not an object")
        if text_of(props.get("title")) is None:
            raise MappingError(f"record {fid!r} has no title (dct:title is mandatory)")
        iri = NamedNode(mint_iri(ctx, "dataset", fid))
        g = Graph()
        g.add(iri, A, DATASET)
        g.add(iri, P["identifier"], Literal(fid))
        lang, languages = _language(props)
        if lang is not None:
            try:
                Literal("x", language=lang)
            except ValueError:
                lang = None
        for row in self.table.properties:
            value = props.get(row.field)
            if value in (None, "", [], {}):
                continue
            KINDS[row.kind](
                g, iri, row.property, _tag(value, lang) if row.kind in ("text", "tags") else value
            )
        for code in languages:
            g.add(iri, P["language"], Literal(code))
        for ext in props.get("externalIds") or []:
            if isinstance(ext, dict) and text_of(ext.get("value")):
                g.add(iri, P["adms_identifier"], Literal(str(ext["value"]).strip()))
        findings: list[Finding] = []
        self._themes(g, iri, props.get("themes"), lang, findings)
        self._contacts(g, iri, props.get("contacts"))
        self._extent(g, iri, feature, props)
        self._links(g, iri, feature.get("links"), props, findings)
        return [finish(self.rules, raw, iri, g, findings)]

    def _themes(
        self, g: Graph, iri: NamedNode, themes: Any, lang: str | None, findings: list[Finding]
    ) -> None:
        kept: list[str] = []  # concepts without an IRI: keywords and subjects
        for theme in themes if isinstance(themes, list) else []:
            if not isinstance(theme, dict):
                continue
            scheme = text_of(theme.get("scheme"))
            for concept in theme.get("concepts") or []:
                if not isinstance(concept, dict):
                    continue
                cid = text_of(concept.get("id"))
                url = text_of(concept.get("url"))
                label = text_of(concept.get("title")) or cid
                if label is None and url is None:
                    continue
                node: Subject
                if url and is_url(url):
                    node = NamedNode(url)
                    g.add(iri, P["theme"], node)
                else:  # DCAT-AP 3.0.1: a theme is an IRI; the concept stays as a subject
                    node = BlankNode()
                    g.add(iri, P["subject"], node)
                    g.add(node, A, _n(SKOS + "Concept"))
                    if label is not None:
                        g.add(
                            iri,
                            P["keyword"],
                            Literal(label, language=lang) if lang else Literal(label),
                        )
                        kept.append(label)
                if label is not None:
                    g.add(node, P["prefLabel"], Literal(label))
                if cid is not None:
                    g.add(node, P["notation"], Literal(cid))
                if scheme is not None and is_url(scheme):
                    g.add(node, P["inScheme"], NamedNode(scheme))
        if kept:
            findings.append(
                Finding(
                    Stage.MAP,
                    Severity.INFO,
                    "ogc-theme-without-iri",
                    "theme concept(s) without a url kept as dcat:keyword and dct:subject"
                    " (a dcat:theme is an IRI in DCAT-AP 3.0.1): " + ", ".join(kept),
                    location=iri.value,
                    path=DCAT + "theme",
                )
            )

    def _contacts(self, g: Graph, iri: NamedNode, contacts: Any) -> None:
        for contact in contacts if isinstance(contacts, list) else []:
            if not isinstance(contact, dict):
                continue
            listed = contact.get("roles")
            roles: list[Any] = listed if isinstance(listed, list) else []
            targets = {self.table.contact_roles[r] for r in roles if r in self.table.contact_roles}
            emails = [e.get("value") for e in contact.get("emails") or [] if isinstance(e, dict)]
            phones = [p.get("value") for p in contact.get("phones") or [] if isinstance(p, dict)]
            links = [x.get("href") for x in contact.get("links") or [] if isinstance(x, dict)]
            name = contact.get("name") or contact.get("organization")
            organisation = contact.get("organization") or contact.get("name")
            for target in sorted(targets or {P["contactPoint"]}, key=lambda t: t.value):
                if target == P["contactPoint"]:
                    emit_contact(g, iri, target, {
                        "name": name, "email": emails[0] if emails else None,
                        "phone": phones[0] if phones else None, "url": links[0] if links else None,
                        "type": "Individual" if contact.get("name") else "Organization",
                    })  # fmt: skip
                else:
                    emit_agent(g, iri, target, {
                        "name": organisation, "email": emails[0] if emails else None,
                        "url": links[0] if links else None,
                    })  # fmt: skip

    def _extent(
        self, g: Graph, iri: NamedNode, feature: Mapping[str, Any], props: Mapping[str, Any]
    ) -> None:
        box = bbox_of(feature, props)
        if box is not None:
            place = BlankNode()
            g.add(iri, P["spatial"], place)
            g.add(place, A, LOCATION)
            if box[0] == box[2] and box[1] == box[3]:  # a point: its centroid, not a bbox
                point = f"POINT({box[0]:g} {box[1]:g})"
                g.add(place, P["centroid"], Literal(point, datatype=WKT))
            else:
                g.add(place, P["bbox"], Literal(wkt_polygon(box), datatype=WKT))
        start, end = interval_of(feature, props)
        if start is not None or end is not None:
            period = BlankNode()
            g.add(iri, P["temporal"], period)
            g.add(period, A, PERIOD)
            if start is not None:
                g.add(period, P["startDate"], Literal(start))
            if end is not None:
                g.add(period, P["endDate"], Literal(end))

    def _links(
        self,
        g: Graph,
        iri: NamedNode,
        links: Any,
        props: Mapping[str, Any],
        findings: list[Finding],
    ) -> None:
        formats = {
            _media(str(f.get("mediaType"))): str(f["name"])
            for f in props.get("formats") or []
            if isinstance(f, dict) and f.get("mediaType") and f.get("name")
        }
        entries = [
            e for e in (links if isinstance(links, list) else [])
            if isinstance(e, dict) and isinstance(e.get("href"), str)
        ]  # fmt: skip
        licence_links = [
            x["href"].strip() for x in entries
            if x.get("rel") == "license" and is_url(x["href"].strip())
        ]  # fmt: skip
        chosen = self._licence(text_of(props.get("license")), licence_links)
        rights = text_of(props.get("rights"))
        distributions: list[Subject] = []
        unknown: set[str] = set()
        for entry in entries:
            node = self._link(g, iri, entry, formats, unknown)
            if node is not None:
                distributions.append(node)
        for node in distributions:
            if chosen is not None:
                g.add(node, P["license"], chosen)
            if rights is not None:
                g.add(node, P["rights"], Literal(rights))
        if unknown:
            findings.append(
                Finding(Stage.MAP, Severity.INFO, "ogc-link-relation-unmapped",
                        "links of relations mappings/ogc-records.toml does not name (not"
                        " mapped): " + ", ".join(sorted(unknown)), location=iri.value)
            )  # fmt: skip

    def _link(
        self,
        g: Graph,
        iri: NamedNode,
        entry: Mapping[str, Any],
        formats: Mapping[str, str],
        unknown: set[str],
    ) -> Subject | None:
        """Map one link by the role of its relation; the distribution it made, if any
        (``unknown``: relations the table does not name, collected)."""
        href, rel = entry["href"].strip(), str(entry.get("rel") or "")
        media = str(entry.get("type") or "")
        role = self.table.links.get(rel)
        if role is None:
            unknown.add(rel or "(none)")
            return None
        if role in ("ignore", "licence") or not is_url(href):
            return None  # a licence link: see _licence
        if role == "landing-page" and (not media or _media(media) == "text/html"):
            g.add(iri, P["landingPage"], NamedNode(href))
        elif role == "page":
            g.add(iri, P["page"], NamedNode(href))
        else:
            return self._distribution(g, iri, entry, href, rel, media, formats)
        return None

    def _licence(self, text: str | None, hrefs: list[str]) -> NamedNode | Literal | None:
        """The EU licence term the record's licence or licence link stands for; else the
        link; else the text (which the dcat rules keep as a licence document node)."""
        vocabulary = self.licences
        for candidate in [text, *hrefs]:
            found = vocabulary.lookup(candidate) if candidate else None
            if found is not None:
                return found
        if hrefs:
            return NamedNode(hrefs[0])
        if text is not None:
            return NamedNode(text) if is_url(text) else Literal(text)
        return None

    def _distribution(
        self,
        g: Graph,
        iri: NamedNode,
        entry: Mapping[str, Any],
        href: str,
        rel: str,
        media: str,
        formats: Mapping[str, str],
    ) -> Subject:
        node = BlankNode()
        g.add(iri, P["distribution"], node)
        g.add(node, A, DISTRIBUTION)
        g.add(node, P["accessURL"], NamedNode(href))
        if rel in ("enclosure", "download"):
            g.add(node, P["downloadURL"], NamedNode(href))
        title = text_of(entry.get("title"))
        if title is not None:
            g.add(node, P["title"], Literal(title))
        if media:
            g.add(node, P["mediaType"], Literal(_media(media)))
            name = formats.get(_media(media))
            if name is not None:
                g.add(node, P["format"], file_type(name) or Literal(name))
        length = entry.get("length")
        if isinstance(length, int) and not isinstance(length, bool) and length >= 0:
            g.add(node, P["byteSize"], Literal(str(length)))
        return node
