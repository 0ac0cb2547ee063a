"""Namespaces and the few terms of our own (``agg:``) used on catalogue records."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote

AGG = "https://w3id.org/ld-aggregator/ns#"
DCAT = "http://www.w3.org/ns/dcat#"
DCT = "http://purl.org/dc/terms/"
FOAF = "http://xmlns.com/foaf/0.1/"
PROV = "http://www.w3.org/ns/prov#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
SPDX = "http://spdx.org/rdf/terms#"
XSD = "http://www.w3.org/2001/XMLSchema#"
ADMS = "http://www.w3.org/ns/adms#"
SKOS = "http://www.w3.org/2004/02/skos/core#"
VCARD = "http://www.w3.org/2006/vcard/ns#"
SCHEMA = "http://schema.org/"
DQV = "http://www.w3.org/ns/dqv#"
OA = "http://www.w3.org/ns/oa#"
SH = "http://www.w3.org/ns/shacl#"

RDF_TYPE = RDF + "type"
DATASET_TYPES = (DCAT + "Dataset", DCAT + "DataService", DCAT + "DatasetSeries")

# Our own terms (documented in docs/store.md)
AGG_STATUS = AGG + "status"  # agg:Active / agg:Withdrawn / agg:Rejected
AGG_HARVEST_SOURCE = AGG + "harvestSource"
AGG_SOURCE_DATESTAMP = AGG + "sourceDatestamp"
AGG_PAYLOAD = AGG + "originalPayload"
AGG_PAYLOAD_MEDIA_TYPE = AGG + "payloadMediaType"
AGG_FORMAT = AGG + "sourceFormat"
STATUS_IRIS = {
    "active": AGG + "Active",
    "withdrawn": AGG + "Withdrawn",
    "rejected": AGG + "Rejected",
}

#: the 13 EU data themes (authority table data-theme), code -> English label
EU_DATA_THEME = "http://publications.europa.eu/resource/authority/data-theme/"
EU_THEME_LABELS = {
    "AGRI": "Agriculture, fisheries, forestry and food",
    "ECON": "Economy and finance",
    "EDUC": "Education, culture and sport",
    "ENER": "Energy",
    "ENVI": "Environment",
    "GOVE": "Government and public sector",
    "HEAL": "Health",
    "INTR": "International issues",
    "JUST": "Justice, legal system and public safety",
    "REGI": "Regions and cities",
    "SOCI": "Population and society",
    "TECH": "Science and technology",
    "TRAN": "Transport",
}


_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9._~-]{1,80}$")


def minted_iri(base_iri: str, source: str, kind: str, key: str) -> str:
    """The IRI of a ``kind`` of thing (dataset, record...) of ``source`` under ``base_iri``:
    the same (source, key) always gives the same IRI. Readable keys are kept as they are;
    anything else is replaced by a hash of it. (Here, below the mappers and the store, which
    both mint: ``aggregator.mapping.base.mint_iri`` is this with a mapping context.)"""
    segment = key if _SAFE_SEGMENT.match(key) else hashlib.sha256(key.encode()).hexdigest()[:32]
    return f"{base_iri}{kind}/{quote(source, safe='')}/{segment}"
