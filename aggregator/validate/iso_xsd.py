"""The ISO 19139 XML Schema step (``iso19139-xsd``): the OGC ISO/TS 19139 schemas, from a
directory the operator names or from an installed package that ships them; never fetched.

The step needs the 2007-04-17 schemas of ``gmd``, ``gco``, ``gmx``, ``gsr``, ``gss``, ``gts``
(with the GML 3.2.1 and XLink schemas they import) and the ``srv`` service schema of
2006-05-04, laid out as the OGC publishes them under ``iso/19139/``. They are found, in order:

1. in the directory named by the ``schemas`` option (``[validation.iso19139-xsd]``): the
   ``iso/19139`` folder of a local copy of the OGC schemas, whose imports of GML and XLink
   resolve inside that copy;
2. in an installed distribution of :data:`SCHEMA_DISTRIBUTIONS` (``pycsw``, the optional
   extra ``iso``: ``pip install 'ld-aggregator[iso]'``), located through its installed file
   list (:mod:`importlib.metadata`), never imported: no maintained PyPI package ships these
   schemas on their own (docs/validation.md lists what was checked).

This step compiles them together, from those files only (a schema import over the network is
refused), once per process: a small schema document of our own imports ``gmd``, ``gmx`` and
``srv``; libxml2 reads each namespace once, so ``srv``'s own ``gmd`` import is answered by the
2007 ``gmd``. Without them the step fails when the chain is built (job start, ``aggregator
config check``) with a ``ConfigError`` that says both ways to provide them; it never falls
back to the network.

ISO 19115-2 records (``gmi:MI_Metadata``) need the gmi schema of ISO/TS 19139-2, which the
OGC folder and pycsw 2.x do not ship: when the folder holds it as ``20070417/gmi/gmi.xsd``
(beside ``gmd/``; its own imports of gmd, gco and GML are answered by those already read), it
is compiled in and gmi records are validated against it. Without it a gmi record is not
checked against XML Schema and gets one warning that says so and where to put the schema
(the step does not fail on it: the Schematron steps still read the record).

Findings are those of the generic ``xsd`` validator (:mod:`aggregator.validate.xsd`):
``stage=Stage.XSD``, ``rule`` = libxml2's error type, the message, ``line N`` and the XPath.
"""

from __future__ import annotations

import importlib.metadata
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal

from lxml import etree

from aggregator.config.plugin_options import Directory
from aggregator.core.errors import ConfigError
from aggregator.core.models import Finding, Severity, Stage, ValidationReport
from aggregator.mapping.iso19139.records import MI_METADATA
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.base import Validator
from aggregator.validate.xml_rules import FileKey, file_key
from aggregator.validate.xsd import XsdValidator

# PyPI distributions that ship the OGC ISO 19139 schemas in their files (the first installed
# one that has them all is used)
SCHEMA_DISTRIBUTIONS = ("pycsw",)
IMPORTS = {
    "http://www.isotc211.org/2005/gmd": Path("20070417", "gmd", "gmd.xsd"),
    "http://www.isotc211.org/2005/gmx": Path("20070417", "gmx", "gmx.xsd"),
    "http://www.isotc211.org/2005/srv": Path("20060504", "srv", "srv.xsd"),
}
GMD = IMPORTS["http://www.isotc211.org/2005/gmd"]
#: the ISO 19115-2 schema (ISO/TS 19139-2), compiled in when the folder has it
GMI_NAMESPACE = "http://www.isotc211.org/2005/gmi"
GMI = Path("20070417", "gmi", "gmi.xsd")
_GMD_IN_A_DISTRIBUTION = "iso/19139/" + GMD.as_posix()
INSTALL_HINT = (
    "no ISO 19139 XML schemas: name the iso/19139 folder of a local copy of the OGC schemas"
    ' in [validation.iso19139-xsd] schemas = "...", or install a package that ships them:'
    " pip install 'ld-aggregator[iso]' (they are never fetched from the network); or drop"
    " the iso19139-xsd step from the source's validation"
)


@dataclass(frozen=True, slots=True)
class IsoXsdOptions:
    schemas: Directory | None = None  # the iso/19139 folder of a local copy of the OGC schemas
    max_findings: int = 50

    def __post_init__(self) -> None:
        if self.max_findings < 1:
            raise ValueError("max_findings must be at least 1")


def _missing(root: Path) -> list[str]:
    return [rel.as_posix() for rel in IMPORTS.values() if not (root / rel).is_file()]


