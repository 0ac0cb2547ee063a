"""The MQA controlled vocabularies and the machine-readable / non-proprietary format table."""

from __future__ import annotations

from pathlib import Path

import pytest

from aggregator.core.errors import ConfigError
from aggregator.validate.quality.vocabularies import (
    DEFAULT_FORMATS_PATH,
    DEFAULT_VOCABULARIES_PATH,
    default_vocabularies,
    load_vocabularies,
)

EU = "http://publications.europa.eu/resource/authority/"
V = default_vocabularies()


@pytest.mark.parametrize(
    ("iri", "known"),
    [
        (EU + "file-type/CSV", True),
        (EU + "file-type/RDF_TURTLE", True),
        (EU + "file-type/csv", False),  # codes are upper case
        (EU + "file-type/", False),
        ("https://publications.europa.eu/resource/authority/file-type/CSV", False),
        (EU + "licence/CC_BY_4_0", False),  # another authority table
    ],
)
def test_file_types(iri: str, known: bool) -> None:
    assert (iri in V.file_type) is known


@pytest.mark.parametrize(
    ("iri", "known"),
    [
        ("http://www.iana.org/assignments/media-types/text/csv", True),
        ("https://www.iana.org/assignments/media-types/text/csv", True),
        ("https://www.iana.org/assignments/media-types/application/vnd.geo+json", True),
        ("https://www.iana.org/assignments/media-types/csv", False),  # no top-level type
        ("https://www.iana.org/assignments/media-types/spreadsheet/xlsx", False),
        ("https://example.org/media-types/text/csv", False),
    ],
)
def test_media_types(iri: str, known: bool) -> None:
    assert (iri in V.media_type) is known


@pytest.mark.parametrize(
    ("iri", "known"),
    [
        (EU + "licence/CC_BY_4_0", True),
        (EU + "licence/EUPL_1_2", True),
        ("http://spdx.org/licenses/CC-BY-4.0", True),
        ("https://spdx.org/licenses/ODbL-1.0.html", True),
        ("https://creativecommons.org/licenses/by/4.0/", True),
        ("http://creativecommons.org/publicdomain/zero/1.0/", True),
        ("https://opendatacommons.org/licenses/odbl/1-0/", True),
        ("https://portal.example.net/terms-of-use", False),
        ("https://creativecommons.org/", False),
    ],
)
def test_licences(iri: str, known: bool) -> None:
    assert (iri in V.licence) is known


@pytest.mark.parametrize(
    ("code", "known"),
    [
        ("PUBLIC", True),
        ("RESTRICTED", True),
        ("NON_PUBLIC", True),
        ("OPEN", False),  # not in the table, although it looks like a code
        ("public", False),
    ],
)
def test_access_rights_are_listed_exactly(code: str, known: bool) -> None:
    assert (EU + "access-right/" + code in V.access_right) is known


@pytest.mark.parametrize(
    ("code", "machine_readable", "non_proprietary"),
    [
        ("CSV", True, True),
        ("JSON", True, True),
        ("RDF_TURTLE", True, True),
        ("GEOJSON", True, True),
        ("XLSX", True, False),
        ("SHP", True, False),
        ("PDF", False, True),
        ("HTML", False, True),
        ("ZIP", False, True),
        ("DOCX", False, False),
        ("WMS_SRVC", False, True),
    ],
)
def test_format_table(code: str, machine_readable: bool, non_proprietary: bool) -> None:
    row = V.format_of(EU + "file-type/" + code, None)
    assert row is not None
    assert (row.machine_readable, row.non_proprietary) == (machine_readable, non_proprietary)


def test_format_lookup_falls_back_on_the_media_type() -> None:
    csv = V.format_of(None, "https://www.iana.org/assignments/media-types/text/csv")
    assert csv is not None and csv.code == "CSV"
    # a format IRI outside the table: the media type decides
    row = V.format_of(
        EU + "file-type/UNKNOWN_THING", "http://www.iana.org/assignments/media-types/text/xml"
    )
    assert row is not None and row.code == "XML"
    assert V.format_of(EU + "file-type/UNKNOWN_THING", None) is None
    assert V.format_of("https://example.org/csv", None) is None


def test_every_code_of_the_table_is_a_file_type_code() -> None:
    for code in V.formats:
        assert EU + "file-type/" + code in V.file_type, code


def _write(tmp_path: Path, vocab: str, formats: str) -> tuple[Path, Path]:
    v, f = tmp_path / "v.toml", tmp_path / "f.toml"
    v.write_text(vocab, encoding="utf-8")
    f.write_text(formats, encoding="utf-8")
    return v, f


def test_malformed_tables_are_refused(tmp_path: Path) -> None:
    vocab = DEFAULT_VOCABULARIES_PATH.read_text(encoding="utf-8")
    formats = DEFAULT_FORMATS_PATH.read_text(encoding="utf-8")
    cases = [
        (vocab.replace("[access-right]", "[access-rights]"), formats, "access-right"),
        (vocab.replace('pattern = "[A-Z0-9][A-Z0-9_]*"', 'pattern = "[A-Z"'), formats, "pattern"),
        (vocab, formats.replace("non-proprietary = true", 'non-proprietary = "yes"', 1), "true or"),
        (
            vocab,
            formats + '\n[[format]]\ncode = "CSV"\nmachine-readable = true\n'
            "non-proprietary = true\n",
            "twice",
        ),
        (
            vocab,
            formats.replace('media-types = ["text/plain"]', 'media-types = ["text/csv"]'),
            "both",
        ),
        (vocab, "x = 1\n", "no \\[\\[format\\]\\]"),
        ("not toml [", formats, "v.toml"),
    ]
    for v_text, f_text, message in cases:
        v, f = _write(tmp_path, v_text, f_text)
        with pytest.raises(ConfigError, match=message):
            load_vocabularies(v, f)
    v, f = _write(tmp_path, vocab, formats)
    assert load_vocabularies(v, f) == V
