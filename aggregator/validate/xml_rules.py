"""What the XML payload validators (XSD, Schematron) share: loading operator-given rule files
without network access, a per-process cache of compiled rules keyed by file name, size and
mtime, and how a finding is located in the payload (line number and XPath)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from lxml import etree

from aggregator.core.errors import ConfigError

FileKey = tuple[str, int, int]
T = TypeVar("T")


class _LocalOnly(etree.Resolver):
    """Note every URL that is not a local file (an xs:import or sch:include over http).

    libxml2 is told not to use the network (``no_network``); this makes the refusal an error
    instead of a silently skipped import."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    def resolve(self, system_url: str, public_id: str, context: Any = None) -> Any:
        scheme = urlsplit(system_url or "").scheme.lower()
        if scheme not in ("", "file") and len(scheme) > 1:  # "C:" is a drive, not a scheme
            self.refused.append(system_url)
        return None


def file_key(path: Path, what: str) -> FileKey:
    try:
        st = path.stat()
    except OSError as err:
        raise ConfigError(f"cannot read {what} {path}: {err.strerror}") from err
    return (str(path), st.st_size, st.st_mtime_ns)


def compile_rules(path: Path, what: str, build: Callable[[etree._ElementTree], T]) -> T:
    """Parse a trusted rule file (XSD, Schematron) and compile it with ``build``: local
    includes and imports are read, anything over the network is refused (a ConfigError)."""
    resolver = _LocalOnly()
    parser = etree.XMLParser(no_network=True, resolve_entities=False, load_dtd=False)
    parser.resolvers.add(resolver)
    try:
        tree = etree.parse(str(path), parser)
    except (OSError, etree.XMLSyntaxError) as err:
        raise ConfigError(f"{what} {path} cannot be read: {err}") from err
    failure: ConfigError | None = None
    try:
        compiled = build(tree)
    except ConfigError as err:
        failure = err
    if resolver.refused:
        raise ConfigError(
            f"{what} {path} refers to {resolver.refused[0]}: rule files are read from local"
            " files only, never fetched (point to a local copy, or an installed package's)"
        )
    if failure is not None:
        raise failure
    return compiled


def line_of(root: etree._Element, xpath: str | None) -> str | None:
    """``line N`` of the first node an XPath location selects in the payload, if any."""
    if not xpath:
        return None
    try:
        found = root.xpath(xpath)
    except etree.XPathError:
        return None
    if isinstance(found, list) and found:
        node = found[0]
        if isinstance(node, etree._Element) and node.sourceline is not None:
            return f"line {node.sourceline}"
    return None
