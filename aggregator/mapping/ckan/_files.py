"""The CKAN field kinds that describe a file: its size, its checksum and its format (the EU
file type when the format name is one's code). Registered in :data:`._values.KINDS`."""

from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from typing import Any

from pyoxigraph import BlankNode, Literal, NamedNode

from aggregator.core.models import Severity
from aggregator.core.resources import bundled
from aggregator.mapping.ckan._graph import (
    _HASH_BY_LENGTH,
    ALGORITHM,
    CHECKSUM,
    CHECKSUM_VALUE,
    HEX,
    A,
    Graph,
    Subject,
    _items,
    is_url,
    text_of,
)


def emit_size(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    text = text_of(value)
    if text is None:
        return
    if isinstance(value, float) and value.is_integer():
        text = str(int(value))
    g.add(s, p, Literal(text))


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_PREFIXED = re.compile(r"(?i)(md5|sha-?1|sha-?224|sha-?256|sha-?384|sha-?512)[:=](.+)")


def emit_checksum(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    """``{algorithm, checksum_value}`` (or plain CKAN's ``hash``, which portals also write as
    ``sha256:<hex>``) -> spdx:Checksum. DCAT-AP 3.0.1 wants a hexadecimal value and an
    algorithm; a hash that gives neither (free text, base64, a hex string of no known length
    without an algorithm) is not written as a checksum but kept as the WARNING finding
    ``ckan-hash-not-checksum`` quoting it."""
    for item in _items(value):
        if not isinstance(item, dict):
            continue
        digest = text_of(item.get("checksum_value") or item.get("value"))
        algorithm = text_of(item.get("algorithm"))
        if digest is None:
            continue
        prefixed = _PREFIXED.fullmatch(digest)
        if prefixed is not None:
            algorithm = algorithm or prefixed.group(1).lower().replace("-", "")
            digest = prefixed.group(2).strip()
        hexadecimal = len(digest) % 2 == 0 and all(c in _HEX_DIGITS for c in digest)
        if hexadecimal and algorithm is None:
            algorithm = _HASH_BY_LENGTH.get(len(digest))
        if not hexadecimal or algorithm is None:
            why = "not hexadecimal" if not hexadecimal else "no algorithm given or implied"
            g.note(
                s,
                "ckan-hash-not-checksum",
                f"hash {digest[:200]!r} ({why}): not written as an spdx:Checksum",
                Severity.WARNING,
            )
            continue
        node = BlankNode()
        g.add(s, p, node)
        g.add(node, A, CHECKSUM)
        g.add(node, CHECKSUM_VALUE, Literal(digest.lower(), datatype=HEX))
        g.add(node, ALGORITHM, NamedNode(algorithm) if is_url(algorithm) else Literal(algorithm))


FILE_TYPE = "http://publications.europa.eu/resource/authority/file-type/"
_CODE_SEPARATORS = re.compile(r"[\s.-]+")


@lru_cache(maxsize=1)
def file_type_codes() -> frozenset[str]:
    """The EU file-type codes of ``mappings/mqa-formats.toml`` (GEOTIFF, NETCDF, XHTML, ...)."""
    with bundled("mappings", "mqa-formats.toml").open("rb") as handle:
        rows = tomllib.load(handle).get("format", [])
    return frozenset(str(row["code"]) for row in rows if isinstance(row, dict) and "code" in row)


def file_type(text: str) -> NamedNode | None:
    """The EU file-type term a format name is the code of (``GeoTIFF`` -> GEOTIFF), if any."""
    code = _CODE_SEPARATORS.sub("_", text.strip().lstrip(".").upper())
    return NamedNode(FILE_TYPE + code) if code in file_type_codes() else None


def emit_format(g: Graph, s: Subject, p: NamedNode, value: Any) -> None:
    """A format name: the EU file-type term when it is one's code, else a literal (which the
    dcat rules look up by name, media type and alias, or keep as a labelled node)."""
    for item in _items(value):
        text = text_of(item.get("label")) if isinstance(item, dict) else text_of(item)
        if text is not None:
            g.add(s, p, file_type(text) or Literal(text))
