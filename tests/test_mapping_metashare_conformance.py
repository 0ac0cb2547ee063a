"""META-SHARE v3.0 descriptions of our own making, written as nodes publish them (a speech
corpus with two licences and audio sizes, a bilingual wordnet, a web service with two
licensed endpoints and two creators), mapped as a harvest maps them: the exact triples of each
class of fix, and conformance to the official DCAT-AP 3.0.1 Base + Range shapes (read from
../shared/reference where it is; skipped with the reason otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest
from official_shapes import official_violations
from pyoxigraph import BlankNode, Literal, NamedNode, RdfFormat, Triple, parse

from aggregator.core.models import MappedDataset, RawRecord, Severity
from aggregator.demo.peers.metashare import SAMPLES, sample_xml, storage_id
from aggregator.jobs.processing import process
from aggregator.mapping.base import MappingContext
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.metashare import MetaShareStructureValidator

DESCRIPTIONS = Path(__file__).parent / "data" / "meta-share" / "descriptions"
CTX = MappingContext("http://agg.example/", "elra", "ELRA")
NODE = "https://metashare.elda.org"
DCAT = "http://www.w3.org/ns/dcat#"
DCT = "http://purl.org/dc/terms/"
FOAF = "http://xmlns.com/foaf/0.1/"
VCARD = "http://www.w3.org/2006/vcard/ns#"
PROV = "http://www.w3.org/ns/prov#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
A = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")


def mapped(name: str, n: int) -> MappedDataset:
    xml = (DESCRIPTIONS / f"{name}.xml").read_bytes()
    lr = storage_id(100 + n)
    raw = RawRecord(
        "elra", lr, "meta-share", xml, "application/xml", url=f"{NODE}/sync/{lr}/metadata/"
    )
    result = process(raw, CTX, [])
    assert not result.failure, result.failure
    [checked] = result.checked
    return checked.dataset


def triples(ds: MappedDataset) -> list[Triple]:
    return [q.triple for q in parse(ds.ntriples, RdfFormat.N_TRIPLES)]


def objects(ts: list[Triple], s: NamedNode | BlankNode, p: str) -> list[object]:
    return [t.object for t in ts if t.subject == s and t.predicate.value == p]


def described(ts: list[Triple], node: object) -> set[tuple[str, str]]:
    """(predicate, object) of a node, blank-node objects shown as '_'."""
    return {
        (t.predicate.value, "_" if isinstance(t.object, BlankNode) else str(t.object))
        for t in ts
        if t.subject == node
    }


NAMES = ["speech-corpus", "wordnet", "ner-service"]


@pytest.mark.parametrize(("n", "name"), list(enumerate(NAMES)))
def test_each_description_passes_the_structure_rules_and_the_official_shapes(
    n: int, name: str
) -> None:
    xml = (DESCRIPTIONS / f"{name}.xml").read_bytes()
    raw = RawRecord("elra", storage_id(n), "meta-share", xml, "application/xml")
    assert MetaShareStructureValidator().validate_payload(ParsedPayload(raw)).conforms
    ds = mapped(name, n)
    assert not [f for f in ds.findings if f.severity is not Severity.INFO], ds.findings
    assert official_violations(ds.ntriples) == []


@pytest.mark.parametrize(("n", "name"), list(enumerate(SAMPLES)))
def test_the_demo_node_records_pass_the_official_shapes(n: int, name: str) -> None:
    lr = storage_id(n)
    raw = RawRecord(
        "elra", lr, "meta-share", sample_xml(name), "application/xml",
        url=f"{NODE}/sync/{lr}/metadata/",
    )  # fmt: skip
    [checked] = process(raw, CTX, []).checked
    assert official_violations(checked.dataset.ntriples) == []


def test_contact_persons_are_vcard_kinds_and_creators_foaf_agents() -> None:
    ds = mapped("speech-corpus", 0)
    ts = triples(ds)
    subject = NamedNode(ds.dataset_iri)
    cards = objects(ts, subject, DCAT + "contactPoint")
    assert sorted(sorted(described(ts, c)) for c in cards) == [
        [
            (str(A.value), f"<{VCARD}Individual>"),
            (str(A.value), f"<{VCARD}Kind>"),
            (VCARD + "fn", '"Jerneja Žganec Gros"'),
            (VCARD + "hasEmail", "<mailto:jerneja.gros@example-alpineon.si>"),
            (VCARD + "hasURL", "<https://www.alpineon.si>"),
            (VCARD + "organization-name", '"Alpineon d.o.o."@en'),
        ],
        [
            (str(A.value), f"<{VCARD}Individual>"),
            (str(A.value), f"<{VCARD}Kind>"),
            (VCARD + "fn", '"Simon Dobrišek"'),
            (VCARD + "hasEmail", "<mailto:simon.dobrisek@example-fe.uni-lj.si>"),
        ],
    ]
    [creator] = objects(ts, subject, DCT + "creator")
    assert described(ts, creator) == {
        (str(A.value), f"<{FOAF}Agent>"),
        (str(A.value), f"<{FOAF}Organization>"),
        (FOAF + "name", '"University of Ljubljana, Faculty of Electrical Engineering"@en'),
        (FOAF + "name", '"Univerza v Ljubljani, Fakulteta za elektrotehniko"@sl'),
        (FOAF + "mbox", "<mailto:dekanat@example-fe.uni-lj.si>"),
    }
    [attribution] = objects(ts, subject, PROV + "qualifiedAttribution")
    [agent] = objects(ts, attribution, PROV + "agent")  # type: ignore[arg-type]
    assert described(ts, agent) == {
        (str(A.value), f"<{FOAF}Agent>"),
        (str(A.value), f"<{FOAF}Person>"),
        (FOAF + "name", '"France Mihelič"'),
        (FOAF + "mbox", "<mailto:france.mihelic@example-fe.uni-lj.si>"),
    }


def test_a_version_named_by_the_source_is_a_relation_and_the_node_no_source() -> None:
    ds = mapped("speech-corpus", 0)
    ts = triples(ds)
    subject = NamedNode(ds.dataset_iri)
    assert objects(ts, subject, DCT + "hasVersion") == []
    [version] = objects(ts, subject, DCT + "relation")
    assert described(ts, version) == {
        (RDFS + "label", '"Slovene Broadcast News Speech Corpus 1.0"')
    }
    [note] = [f for f in ds.findings if f.rule == "ms-relation-generalised"]
    assert note.severity is Severity.INFO and "hasVersion" in note.message
    assert objects(ts, subject, DCT + "isPartOf") == [
        NamedNode("https://www.clarin.si/repository/xmlui/handle/11356/1000")
    ]
    # the node is named by the provenance statement, not as a dct:source (a dcat:Dataset)
    assert objects(ts, subject, DCT + "source") == []
    [statement] = objects(ts, subject, DCT + "provenance")
    [label] = objects(ts, statement, RDFS + "label")  # type: ignore[arg-type]
    assert isinstance(label, Literal) and f"node {NODE}," in label.value


def test_media_types_are_https_iana_iris_on_every_distribution() -> None:
    ds = mapped("speech-corpus", 0)
    ts = triples(ds)
    subject = NamedNode(ds.dataset_iri)
    distributions = objects(ts, subject, DCAT + "distribution")
    assert len(distributions) == 2  # one per licenceInfo
    iana = NamedNode("https://www.iana.org/assignments/media-types/audio/wav")
    for dist in distributions:
        assert objects(ts, dist, DCAT + "mediaType") == [iana]  # type: ignore[arg-type]
    assert Triple(iana, A, NamedNode(DCT + "MediaType")) in ts
    assert b"http://www.iana.org/" not in ds.ntriples


def test_a_service_has_one_licence_and_the_others_as_rights() -> None:
    ds = mapped("ner-service", 2)
    ts = triples(ds)
    subject = NamedNode(ds.dataset_iri)
    assert Triple(subject, A, NamedNode(DCAT + "DataService")) in ts
    [licence] = objects(ts, subject, DCT + "license")
    assert described(ts, licence) == {
        (str(A.value), f"<{DCT}LicenseDocument>"),
        (RDFS + "label", '"MPL"'),
    }
    rights = objects(ts, subject, DCT + "rights")
    assert sorted(sorted(described(ts, r)) for r in rights) == [
        [
            (str(A.value), f"<{DCT}RightsStatement>"),
            (
                RDFS + "label",
                '"also available under the licence CC-BY-NC-SA at'
                ' https://lindat.mff.cuni.cz/services/nametag/api/models"',
            ),
        ],
        [
            (str(A.value), f"<{DCT}RightsStatement>"),
            (RDFS + "label", '"restrictions of use: academic-nonCommercialUse"'),
        ],
    ]
    [note] = [f for f in ds.findings if f.rule == "ms-service-licence"]
    assert note.severity is Severity.INFO and "CC-BY-NC-SA" in note.message


def test_the_registered_publisher_is_the_lrs_publisher() -> None:
    ds = mapped("wordnet", 1)
    ts = triples(ds)
    [agent] = objects(ts, NamedNode(ds.dataset_iri), DCT + "publisher")
    assert described(ts, agent) == {
        (str(A.value), f"<{FOAF}Agent>"),
        (FOAF + "name", '"ELRA"'),
    }
