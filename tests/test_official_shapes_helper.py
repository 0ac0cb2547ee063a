"""The helper that reads the official DCAT-AP 3.0.1 shapes finds what they say is wrong."""

from __future__ import annotations

from official_shapes import official_violations

DATASET = (
    "<http://x.example/ds> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
    " <http://www.w3.org/ns/dcat#Dataset> .\n"
    '<http://x.example/ds> <http://purl.org/dc/terms/title> "Rivers"@en .\n'
    '<http://x.example/ds> <http://purl.org/dc/terms/description> "All rivers"@en .\n'
)
CONTACT = "<http://x.example/ds> <http://www.w3.org/ns/dcat#contactPoint> <http://x.example/cp> .\n"
TYPED = (
    "<http://x.example/cp> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
    " <http://www.w3.org/2006/vcard/ns#Kind> .\n"
)


def test_an_untyped_contact_point_breaks_the_range_and_a_typed_one_conforms() -> None:
    assert official_violations(DATASET) == []
    [found] = official_violations(DATASET + CONTACT)
    assert found.path == "http://www.w3.org/ns/dcat#contactPoint"
    assert official_violations(DATASET + CONTACT, with_range=False) == []
    assert official_violations(DATASET + CONTACT + TYPED) == []


def test_a_link_to_a_dataset_another_record_describes_is_not_counted() -> None:
    link = "<http://x.example/ds> <http://www.w3.org/ns/dcat#inSeries> <http://x.example/s> .\n"
    assert official_violations(DATASET + link) == []
