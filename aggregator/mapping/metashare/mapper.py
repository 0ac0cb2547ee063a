"""META-SHARE v3.0 resource descriptions -> DCAT-AP 3 (format key ``meta-share``).

One record is one LR: its ``metadata.xml`` as a node served it (the payload of the
``meta-share`` harvester). The regular values come from the ``[[dataset]]`` rules of
``mappings/meta-share.toml``; the code tables there turn codes into IRIs; the irregular
parts are :mod:`aggregator.mapping.metashare._parts`. The table of every mapped element is
docs/mappings/meta-share.md.

The dataset IRI is ``{base_iri}dataset/{source}/{storage id}``. A tool/service with an
execution location is a ``dcat:DataService`` (its endpoint the execution location); every
other LR a ``dcat:Dataset``. The source node's URL (from the record's URL
``<node>/sync/<id>/metadata/``) is the dataset's provenance.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from lxml import etree
from pyoxigraph import Literal, NamedNode

from aggregator.core.errors import MappingError
from aggregator.core.models import MappedDataset
from aggregator.core.vocab import DCAT, DCT, RDFS
from aggregator.mapping.base import (
    Mapper,
    MappingContext,
    canonical_ntriples,
    content_hash,
    mint_iri,
)
from aggregator.mapping.dcat.vocab import load_vocabularies
from aggregator.mapping.metashare import _parts as parts
from aggregator.mapping.metashare._graph import (
    Graph,
    date_time,
    find_all,
    first_text,
    lang_literal,
    text_of,
)
from aggregator.mapping.metashare._rules import (
    DEFAULT_RULES_PATH,
    MS,
    MetaShareRules,
    ValueRule,
    load_rules,
)
from aggregator.mapping.payload import ParsedPayload

_SYNC_URL = re.compile(r"^(?P<node>.+?)/sync/(?P<id>[0-9a-f]{64})/metadata/$")


def node_url(record_url: str | None) -> str | None:
    """The node's base URL from an LR's sync URL."""
    match = _SYNC_URL.match(record_url or "")
    return match.group("node") if match else None


class MetaShareMapper(Mapper):
    name: ClassVar[str] = "meta-share"

    def __init__(self, rules_path: Path | None = None) -> None:
        self.rules: MetaShareRules = load_rules(rules_path or DEFAULT_RULES_PATH)
        self.languages = load_vocabularies()["language"]

    def map_payload(self, payload: ParsedPayload, ctx: MappingContext) -> list[MappedDataset]:
        root = payload.xml()
        if root.tag != f"{{{MS}}}resourceInfo":
            raise MappingError(
                f"not a META-SHARE v3.0 resource description: the root is {root.tag},"
                f" not {{{MS}}}resourceInfo"
            )
        raw = payload.raw
        component = root.find("ms:resourceComponentType/*", {"ms": MS})
        if component is None:
            raise MappingError("the description has no resourceComponentType")
        g = Graph()
        rules = self.rules
        rtype = rules.resource_types.get(first_text(component, "ms:resourceType"))
        distribution = root.find("ms:distributionInfo", {"ms": MS})
        endpoints = (
            [n for e in find_all(distribution, ".//ms:executionLocation") if (n := g.iri(e))]
            if distribution is not None
            else []
        )
        service = rtype is not None and rtype.service and bool(endpoints)
        iri = mint_iri(ctx, "dataset", raw.local_id)
        subject = NamedNode(iri)
        g.typed(subject, DCAT + ("DataService" if service else "Dataset"))
        for rule in rules.dataset:
            self._apply(g, subject, root, rule)
        g.add(subject, DCT + "identifier", Literal(raw.local_id))
        info = root.find("ms:identificationInfo", {"ms": MS})
        if info is not None:
            parts.identifiers(g, subject, info)
        parts.resource_types(g, subject, component, rules)
        parts.languages(g, subject, component, self.languages)
        byte_size = parts.sizes(g, subject, component, rules)
        node = node_url(raw.url)
        if distribution is not None:
            availability = first_text(distribution, "ms:availability")
            if availability in rules.availability:
                access = NamedNode(rules.availability[availability])
                g.typed(access, DCT + "RightsStatement")
                g.add(subject, DCT + "accessRights", access)
            if service:
                for endpoint in endpoints:
                    g.add(subject, DCAT + "endpointURL", endpoint)
                parts.service_licences(g, subject, distribution, rules)
            else:
                landing = first_text(root, "ms:identificationInfo/ms:url")
                fallback = landing if landing.startswith(("http://", "https://")) else node
                parts.distributions(
                    g, subject, distribution, fallback or iri, parts.media_types(component),
                    byte_size, rules,
                )  # fmt: skip
        parts.contact_points(g, subject, root)
        parts.creation(g, subject, root)
        parts.relations(g, subject, root, rules, lambda i: mint_iri(ctx, "dataset", i))
        self._modified(g, subject, root, raw.datestamp)
        self._provenance(g, subject, node, raw.local_id)
        ntriples = canonical_ntriples(g.triples)
        return [
            MappedDataset(
                local_id=raw.local_id,
                dataset_iri=iri,
                ntriples=ntriples,
                content_hash=content_hash(ntriples),
                datestamp=raw.datestamp,
                findings=tuple(g.findings),
            )
        ]

    @staticmethod
    def _apply(g: Graph, subject: NamedNode, root: etree._Element, rule: ValueRule) -> None:
        for el in find_all(root, rule.path):
            if rule.kind == "text":
                lit = lang_literal(el)
                if lit is not None:
                    g.add(subject, rule.property, lit)
            elif rule.kind == "string":
                if text_of(el):
                    g.add(subject, rule.property, Literal(text_of(el)))
            elif rule.kind == "date":
                if (date := g.date(el)) is not None:
                    g.add(subject, rule.property, date)
            elif (node := g.iri(el)) is not None:
                if rule.klass:
                    g.typed(node, rule.klass)
                g.add(subject, rule.property, node)

    @staticmethod
    def _modified(
        g: Graph, subject: NamedNode, root: etree._Element, when: datetime | None
    ) -> None:
        """dct:modified: the node's ``modified`` (storage-global.json, the record's source
        datestamp), else metadataInfo's metadataLastDateUpdated."""
        if when is not None:
            g.add(subject, DCT + "modified", date_time(when))
            return
        for el in find_all(root, "ms:metadataInfo/ms:metadataLastDateUpdated")[:1]:
            if (date := g.date(el)) is not None:
                g.add(subject, DCT + "modified", date)

    @staticmethod
    def _provenance(g: Graph, subject: NamedNode, node: str | None, lr_id: str) -> None:
        statement = g.new(DCT + "ProvenanceStatement")
        where = f"the META-SHARE node {node}" if node else "a META-SHARE node"
        g.add(
            statement, RDFS + "label", Literal(f"Harvested from {where}, LR {lr_id}", language="en")
        )
        g.add(subject, DCT + "provenance", statement)
        # the node is not dct:source: DCAT-AP 3.0.1 ranges that to a dcat:Dataset the
        # dataset derives from; the statement names the node, the catalogue record its URL
