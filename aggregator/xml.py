"""The one hardened XML parser factory.

Every XML payload and every protocol response is parsed through :func:`parse_xml`: no entity
resolution, no DTD loading or validation, no network, no XInclude, no huge trees. A document
that declares a DOCTYPE with entities is refused outright (the classic billion-laughs and XXE
vectors both need one), and any parse error becomes :class:`ParseError` with the line number.
"""

from __future__ import annotations

import threading

from lxml import etree

from aggregator.errors import ParseError, UnsafeInputError

_local = threading.local()


def safe_parser() -> etree.XMLParser:
    """A per-thread lxml parser with every dangerous feature off (parsers are not thread-safe)."""
    parser: etree.XMLParser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = etree.XMLParser(
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            dtd_validation=False,
            huge_tree=False,
            remove_blank_text=False,
            collect_ids=False,
        )
        _local.parser = parser
    return parser


def parse_xml(data: bytes, *, url: str | None = None) -> etree._Element:
    """Parse bytes into an element tree root; raise ParseError/UnsafeInputError, never crash."""
    where = f" ({url})" if url else ""
    try:
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
