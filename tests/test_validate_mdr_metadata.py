"""The mdr-metadata validator: the standard metadata schema as a portal's profile sets it."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

from aggregator.core.errors import ConfigError
from aggregator.core.models import RawRecord
from aggregator.demo.peers.mdr_messages import page_element
from aggregator.demo.peers.mdr_pages import MdrPage, load_sample_pages
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.mdr_metadata import MdrMetadataValidator


def findings(page: MdrPage, validator: MdrMetadataValidator | None = None) -> list[tuple[Any, ...]]:
    raw = RawRecord(
        "portal", page.identifier, "mdr", etree.tostring(page_element(page)), "application/xml"
    )
    report = (validator or MdrMetadataValidator()).validate_payload(ParsedPayload(raw))
    return [(f.location, f.rule, f.message) for f in report.findings]


def page(**changes: Any) -> MdrPage:
    p = load_sample_pages()[0]
    for key, value in changes.items():
        if value is None:
            p.metadata.pop(key, None)
        else:
            p.metadata[key] = value
    return p


def test_a_valid_page_has_no_findings() -> None:
    assert findings(page()) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"title": None}, ("Title", "mandatory", "Title: a value is required")),
        ({"title": "t" * 129}, ("Title", "maxLength", "Title: 129 characters, at most 128")),
        (
            {"publisherPhone": "+91 " + "9" * 17},
            ("PublisherPhone", "maxLength", "PublisherPhone: 21 characters, at most 20"),
        ),
        (
            {"creatorDeptName": "d" * 65},
            ("CreatorDept", "maxLength", "CreatorDept: 65 characters, at most 64"),
        ),
        (
            {"description": "d" * 1025},
            ("Description", "maxLength", "Description: 1025 characters, at most 1024"),
        ),
        (
            {"type": "POEMS"},
            (
                "Type",
                "enumeration",
                "Type: 'POEMS' is not one of ACTS, CIRCULARS, CONTACTS, DOCUMENTS, EVENTS, FORMS,"
                " NEWS, NOTIFICATIONS, ... (14 in all)",
            ),
        ),
        (
            {"format": "image/png"},
            ("Format", "enumeration", "Format: 'image/png' is not one of text/html"),
        ),
        (
            {"language": "en"},
            (
                "Language",
                "enumeration",
                "Language: 'en' is not one of asm, ben, brx, doi, eng, guj, hin, kan,"
                " ... (23 in all)",
            ),
        ),
        (
            {"relation": [f"https://portal.example.gov.in/r{i}.html" for i in range(6)]},
            ("Relation", "maxValues", "Relation: 6 values, at most 5"),
        ),
        (
            {"relation": ["https://portal.example.gov.in/" + "r" * 100]},
            ("Relation", "maxLength", "Relation: 130 characters, at most 128"),
        ),
        (
            {"subjectClasification": ["Health", "Cricket"]},
            (
                "SubjectClassification",
                "enumeration",
                "SubjectClassification: 'Cricket' is not one of Agriculture, Business, Citizens,"
                " Education, Employment, Environment, Governance, Health, ... (16 in all)",
            ),
        ),
        (
            {"datePublished": "5 January 2026"},
            ("DatePublished", "dateTime", "DatePublished: '5 January 2026' is not a date-time"),
        ),
        (
            {"creatorEmail": "agri at example"},
            ("CreatorEmail", "email", "CreatorEmail: 'agri at example' is not an e-mail"),
        ),
    ],
)
def test_each_constraint(changes: dict[str, Any], expected: tuple[str, str, str]) -> None:
    assert findings(page(**changes)) == [expected]


def test_the_identifier_must_be_a_short_url() -> None:
    p = page()
    p.identifier = "https://portal.example.gov.in/" + "x" * 100
    assert findings(p) == [
        ("Identifier", "identifier", "Identifier: must be an http(s) URL of at most 128 chars")
    ]


def test_a_page_the_service_flagged() -> None:
    p = page()
    p.service_errors = ("PublisherAddress", "Type")
    [(where, rule, message)] = findings(p)
    assert (where, rule) == ("PublisherAddress", "serviceValidationError")
    assert "(PublisherAddress, Type)" in message


def test_a_portal_profile_lists_its_departments(tmp_path: Path) -> None:
    profile = tmp_path / "portal.toml"
    profile.write_text(
        """
[CreatorDept]
mandatory = true
max_length = 64
departments = [{ name = "Department of Agriculture", email = "agri-web@example.gov.in" }]
[CreatorEmail]
mandatory = true
[Title]
mandatory = true
max_length = 40
"""
    )
    validator = MdrMetadataValidator(str(profile))
    assert findings(page(), validator) == []
    assert findings(page(creatorDeptName="Department of Sports"), validator) == [
        (
            "CreatorDept",
            "enumeration",
            "CreatorDept: 'Department of Sports' is not one of Department of Agriculture",
        )
    ]
    assert findings(page(creatorEmail="someone@example.gov.in"), validator) == [
        (
            "CreatorEmail",
            "enumeration",
            "CreatorEmail: 'someone@example.gov.in' is not the address of a listed department",
        )
    ]
    # only what the profile says: no Format rule in it, so any format passes
    assert findings(page(format="image/png"), validator) == []
    assert pickle.loads(pickle.dumps(validator)).profile == validator.profile


def test_profile_errors_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[Colour]\nmandatory = true\n")
    with pytest.raises(
        ConfigError, match=r"\[Colour\]: not an attribute of the standard metadata schema"
    ):
        MdrMetadataValidator(str(bad))
    bad.write_text("[Title]\nmax_length = 0\n")
    with pytest.raises(ConfigError, match="max_length must be an integer from 1 to 65535"):
        MdrMetadataValidator(str(bad))
    with pytest.raises(ConfigError, match="No such file"):
        MdrMetadataValidator(str(tmp_path / "missing.toml"))
