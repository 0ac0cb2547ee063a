"""The one hardened XML parser factory.

Every XML payload and every protocol response is parsed through :func:`parse_xml`: no entity
resolution, no DTD loading or validation, no network, no XInclude, no huge trees (libxml2's
default limits: depth 256, text nodes of 10 MB, entity amplification). A document that
declares a DOCTYPE is refused outright with :class:`UnsafeInputError` (the classic
billion-laughs, quadratic-blowup and XXE vectors all need one) *before* its internal subset
is read: a first pass stops at the DOCTYPE or at the root element, whichever comes first.
Any other parse error becomes :class:`ParseError` with the line number.

Parsers are kept per thread (lxml parsers must not be shared by concurrent parses), so
:func:`parse_xml` may be called from any number of threads.
"""

from __future__ import annotations

import threading
from typing import Any

from lxml import etree

from aggregator.errors import ParseError, UnsafeInputError

_local = threading.local()


class _Doctype(Exception):
    pass


class _RootReached(Exception):
    pass


class _PrologScan:
    """A parser target that stops at the first DOCTYPE or the root element."""

    def doctype(self, name: str | None, pubid: str | None, system: str | None) -> None:
        raise _Doctype(name or "")

    def start(self, tag: str | bytes, attrib: Any, nsmap: Any = None) -> None:
        raise _RootReached(tag)

    def end(self, tag: str | bytes) -> None:
        pass

    def data(self, data: str | bytes) -> None:
        pass

    def comment(self, text: str | bytes) -> None:
        pass

    def close(self) -> None:
        return None


def _options() -> dict[str, Any]:
    return {
        "resolve_entities": False,
        "no_network": True,
        "load_dtd": False,
        "dtd_validation": False,
        "attribute_defaults": False,
        "huge_tree": False,
    }


def safe_parser() -> etree.XMLParser:
    """A per-thread lxml parser with every dangerous feature off (parsers are not thread-safe)."""
    parser: etree.XMLParser | None = getattr(_local, "parser", None)
    if parser is None:
        # Not collect_ids=False: lxml implements it through libxml2's "loadsubset" flags,
        # which makes libxml2 load the external DTD subset (file or, but for no_network,
        # URL) even with load_dtd=False. Proven by tests/test_xml_safety.py.
        parser = etree.XMLParser(remove_blank_text=False, **_options())
        _local.parser = parser
    return parser


def _scan_parser() -> etree.XMLParser:
    parser: etree.XMLParser | None = getattr(_local, "scan", None)
    if parser is None:
        parser = etree.XMLParser(target=_PrologScan(), **_options())
        _local.scan = parser
    return parser


def _refuse_doctype(data: bytes, where: str) -> None:
    """Raise UnsafeInputError if the prolog holds a DOCTYPE; reads no further than the root."""
    try:
        etree.fromstring(data, parser=_scan_parser())
    except _Doctype as err:
        raise UnsafeInputError(f"XML with a DOCTYPE declaration is refused{where}") from err
    except (_RootReached, etree.XMLSyntaxError, ValueError):
        pass  # no DOCTYPE before the root; syntax errors are reported by the real parse


def parse_xml(data: bytes, *, url: str | None = None) -> etree._Element:
    """Parse bytes into an element tree root; raise ParseError/UnsafeInputError, never crash."""
    where = f" ({url})" if url else ""
    _refuse_doctype(data, where)
    try:
        if url is None:
            root = etree.fromstring(data, parser=safe_parser())
        else:
            root = etree.fromstring(data, parser=safe_parser(), base_url=url)
    except etree.XMLSyntaxError as err:
        line = err.lineno if err.lineno else "?"
        raise ParseError(f"malformed XML{where} at line {line}: {err.msg}") from err
    except ValueError as err:  # e.g. a str with an encoding declaration
        raise ParseError(f"malformed XML{where}: {err}") from err
    docinfo = root.getroottree().docinfo
    if docinfo.internalDTD is not None or docinfo.externalDTD is not None or docinfo.doctype:
        raise UnsafeInputError(f"XML with a DOCTYPE declaration is refused{where}")
    return root
