"""The ISO 19139 XML Schema step (``iso19139-xsd``): the OGC ISO/TS 19139 schemas as the
installed ``pycsw`` package ships them, never fetched.

``pycsw`` (the optional extra ``iso``: ``pip install 'ld-aggregator[iso]'``) carries the
2007-04-17 schemas of ``gmd``, ``gco``, ``gmx``, ``gsr``, ``gss``, ``gts`` (with GML 3.2.1 and
XLink) and the ``srv`` service schema of 2006-05-04. This step compiles them together, from the
installed files only (a schema import over the network is refused), once per process: a small
schema document of our own imports ``gmd``, ``gmx`` and ``srv``; libxml2 reads each namespace
once, so ``srv``'s own ``gmd`` import is answered by the 2007 ``gmd``. The package is located
without importing it (``importlib.util.find_spec``). Without it the step fails when the chain
is built (job start, ``aggregator config check``) with a ``ConfigError`` that says what to
install; it never falls back to the network.

Findings are those of the generic ``xsd`` validator (:mod:`aggregator.validate.xsd`):
``stage=Stage.XSD``, ``rule`` = libxml2's error type, the message, ``line N`` and the XPath.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal

from lxml import etree

from aggregator.errors import ConfigError
from aggregator.validate.base import Validator
from aggregator.validate.xml_rules import FileKey, file_key
from aggregator.validate.xsd import XsdValidator

PACKAGE = "pycsw"
SCHEMAS = Path("plugins", "profiles", "apiso", "schemas", "ogc", "iso", "19139")
IMPORTS = {
    "http://www.isotc211.org/2005/gmd": Path("20070417", "gmd", "gmd.xsd"),
    "http://www.isotc211.org/2005/gmx": Path("20070417", "gmx", "gmx.xsd"),
    "http://www.isotc211.org/2005/srv": Path("20060504", "srv", "srv.xsd"),
}
INSTALL_HINT = (
    "the ISO 19139 XML schemas come from the pycsw package, which is not installed: "
    "pip install 'ld-aggregator[iso]' (they are never fetched from the network), or drop the "
    "iso19139-xsd step from the source's validation"
)


@dataclass(frozen=True, slots=True)
class IsoXsdOptions:
    max_findings: int = 50

    def __post_init__(self) -> None:
        if self.max_findings < 1:
            raise ValueError("max_findings must be at least 1")


def schema_root(package: str = PACKAGE) -> Path:
    """Where the installed pycsw keeps the ISO 19139 schemas; ConfigError if it is missing."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        root = Path(location) / SCHEMAS
        if all((root / rel).is_file() for rel in IMPORTS.values()):
            return root
    if locations:
        raise ConfigError(
            f"the installed pycsw ({locations[0]}) has no ISO 19139 schemas under {SCHEMAS}:"
            " install a pycsw 2.x release (pip install 'ld-aggregator[iso]')"
        )
    raise ConfigError(INSTALL_HINT)


def wrapper_document(root: Path) -> bytes:
    """The schema document that imports gmd, gmx and srv from ``root`` (file URIs)."""
    imports = "".join(
        f'<xs:import namespace="{ns}" schemaLocation="{(root / rel).as_uri()}"/>'
        for ns, rel in IMPORTS.items()
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


@lru_cache(maxsize=2)
def compiled(key: FileKey) -> Compiled:
    """The compiled ISO 19139 schema set (per process; keyed by gmd.xsd's path, size, mtime).

    The parser has ``no_network``: every import resolves to a file of the installed package."""
    root = Path(key[0]).parents[2]
    started = time.perf_counter()
    parser = etree.XMLParser(no_network=True, resolve_entities=False, load_dtd=False)
    base = (root / "ld-aggregator-wrapper.xsd").as_uri()  # never written: the base URI only
    tree = etree.ElementTree(etree.fromstring(wrapper_document(root), parser, base_url=base))
    try:
        schema = etree.XMLSchema(tree)
    except etree.XMLSchemaParseError as err:
        raise ConfigError(f"the ISO 19139 schemas in {root} cannot be compiled: {err}") from err
    return Compiled(schema, time.perf_counter() - started)


class Iso19139XsdValidator(XsdValidator):
    """XSD validation against the ISO 19139 schemas of the installed pycsw (no options but
    ``max_findings``)."""

    name: ClassVar[str] = "iso19139-xsd"
    target: ClassVar[Literal["payload", "graph"]] = "payload"
    Options: ClassVar[type[Any] | None] = IsoXsdOptions

    def __init__(self, max_findings: int = 50) -> None:
        # not super().__init__: that compiles an operator-given file, ours is built in memory
        gmd = schema_root() / IMPORTS["http://www.isotc211.org/2005/gmd"]
        self.schema_file = gmd
        self.max_findings = max_findings
        self.compiled = compiled(file_key(gmd, "XML schema"))
        self._schema = self.compiled.schema
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.max_findings,))

    def __repr__(self) -> str:
        return f"Iso19139XsdValidator(schemas={self.schema_file.parents[2]})"


__all__ = ["INSTALL_HINT", "Iso19139XsdValidator", "Validator", "schema_root"]
