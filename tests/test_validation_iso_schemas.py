"""Where the ``iso19139-xsd`` step finds the ISO 19139 schemas: a directory the operator names
(``[validation.iso19139-xsd] schemas``), else an installed package that ships them; and the
errors when neither has them. The directories are made here from the schema files of the
installed pycsw (the dev extra), copied with their layout into a temporary directory."""

from __future__ import annotations

import importlib.metadata
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aggregator.config import ValidationStep, load_settings
from aggregator.core.errors import ConfigError
from aggregator.core.models import RawRecord
from aggregator.jobs.processing import build_chain, process
from aggregator.mapping.base import MappingContext
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.iso_xsd import Iso19139XsdValidator, schema_root

SAMPLES = Path(__file__).parents[1] / "aggregator" / "demo" / "peers" / "data" / "iso"
DATASET = (SAMPLES / "gemini-dataset-flood-risk.xml").read_text(encoding="utf-8")
BROKEN = DATASET.replace("<gmd:fileIdentifier>", "<gmd:fileIdentifierX>", 1).replace(
    "</gmd:fileIdentifier>", "</gmd:fileIdentifierX>", 1
)
CTX = MappingContext("http://127.0.0.1:8000/", "gemini")
SOURCE = "[sources.gemini]\ntype = 'oai-pmh'\nurl = 'http://127.0.0.1:9/oai'\nformat = 'iso19139'\n"
ISO = Path("plugins", "profiles", "apiso", "schemas", "ogc", "iso", "19139")


def _raw(text: str) -> RawRecord:
    return RawRecord("gemini", "rec", "iso19139", text.encode(), "application/xml")


def _pycsw_package() -> Path:
    """The installed pycsw package directory (found from its file list, not imported)."""
    return schema_root("pycsw").parents[len(ISO.parts) - 1]


def _copy(to: Path, *parts: Path) -> Path:
    """Copy these folders of the installed pycsw into ``to`` with their relative layout."""
    package = _pycsw_package()
    for part in parts:
        shutil.copytree(package / part, to / part)
    return to / ISO


def _settings(tmp_path: Path, schemas: str) -> tuple[ValidationStep, ...]:
    path = tmp_path / "aggregator.toml"
    path.write_text(
        SOURCE + f"\n[validation.iso19139-xsd]\nschemas = '{schemas}'\n", encoding="utf-8"
    )
    return load_settings(path).source("gemini").validation


def test_the_schemas_come_from_the_directory_the_operator_names(tmp_path: Path) -> None:
    # the GML and XLink schemas the ISO ones import come along, where the imports expect them
    root = _copy(tmp_path / "ogc-copy", ISO, Path("core", "schemas"))
    chain = _settings(tmp_path, "ogc-copy/" + ISO.as_posix())  # relative to aggregator.toml
    [xsd_step] = [step for step in chain if step.validator == "iso19139-xsd"]
    options = dict(xsd_step.options)
    assert options["schemas"] == str(root.resolve())
    build_chain(chain)

    validator = Iso19139XsdValidator(**options)
    assert validator.schema_file == root.resolve() / "20070417" / "gmd" / "gmd.xsd"
    assert validator.compiled is not Iso19139XsdValidator().compiled  # not the package's
    assert validator.validate_payload(ParsedPayload(_raw(DATASET))).conforms
    report = validator.validate_payload(ParsedPayload(_raw(BROKEN)))
    assert not report.conforms and report.findings[0].rule.startswith("SCHEMAV_")
    result = process(_raw(BROKEN), CTX, chain)
    assert {f.step for f in result.failure} == {"iso19139-xsd"}

    again = pickle.loads(pickle.dumps(validator))  # worker processes get the same directory
    assert again.schemas == options["schemas"] and again.compiled is validator.compiled


def test_a_directory_that_is_not_there_fails_when_the_configuration_is_read(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match=r"iso19139-xsd\.schemas: no such directory"):
        _settings(tmp_path, "nowhere")


def test_a_directory_without_the_schemas_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    chain = _settings(tmp_path, "empty")
    with pytest.raises(ConfigError, match=r"lacks 20070417/gmd/gmd\.xsd, 20070417/gmx/gmx\.xsd"):
        build_chain(chain)


def test_imports_that_do_not_resolve_locally_fail_and_nothing_is_fetched(tmp_path: Path) -> None:
    # the ISO schemas alone: their GML and XLink imports point outside the copy
    _copy(tmp_path / "iso-only", ISO)
    chain = _settings(tmp_path, "iso-only/" + ISO.as_posix())
    with pytest.raises(ConfigError, match="cannot be compiled from local files"):
        build_chain(chain)


def test_without_schemas_anywhere_the_error_names_both_ways() -> None:
    with pytest.raises(ConfigError) as caught:
        schema_root("no_such_distribution_for_iso_schemas")
    message = str(caught.value)
    assert "[validation.iso19139-xsd] schemas" in message
    assert "pip install 'ld-aggregator[iso]'" in message
    assert "never fetched" in message


def test_an_installed_package_without_the_schemas_is_named() -> None:
    version = importlib.metadata.version("lxml")
    with pytest.raises(ConfigError, match=f"the installed lxml {version} ships no complete set"):
        schema_root("lxml")


def test_the_package_schemas_are_found_without_importing_the_package() -> None:
    # pycsw's __init__ imports pkg_resources (gone from setuptools 81): a fresh interpreter
    code = (
        "import sys\n"
        "from aggregator.validate.iso_xsd import Iso19139XsdValidator\n"
        "Iso19139XsdValidator()\n"
        "assert 'pycsw' not in sys.modules, 'pycsw was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
