"""JSON-LD contexts the dcat mapper resolves locally, so that no context is ever fetched.

A DCAT-AP JSON-LD document usually names its context by URL (``"@context":
"https://semiceu.github.io/DCAT-AP/releases/3.0.1/context/dcat-ap.jsonld"``). The mapper never
goes to the network: a context URL listed in :data:`KNOWN_CONTEXTS` is replaced by the copy
below before parsing; any other remote context is a per-record :class:`ParseError`.

The term definitions are **our own**, written from the DCAT-AP 2.x / 3.0.1 specifications
(class and property labels of the specification, British English as the DCAT-AP context uses
them, plus the vocabulary local names DCAT itself uses), not copied from the published files.
They are kept in Python rather than as ``.jsonld`` package data so that an installed wheel
always carries them. A term that no context defines is reported by the mapper
(``json-ld-term-undefined``): JSON-LD processors drop such keys silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

_PREFIXES: dict[str, str] = {
    "adms": "http://www.w3.org/ns/adms#",
    "dcat": "http://www.w3.org/ns/dcat#",
    "dcatap": "http://data.europa.eu/r5r/",
    "dct": "http://purl.org/dc/terms/",
    "dcterms": "http://purl.org/dc/terms/",
    "foaf": "http://xmlns.com/foaf/0.1/",
    "locn": "http://www.w3.org/ns/locn#",
    "odrl": "http://www.w3.org/ns/odrl/2/",
    "owl": "http://www.w3.org/2002/07/owl#",
    "prov": "http://www.w3.org/ns/prov#",
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "schema": "http://schema.org/",
    "skos": "http://www.w3.org/2004/02/skos/core#",
    "spdx": "http://spdx.org/rdf/terms#",
    "time": "http://www.w3.org/2006/time#",
    "vcard": "http://www.w3.org/2006/vcard/ns#",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
}

_CLASSES: dict[str, str] = {
    "Agent": "foaf:Agent",
    "Catalog": "dcat:Catalog",
    "Catalogue": "dcat:Catalog",
    "CatalogRecord": "dcat:CatalogRecord",
    "CatalogueRecord": "dcat:CatalogRecord",
    "Checksum": "spdx:Checksum",
    "Concept": "skos:Concept",
    "ConceptScheme": "skos:ConceptScheme",
    "DataService": "dcat:DataService",
    "Dataset": "dcat:Dataset",
    "DatasetSeries": "dcat:DatasetSeries",
    "Distribution": "dcat:Distribution",
    "Document": "foaf:Document",
    "Frequency": "dct:Frequency",
    "Identifier": "adms:Identifier",
    "Kind": "vcard:Kind",
    "LicenceDocument": "dct:LicenseDocument",
    "LicenseDocument": "dct:LicenseDocument",
    "LinguisticSystem": "dct:LinguisticSystem",
    "Location": "dct:Location",
    "MediaType": "dct:MediaType",
    "MediaTypeOrExtent": "dct:MediaTypeOrExtent",
    "Organization": "foaf:Organization",
    "PeriodOfTime": "dct:PeriodOfTime",
    "ProvenanceStatement": "dct:ProvenanceStatement",
    "Relationship": "dcat:Relationship",
    "RightsStatement": "dct:RightsStatement",
    "Role": "dcat:Role",
    "Standard": "dct:Standard",
}

# properties whose values are resources (written as {"@type": "@id"})
_OBJECT_PROPERTIES: dict[str, str] = {
    "accessRights": "dct:accessRights",
    "accessService": "dcat:accessService",
    "accessURL": "dcat:accessURL",
    "accrualPeriodicity": "dct:accrualPeriodicity",
    "algorithm": "spdx:algorithm",
    "applicableLegislation": "dcatap:applicableLegislation",
    "availability": "dcatap:availability",
    "catalog": "dcat:catalog",
    "catalogue": "dcat:catalog",
    "checksum": "spdx:checksum",
    "compressFormat": "dcat:compressFormat",
    "conformsTo": "dct:conformsTo",
    "contactPoint": "dcat:contactPoint",
    "creator": "dct:creator",
    "dataset": "dcat:dataset",
    "distribution": "dcat:distribution",
    "documentation": "foaf:page",
    "downloadURL": "dcat:downloadURL",
    "endpointDescription": "dcat:endpointDescription",
    "endpointURL": "dcat:endpointURL",
    "format": "dct:format",
    "frequency": "dct:accrualPeriodicity",
    "hadRole": "dcat:hadRole",
    "hasEmail": "vcard:hasEmail",
    "hasPart": "dct:hasPart",
    "hasPolicy": "odrl:hasPolicy",
    "hasURL": "vcard:hasURL",
    "hasVersion": "dcat:hasVersion",
    "homepage": "foaf:homepage",
    "inSeries": "dcat:inSeries",
    "isPartOf": "dct:isPartOf",
    "isReferencedBy": "dct:isReferencedBy",
    "isVersionOf": "dcat:isVersionOf",
    "landingPage": "dcat:landingPage",
    "language": "dct:language",
    "licence": "dct:license",
    "license": "dct:license",
    "mediaType": "dcat:mediaType",
    "otherIdentifier": "adms:identifier",
    "packageFormat": "dcat:packageFormat",
    "page": "foaf:page",
    "primaryTopic": "foaf:primaryTopic",
    "provenance": "dct:provenance",
    "publisher": "dct:publisher",
    "qualifiedAttribution": "prov:qualifiedAttribution",
    "qualifiedRelation": "dcat:qualifiedRelation",
    "record": "dcat:record",
    "relation": "dct:relation",
    "rights": "dct:rights",
    "sample": "adms:sample",
    "service": "dcat:service",
    "servesDataset": "dcat:servesDataset",
    "source": "dct:source",
    "spatial": "dct:spatial",
    "status": "adms:status",
    "temporal": "dct:temporal",
    "theme": "dcat:theme",
    "themeTaxonomy": "dcat:themeTaxonomy",
    "type": "dct:type",
    "wasGeneratedBy": "prov:wasGeneratedBy",
}

# properties whose values are literals
_DATA_PROPERTIES: dict[str, str] = {
    "bbox": "dcat:bbox",
    "byteSize": "dcat:byteSize",
    "centroid": "dcat:centroid",
    "checksumValue": "spdx:checksumValue",
    "description": "dct:description",
    "endDate": "dcat:endDate",
    "fn": "vcard:fn",
    "geometry": "locn:geometry",
    "identifier": "dct:identifier",
    "issued": "dct:issued",
    "keyword": "dcat:keyword",
    "label": "rdfs:label",
    "modified": "dct:modified",
    "name": "foaf:name",
    "notation": "skos:notation",
    "prefLabel": "skos:prefLabel",
    "spatialResolutionInMeters": "dcat:spatialResolutionInMeters",
    "startDate": "dcat:startDate",
    "temporalResolution": "dcat:temporalResolution",
    "title": "dct:title",
    "version": "dcat:version",
    "versionNotes": "adms:versionNotes",
}


def _dcat_ap_context() -> dict[str, Any]:
    context: dict[str, Any] = dict(_PREFIXES)
    context.update(_CLASSES)
    context.update({k: {"@id": v, "@type": "@id"} for k, v in _OBJECT_PROPERTIES.items()})
    context.update({k: {"@id": v} for k, v in _DATA_PROPERTIES.items()})
    return context


def _dcat_context() -> dict[str, Any]:
    """The W3C DCAT context: DCAT's own local names plus the Dublin Core / FOAF ones it reuses."""
    return _dcat_ap_context()