def _shipped_by(distribution: str) -> Path | None:
    """The ``iso/19139`` folder an installed distribution ships, found in its file list (the
    package is not imported); None if it is not installed. ConfigError if it has no schemas."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.as_posix().endswith(_GMD_IN_A_DISTRIBUTION):
            root = Path(str(dist.locate_file(file))).parents[2]
            if not _missing(root):
                return root
    raise ConfigError(
        f"the installed {distribution} {dist.version} ships no complete set of ISO 19139"
        " schemas: install a pycsw 2.x release (pip install 'ld-aggregator[iso]') or name a"
        " directory in [validation.iso19139-xsd] schemas"
    )


def schema_root(distribution: str | None = None, directory: str | Path | None = None) -> Path:
    """The ``iso/19139`` folder to compile: ``directory`` if given (ConfigError if it lacks
    one of the entry schemas), else the one ``distribution`` ships (default: the first of
    :data:`SCHEMA_DISTRIBUTIONS` installed); ConfigError with :data:`INSTALL_HINT` if none."""
    if directory is not None:
        named = Path(directory)
        if missing := _missing(named):
            raise ConfigError(
                f"the ISO 19139 schema directory {named} lacks {', '.join(missing)}: name the"
                " iso/19139 folder of a copy of the OGC schemas (it holds 20070417/ and"
                " 20060504/)"
            )
        return named
    for name in (distribution,) if distribution else SCHEMA_DISTRIBUTIONS:
        if (shipped := _shipped_by(name)) is not None:
            return shipped
    raise ConfigError(INSTALL_HINT)


def wrapper_document(root: Path, gmi: bool = False) -> bytes:
    """The schema document that imports gmd, gmx and srv from ``root`` (file URIs), and gmi
    (after them, so that its imports of gmd and gco are answered by those) when asked."""
    imports = "".join(
        f'<xs:import namespace="{ns}" schemaLocation="{(root / rel).as_uri()}"/>'
        for ns, rel in (*IMPORTS.items(), *([(GMI_NAMESPACE, GMI)] if gmi else []))
    )
    return (
        '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"'
        ' targetNamespace="https://w3id.org/ld-aggregator/ns/iso19139-schemas"'
        f' elementFormDefault="qualified">{imports}</xs:schema>'
    ).encode()


@dataclass(frozen=True, slots=True)
class Compiled:
    schema: etree.XMLSchema
    seconds: float  # how long compiling took (reported by `aggregator config check`, bench)
    gmi: bool = False  # the ISO 19115-2 schema is compiled in


@lru_cache(maxsize=2)
def compiled(key: FileKey, gmi_key: FileKey | None = None) -> Compiled:
    """The compiled ISO 19139 schema set (per process; keyed by gmd.xsd's path, size, mtime,
    and gmi.xsd's when the folder has one).

    The parser has ``no_network``: every import resolves to a local file, or compiling fails."""
    root = Path(key[0]).parents[2]
    started = time.perf_counter()
    parser = etree.XMLParser(no_network=True, resolve_entities=False, load_dtd=False)
    base = (root / "ld-aggregator-wrapper.xsd").as_uri()  # never written: the base URI only
    wrapper = wrapper_document(root, gmi=gmi_key is not None)
    tree = etree.ElementTree(etree.fromstring(wrapper, parser, base_url=base))
    try:
        schema = etree.XMLSchema(tree)
    except etree.XMLSchemaParseError as err:
        raise ConfigError(
            f"the ISO 19139 schemas in {root} cannot be compiled from local files"
            f" (their GML and XLink imports must resolve inside the copy): {err}"
        ) from err
    return Compiled(schema, time.perf_counter() - started, gmi_key is not None)


class Iso19139XsdValidator(XsdValidator):
    """XSD validation against the ISO 19139 schemas (options: ``schemas``, a directory with
    them, else those of an installed package; ``max_findings``)."""

    name: ClassVar[str] = "iso19139-xsd"
    target: ClassVar[Literal["payload", "graph"]] = "payload"
    Options: ClassVar[type[Any] | None] = IsoXsdOptions

    def __init__(self, max_findings: int = 50, schemas: str | None = None) -> None:
        # not super().__init__: that compiles an operator-given file, ours is built in memory
        root = schema_root(directory=schemas)
        gmd, gmi = root / GMD, root / GMI
        self.schemas = schemas
        self.schema_file = gmd
        self.max_findings = max_findings
        gmi_key = file_key(gmi, "XML schema") if gmi.is_file() else None
        self.compiled = compiled(file_key(gmd, "XML schema"), gmi_key)
        self._schema = self.compiled.schema
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.max_findings, self.schemas))

    def __repr__(self) -> str:
        return f"Iso19139XsdValidator(schemas={self.schema_file.parents[2]})"

    def validate_payload(self, payload: ParsedPayload) -> ValidationReport:
        if self.compiled.gmi or payload.xml().tag != MI_METADATA:
            return super().validate_payload(payload)
        # no gmi schema: say so, rather than libxml2's "no matching global declaration"
        root = self.schema_file.parents[2]
        where = (
            f"put it at {root / GMI}"
            if self.schemas
            else "name a copy of the OGC iso/19139 folder that holds it as"
            f" {GMI.as_posix()} in [validation.iso19139-xsd] schemas"
        )
        message = (
            "gmi:MI_Metadata (ISO 19115-2) not checked against XML Schema: the ISO 19139"
            f" schemas in {root} have no gmi schema (ISO/TS 19139-2); {where} to have gmi"
            " records validated"
        )
        finding = Finding(Stage.XSD, Severity.WARNING, "iso19115-2-schema-missing", message)
        return ValidationReport(self.name, (finding,))


__all__ = [
    "INSTALL_HINT",
    "SCHEMA_DISTRIBUTIONS",
    "Iso19139XsdValidator",
    "Validator",
    "schema_root",
]
