"""The packages of a CKAN JSON document, whatever shape it has.

CKAN's action API answers ``{"help", "success", "result"}``: ``package_show`` with the
package as ``result``, ``package_search`` with ``result.results`` (a list of packages); a
failed call with ``success: false`` and ``error`` (``{"message", "__type"}``, or the fields
a validation error names). Files hold a bare package or a JSON list of packages. Each package
is one dataset.
"""

from __future__ import annotations

import json
from typing import Any

from aggregator.core.errors import MappingError


def _error_text(error: Any) -> str:
    """CKAN's error as it says it: ``Not Found Error: Not found`` (other members as JSON)."""
    if not isinstance(error, dict):
        return json.dumps(error, ensure_ascii=False)[:500]
    kind, message = error.get("__type"), error.get("message")
    rest = {k: v for k, v in error.items() if k not in ("__type", "message")}
    parts = [str(p) for p in (kind, message) if isinstance(p, str) and p]
    if rest:
        parts.append(json.dumps(rest, ensure_ascii=False)[:500])
    return ": ".join(parts) or "no error given"


def packages_of(value: Any, where: str) -> tuple[list[Any], bool]:
    """The packages of a parsed document and whether it holds several (a search answer or a
    list: each package one dataset), or a MappingError saying what the document is."""
    if isinstance(value, list):
        return value, True
    if not isinstance(value, dict):
        raise MappingError(f"{where} is not a CKAN package, list of packages or API answer")
    if value.get("success") is False:
        raise MappingError(
            f"{where} is a CKAN API error answer, not a package: {_error_text(value.get('error'))}"
        )
    result = value.get("result")
    if "success" not in value and not isinstance(result, dict):
        return [value], False  # a bare package
    if isinstance(result, dict) and isinstance(result.get("results"), list):
        return result["results"], True  # a package_search answer
    if isinstance(result, dict):
        return [result], False  # a package_show answer
    if isinstance(result, list):
        return result, True  # an answer listing packages
    raise MappingError(f"{where} is a CKAN API answer without a package (result: {result!r:.80})")
