"""The DMS publisher cross-check (validator ``iso-publisher``) on the bundled GEMINI records."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from aggregator.config import load_settings
from aggregator.core.errors import ConfigError
from aggregator.core.models import RawRecord, Severity, Stage
from aggregator.demo.peers.gemini_samples import bundled_gemini_records
from aggregator.jobs.processing import validator
from aggregator.mapping.payload import ParsedPayload
from aggregator.plugin import validators
from aggregator.validate.iso_publisher import IsoPublisherValidator, responsible_parties

SAMPLES = dict(bundled_gemini_records())
DATASET = SAMPLES["dataset-flood-zones.xml"]


def payload(body: bytes = DATASET) -> ParsedPayload:
    return ParsedPayload(RawRecord("s", "id", "iso19139", body, "application/xml"))


def test_registered() -> None:
    assert validators.get("iso-publisher") is IsoPublisherValidator


def test_responsible_parties_are_read() -> None:
    parties = responsible_parties(payload().xml())
    assert [(p.organisation, p.role) for p in parties] == [
        ("Riverside Environment Agency", "pointOfContact"),
        ("Riverside Environment Agency", "publisher"),
        ("Riverside Hydrology Consultants Ltd", "originator"),
    ]
    assert parties[1].emails == ("floodmaps@riverside-env.example.org",)
    assert parties[0].line is not None


@pytest.mark.parametrize(
    "publisher", ["Riverside Environment Agency", "  riverside   environment AGENCY "]
)
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_matching_publisher_name_passes(name: str, publisher: str) -> None:
    report = IsoPublisherValidator(publisher).validate_payload(payload(SAMPLES[name]))
    assert report.conforms and report.findings == ()


@pytest.mark.parametrize(
    ("kwargs", "conforms"),
    [
        ({"name": "Someone Else", "email": "FLOODMAPS@riverside-env.example.org"}, True),
        ({"name": "Riverside Hydrology Consultants Ltd"}, True),  # the originator counts
        ({"name": "Someone Else", "email": "someone@else.example.org"}, False),
    ],
)
def test_email_and_other_parties(kwargs: dict[str, str], conforms: bool) -> None:
    check = IsoPublisherValidator(kwargs["name"], email=kwargs.get("email", ""))
    assert check.validate_payload(payload()).conforms is conforms


def test_identifier_matches_an_anchor() -> None:
    body = DATASET.replace(
        b"<gco:CharacterString>Riverside Environment Agency</gco:CharacterString>",
        b'<gmx:Anchor xlink:href="https://org.example/id/rea">REA</gmx:Anchor>',
    )
    good = IsoPublisherValidator("Nobody", identifier="https://org.example/id/rea")
    assert good.validate_payload(payload(body)).conforms
    assert not IsoPublisherValidator("Nobody").validate_payload(payload(body)).conforms


@pytest.mark.parametrize(
    ("action", "severity"), [("reject", Severity.VIOLATION), ("warn", Severity.WARNING)]
)
def test_mismatch_is_reported_as_not_associated(action: str, severity: Severity) -> None:
    report = IsoPublisherValidator("Northshire County Council", action=action).validate_payload(
        payload()
    )
    (finding,) = report.findings
    assert finding.severity is severity and finding.stage is Stage.CHECK
    assert finding.rule == "publisherMismatch"
    assert finding.message.startswith(
        "not associated with the registered publisher 'Northshire County Council'"
    )
    assert "'Riverside Environment Agency'" in finding.message
    assert report.conforms is (action == "warn")


def test_roles_restrict_the_parties_that_count() -> None:
    only_publishers = IsoPublisherValidator(
        "Riverside Hydrology Consultants Ltd", roles=("publisher",)
    )
    assert not only_publishers.validate_payload(payload()).conforms


def test_pickles_for_the_workers() -> None:
    v = IsoPublisherValidator("Riverside Environment Agency", action="warn")
    copy = pickle.loads(pickle.dumps(v))
    assert copy.validate_payload(payload()).conforms


def test_a_chain_step_from_the_configuration(tmp_path: Path) -> None:
    config = tmp_path / "aggregator.toml"
    config.write_text(
        """
[store]
path = "data"
base_iri = "http://example.org/"

[sources.agency]
type = "waf"
url = "http://example.org/waf/"
format = "iso19139"
publisher = "Riverside Environment Agency"

[[sources.agency.validation]]
validator = "iso-publisher"
name = "publisher"
organisation = "Riverside Environment Agency"
action = "warn"
""",
        encoding="utf-8",
    )
    settings = load_settings(config)
    (step,) = settings.source("agency").validation
    assert step.label == "publisher"
    report = validator(step).validate_payload(payload())
    assert report.conforms


def test_empty_name_is_a_configuration_error(tmp_path: Path) -> None:
    from aggregator.config.plugin_options import read_options
    from aggregator.validate.iso_publisher import IsoPublisherOptions

    with pytest.raises(ConfigError, match="must not be empty"):
        read_options(IsoPublisherOptions, {"organisation": " "}, "sources.x.validation[0]")
