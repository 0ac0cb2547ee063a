"""The classes DCAT-AP 3.0.1 demands of the IRI values the ISO mapper writes.

The official range shapes (``range.ttl``) check each value's class inside the record, with no
background knowledge: an EU frequency IRI must say it is a ``dct:Frequency``, an EPSG IRI
that it is a ``dct:Standard``... The vocabularies declare these ranges, so stating the class
is sound. Blank nodes are typed where they are made; this pass types the IRIs, one dict
lookup per triple, after the record is built (no second parse, no rdflib).

Links to resources that other records describe (``dcat:servesDataset``, ``dcat:inSeries``)
are not typed: typing them here would make them untitled datasets.
"""

from __future__ import annotations

from aggregator.core.vocab import DCAT, DCT, FOAF, SKOS, VCARD
from aggregator.mapping.iso19139._xml import TYPE, Node, Out, Term, lit, named

GEODCAT = "http://data.europa.eu/930/"
ELI_LEGAL_RESOURCE = "http://data.europa.eu/eli/ontology#LegalResource"

#: property -> the classes of its IRI values (DCAT-AP 3.0.1 range; GeoDCAT-AP 3 for the
#: geodcat: properties, whose values are SKOS concepts of the INSPIRE registers)
RANGES: dict[str, tuple[str, ...]] = {
    named(p): tuple(named(c) for c in classes)
    for p, classes in {
        DCT + "accrualPeriodicity": (DCT + "Frequency",),
        DCT + "language": (DCT + "LinguisticSystem",),
        DCT + "conformsTo": (DCT + "Standard",),
        DCT + "type": (SKOS + "Concept",),
        DCT + "format": (DCT + "MediaTypeOrExtent",),
        DCAT + "mediaType": (DCT + "MediaType",),
        DCAT + "theme": (SKOS + "Concept",),
        FOAF + "page": (FOAF + "Document",),
        DCAT + "landingPage": (FOAF + "Document",),
        DCT + "accessRights": (DCT + "RightsStatement",),
        DCT + "rights": (DCT + "RightsStatement",),
        DCT + "license": (DCT + "LicenseDocument",),
        DCT + "publisher": (FOAF + "Agent",),
        DCT + "creator": (FOAF + "Agent",),
        DCT + "rightsHolder": (FOAF + "Agent",),
        DCAT + "contactPoint": (VCARD + "Kind",),
        DCT + "spatial": (DCT + "Location",),
        DCT + "provenance": (DCT + "ProvenanceStatement",),
        DCT + "source": (DCAT + "CatalogRecord",),
        DCAT + "hadRole": (DCAT + "Role",),
        SKOS + "inScheme": (SKOS + "ConceptScheme",),
        "http://data.europa.eu/r5r/applicableLegislation": (ELI_LEGAL_RESOURCE,),
        GEODCAT + "referenceSystem": (DCT + "Standard", SKOS + "Concept"),
        GEODCAT + "resourceType": (SKOS + "Concept",),
        GEODCAT + "serviceType": (SKOS + "Concept",),
        GEODCAT + "topicCategory": (SKOS + "Concept",),
        "http://www.w3.org/ns/adms#representationTechnique": (SKOS + "Concept",),
    }.items()
}


CONCEPT = named(SKOS + "Concept")
PREF_LABEL = named(SKOS + "prefLabel")


def type_iri_values(out: Out, labels: dict[str, str]) -> None:
    """Add ``rdf:type`` triples for the IRI values of the :data:`RANGES` properties in
    ``out`` (the canonical form drops the duplicates), and a ``skos:prefLabel`` to each
    concept that has none in the record (DCAT-AP 3.0.1 wants one): its label in ``labels``
    (the mapping table's), else the last segment of its IRI."""
    ranges = RANGES
    added: set[tuple[Node, str]] = set()
    labelled: set[Node] = set()
    concepts: set[Node] = set()
    extra: list[tuple[Node, str, Term]] = []
    for s, p, o in out.triples:  # one pass: this runs on every harvested record
        if p == TYPE:
            if o == CONCEPT and s[0] == "<":
                concepts.add(s)
            continue
        if p == PREF_LABEL:
            labelled.add(s)
            continue
        classes = ranges.get(p)
        if classes is None or o[0] != "<":
            continue
        for cls in classes:
            if (o, cls) not in added:
                added.add((o, cls))
                extra.append((o, TYPE, cls))
                if cls == CONCEPT:
                    concepts.add(o)
    for concept in concepts - labelled:
        label = labels.get(concept) or lit(concept[1:-1].rstrip("/#").rsplit("/", 1)[-1])
        extra.append((concept, PREF_LABEL, label))
    out.triples.extend(extra)