DCAT_AP = MappingProxyType(_dcat_ap_context())
DCAT = MappingProxyType(_dcat_context())

# context URL (http or https, exactly as written in documents) -> our copy
KNOWN_CONTEXTS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        f"{scheme}://{url}": context
        for scheme in ("http", "https")
        for url, context in [
            ("semiceu.github.io/DCAT-AP/releases/3.0.0/context/dcat-ap.jsonld", DCAT_AP),
            ("semiceu.github.io/DCAT-AP/releases/3.0.1/context/dcat-ap.jsonld", DCAT_AP),
            ("semiceu.github.io/DCAT-AP/releases/2.1.1/dcat-ap_2.1.1.jsonld", DCAT_AP),
            ("semiceu.github.io/DCAT-AP/releases/2.1.0/dcat-ap_2.1.0.jsonld", DCAT_AP),
            ("semiceu.github.io/DCAT-AP/releases/2.0.1/dcat-ap_2.0.1.jsonld", DCAT_AP),
            ("www.w3.org/ns/dcat.jsonld", DCAT),
            ("www.w3.org/ns/dcat2.jsonld", DCAT),
            ("www.w3.org/ns/dcat3.jsonld", DCAT),
        ]
    }
)


def known_context(url: str) -> dict[str, Any] | None:
    """A fresh copy of our context for ``url``, or None if we ship none for it."""
    context = KNOWN_CONTEXTS.get(url.strip())
    return None if context is None else dict(context)
