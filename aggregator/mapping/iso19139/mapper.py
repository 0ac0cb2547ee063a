"""The ``iso19139`` mapper: one ISO 19139 / UK GEMINI 2.3 ``gmd:MD_Metadata`` -> GeoDCAT-AP.

docs/mappings/iso19139.md is the mapping as a table for metadata specialists. Steps:

1. **Parse** once (:class:`~aggregator.mapping.payload.ParsedPayload`, the hardened parser of
   :mod:`aggregator.core.xml`: no DTD, no entities, no XInclude, no network); the records are
   the root ``gmd:MD_Metadata`` / ``gmi:MI_Metadata`` or those of a CSW response envelope,
   each mapped on its own (:mod:`.records`; anything else is a ``ParseError``).
2. **Kind**: ``gmd:hierarchyLevel`` -> ``dcat:Dataset`` / ``dcat:DatasetSeries`` /
   ``dcat:DataService`` (``[hierarchy]`` of mappings/iso19139.toml; none or unknown: dataset).
3. **Identity**: the resource IRI is ``mint_iri(ctx, "dataset", fileIdentifier)`` (the
   record's ``local_id`` when it has none), so a service's ``srv:operatesOn/@uuidref`` names
   the dataset record it couples to.
4. **Regular elements** from the ``[[element]]`` rows (compiled XPaths), then the irregular
   parts (:mod:`._parts`, :mod:`._agents`, :mod:`._distribution`).
5. **Catalogue record**: as GeoDCAT-AP writes it, the resource ``foaf:isPrimaryTopicOf`` a
   ``dcat:CatalogRecord`` (the GeoDCAT-AP description: ``dct:conformsTo`` DCAT-AP, metadata
   language, metadata date) whose ``dct:source`` is the ISO record's own ``dcat:CatalogRecord``
   (file identifier, metadata date, language, character set, metadata standard, metadata
   point of contact); kept as catalogue facts (``MappedDataset.catalog_ntriples``), printed
   by ``aggregator map`` beside the resource.
6. **Ranges**: the IRI values get the classes DCAT-AP 3.0.1 demands (:mod:`._ranges`).
7. **Output** canonical N-Triples; the metadata date (``gmd:dateStamp``) is the datestamp.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from lxml import etree

from aggregator.core.errors import MappingError
from aggregator.core.models import Finding, MappedDataset, RawRecord, Severity, Stage
from aggregator.core.vocab import DCAT, DCT, FOAF, RDF_TYPE
from aggregator.mapping.base import (
    Mapper,
    MappingContext,
    content_hash,
    mint_iri,
)
from aggregator.mapping.iso19139._agents import Agents
from aggregator.mapping.iso19139._distribution import distributions, service
from aggregator.mapping.iso19139._keywords import eu_themes, keywords
from aggregator.mapping.iso19139._parts import (
    P,
    State,
    dates,
    extents,
    identifiers,
    reference_systems,
)
from aggregator.mapping.iso19139._quality import conformity, lineage, resolution
from aggregator.mapping.iso19139._ranges import type_iri_values
from aggregator.mapping.iso19139._rights import constraints, service_rights
from aggregator.mapping.iso19139._table import RESOURCE_KINDS, ElementRule, IsoTable, load_table
from aggregator.mapping.iso19139._xml import (
    Node,
    Out,
    Texts,
    anchor_href,
    blank,
    code_value,
    date_literal,
    elements,
    first,
    is_iri,
    lit,
    named,
    parse_datetime,
    plain,
)
from aggregator.mapping.iso19139.records import iso_records
from aggregator.mapping.payload import ParsedPayload

RESOURCE_TYPE = "http://inspire.ec.europa.eu/metadata-codelist/ResourceType/"
TYPE = named(RDF_TYPE)
PRIMARY_TOPIC = named(FOAF + "primaryTopic")
IS_PRIMARY_TOPIC_OF = named(FOAF + "isPrimaryTopicOf")
SOURCE = named(DCT + "source")
LANGUAGE = named(DCT + "language")
DCAT_AP = named("http://data.europa.eu/r5r/")  # DCAT-AP, the standard of our description
CATALOG_RECORD = named(DCAT + "CatalogRecord")
ACCESS_RIGHTS = named(DCT + "accessRights")
STANDARD = named(DCT + "Standard")
RESOURCE_TYPE_PROPS = (named(DCT + "type"), named("http://data.europa.eu/930/resourceType"))
_CODE_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def _texts(table: IsoTable, root: etree._Element) -> Texts:
    lang = first("gmd:language/gmd:LanguageCode", root)
    code = code_value(lang) if lang is not None else plain(first("gmd:language", root))
    locales: dict[str, str] = {}
    for loc in elements("gmd:locale/gmd:PT_Locale", root):
        tag = table.language_tags.get(
            code_value(first("gmd:languageCode/gmd:LanguageCode", loc)).lower(), ""
        )
        ident = loc.get("id")
        if ident and tag:
            locales[ident] = tag
            locales["#" + ident] = tag
    return Texts(table.language_tags.get(code.lower(), ""), locales)


class IsoMapper(Mapper):
    """ISO 19139 / GEMINI 2.3 XML -> GeoDCAT-AP (DCAT-AP 3), one record per payload."""

    name = "iso19139"
    #: a document may be a CSW envelope of many records (``aggregator map``); a harvester
    #: passes each record on its own
    reads_collections = True

    def __init__(self, table_path: Path | None = None, themes_path: Path | None = None) -> None:
        self.table = load_table(table_path, themes_path)
        # the element rows of each kind of resource, with where their values go, read once
        self._rules = {
            kind: tuple(
                (rule, rule.subject == "record", rule.context == "metadata")
                for rule in self.table.elements
                if kind in rule.on
            )
            for kind in RESOURCE_KINDS
        }

    def map_payload(self, payload: ParsedPayload, ctx: MappingContext) -> list[MappedDataset]:
        """Each ISO record of the payload (:mod:`.records`: bare, or in a CSW envelope)."""
        raw = payload.raw
        found = iso_records(payload.xml(), f"record {raw.local_id!r}").records
        if len(found) == 1:
            return self._map_record(found[0], raw, ctx)
        # several records in one envelope: each is its own, under its fileIdentifier
        datasets: list[MappedDataset] = []
        for number, root in enumerate(found, start=1):
            local_id = plain(first("gmd:fileIdentifier", root)) or f"{raw.local_id}#{number}"
            datasets.extend(self._map_record(root, replace(raw, local_id=local_id), ctx))
        return datasets

    def _map_record(
        self, root: etree._Element, raw: RawRecord, ctx: MappingContext
    ) -> list[MappedDataset]:
        ident = first("gmd:identificationInfo/*", root)
        if ident is None:
            raise MappingError(f"record {raw.local_id!r} has no gmd:identificationInfo")
        table = self.table
        level = code_value(first("gmd:hierarchyLevel/gmd:MD_ScopeCode", root)) or "dataset"
        cls, rtype = table.hierarchy.get(level, table.hierarchy["dataset"])
        kind = {"series": "series", "service": "service"}.get(rtype, "dataset")
        file_id = plain(first("gmd:fileIdentifier", root))
        dataset_iri = mint_iri(ctx, "dataset", file_id or raw.local_id)
        iri = named(dataset_iri)
        texts = _texts(table, root)

        out = Out()
        state = State(out, table, texts)
        out.add(iri, TYPE, cls)
        # a service's dct:type is its service type (an element row); its resource type is
        # geodcat:resourceType only
        for prop in RESOURCE_TYPE_PROPS if kind != "service" else RESOURCE_TYPE_PROPS[1:]:
            out.add(iri, prop, named(RESOURCE_TYPE + rtype))
        # the catalogue record of the GeoDCAT-AP description (``record``) and, as its
        # dct:source, the record of the ISO metadata it was made from (``source``)
        record_out = Out()
        record, source = blank(), blank()
        record_out.add(iri, IS_PRIMARY_TOPIC_OF, record)
        for node in (record, source):
            record_out.add(node, TYPE, CATALOG_RECORD)
            record_out.add(node, PRIMARY_TOPIC, iri)
        record_out.add(record, P["conformsTo"], DCAT_AP)
        record_out.add(record, SOURCE, source)
        for rule, on_record, on_metadata in self._rules[kind]:
            target = (record_out, source) if on_record else (out, iri)
            self._element(state, ctx, rule, root if on_metadata else ident, *target)

        themes: list[str] = []
        dates(state, ident, iri)
        identifiers(state, ident, iri)
        keywords(state, ident, iri, themes, partial(mint_iri, ctx))
        eu_themes(state, ident, iri, themes)
        extents(state, ident, iri)
        reference_systems(state, root, iri)
        agents = Agents(out, table, texts)
        agents.apply(
            iri,
            agents.read(
                elements("gmd:pointOfContact/gmd:CI_ResponsibleParty", ident)
                + elements(
                    "gmd:distributionInfo/gmd:MD_Distribution/gmd:distributor/gmd:MD_Distributor/"
                    "gmd:distributorContact/gmd:CI_ResponsibleParty",
                    root,
                )
            ),
        )
        rights = constraints(state, ident)
        if kind == "service":
            service(state, ctx, root, ident, iri)
            service_rights(state, iri, rights)
        else:
            resolution(state, ident, iri)
            distributions(state, root, iri, rights)
            if rights.access is not None:
                out.add(iri, ACCESS_RIGHTS, rights.access)
        lineage(state, root, iri)
        conformity(state, root, iri)

        stamp_text = plain(first("gmd:dateStamp", root))
        stamp = date_literal(stamp_text)
        if stamp is not None:
            record_out.add(record, P["modified"], stamp)
            record_out.add(source, P["modified"], stamp)
        else:
            state.findings.append(
                Finding(
                    Stage.MAP,
                    Severity.WARNING,
                    "iso-metadata-date-unreadable",
                    f"metadata date (gmd:dateStamp) {stamp_text!r} is not an ISO date",
                )
            )
        self._standard(root, record_out, source)
        # a multilingual record (gmd:locale) is written in each of its locales' languages too
        languages = table.codelists["language"]
        for code_el in elements("gmd:locale/gmd:PT_Locale/gmd:languageCode/gmd:LanguageCode", root):
            language = languages.get(code_value(code_el).lower())
            if language:
                record_out.add(source, LANGUAGE, named(language))
        record_out.add_all(
            record, LANGUAGE, [o for s, p, o in record_out.triples if s == source and p == LANGUAGE]
        )
        record_agents = Agents(record_out, table, texts)
        record_agents.record_contacts(
            source, record_agents.read(elements("gmd:contact/gmd:CI_ResponsibleParty", root))
        )
        type_iri_values(out, table.concept_labels)
        type_iri_values(record_out, table.concept_labels)
        when = parse_datetime(stamp_text)
        if when is not None and when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        ntriples = out.canonical()
        return [
            MappedDataset(
                local_id=raw.local_id,
                dataset_iri=dataset_iri,
                ntriples=ntriples,
                content_hash=content_hash(ntriples),
                datestamp=when if isinstance(when, datetime) else raw.datestamp,
                catalog_ntriples=record_out.canonical(),
                findings=tuple(state.findings),
                themes=tuple(dict.fromkeys(themes)),
            )
        ]

    @staticmethod
    def _element(
        state: State,
        ctx: MappingContext,
        rule: ElementRule,
        context: etree._Element,
        out: Out,
        subject: Node,
    ) -> None:
        found = rule.xpath(context)
        if not found or not isinstance(found, list):
            return
        values: list[str] = []
        kind = rule.kind
        for el in found:
            if not isinstance(el, etree._Element):
                continue
            if kind == "text":
                values.extend(state.texts.literals(el))
            elif kind == "literal" or kind == "record":
                text = plain(el)
                if text and kind == "record":
                    values.append(named(mint_iri(ctx, "dataset", text)))
                elif text:
                    values.append(lit(text))
            else:
                code = code_value(el)
                if not code:
                    continue
                if kind == "codeiri":
                    if set(code) <= _CODE_SAFE:
                        values.append(named(rule.base + code))
                        continue
                else:
                    mapped = state.table.codelists[rule.table].get(code) or state.table.codelists[
                        rule.table
                    ].get(code.lower())
                    if mapped:
                        is_iri = mapped.startswith("http")
                        values.append(named(mapped) if is_iri else lit(mapped))
                        continue
                message = f"{rule.name}: code {code!r} is not in the mapping table"
                state.warn("iso-code-unknown", message, el)
        if rule.max:
            values = values[: rule.max]
        add = out.triples.append
        for value in dict.fromkeys(values):
            for pred in rule.predicates:
                add((subject, pred, value))

    @staticmethod
    def _standard(root: etree._Element, out: Out, record: Node) -> None:
        """The metadata standard (GEMINI 2.3, ISO 19115) the source record conforms to."""
        name_el = first("gmd:metadataStandardName", root)
        name = plain(name_el)
        if not name:
            return
        href = anchor_href(name_el)  # the standard's own IRI, when the record links it
        std = out.typed(STANDARD, named(href) if href and is_iri(href) else None)
        out.add(record, P["conformsTo"], std)
        out.add(std, P["title"], lit(name))
        version = plain(first("gmd:metadataStandardVersion", root))
        if version:
            out.add(std, P["versionInfo"], lit(version))
