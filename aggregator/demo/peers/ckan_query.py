"""The part of Solr's query syntax the CKAN peer reads in ``package_search``'s ``fq`` and ``sort``.

A CKAN portal hands ``fq`` to Solr (prefixed with ``+capacity:public``, and with ``q.op=AND``,
so clauses side by side must all hold). The peer understands what harvesters send:

* clauses joined by ``AND`` or by a space, optionally ``+``-prefixed and grouped in
  parentheses: ``(organization:x) AND (metadata_modified:[A TO *])``;
* ranges ``field:[low TO high]`` with ``[``/``]`` inclusive and ``{``/``}`` exclusive bounds,
  mixed as Solr allows (``{A TO *]``), ``*`` for an open end, endpoints bare or quoted;
* terms ``field:value`` and ``field:"value"``; ``*:*`` (everything).

``OR``, ``NOT`` and ``-`` are refused (:class:`QueryError`, which the peer answers as CKAN
answers a query Solr cannot parse), never silently ignored.

Dates (``metadata_modified``, ``metadata_created``) compare and sort at **millisecond**
precision, as Solr's date fields store them: CKAN indexes ``2015-09-15T13:17:51.405474`` and
Solr keeps ``2015-09-15T13:17:51.405Z``, so two packages modified within one millisecond are
equal for ``sort`` and for a range, and ``id`` orders them. Strings compare by code point,
as Solr's ``StrField`` sorts (UTF-8 byte order). ``organization`` is the organization's
name, ``tags``/``groups`` match any of their names. Sorting, a package without a date is at
the epoch (Solr's missing value for a date field), one without a string field last.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

DATE_FIELDS = frozenset({"metadata_modified", "metadata_created"})
EPOCH = datetime(1970, 1, 1)  # what Solr sorts a document without the date field as
SORT_FIELDS = frozenset({"metadata_modified", "metadata_created", "id", "name", "score"})
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_CLAUSE = re.compile(
    r"(?P<field>[A-Za-z_][\w.]*|\*):(?:"
    rf"(?P<open>[\[{{])\s*(?P<low>{_QUOTED}|[^\s\]}}]+)\s+TO\s+"
    rf"(?P<high>{_QUOTED}|[^\s\]}}]+)\s*(?P<close>[\]}}])"
    rf"|(?P<value>{_QUOTED}|(?![\[{{])(?:\\.|[^\s()\\])+))"
)
_REFUSED = re.compile(r"(?:OR|NOT|&&|\|\|)(?=[\s(]|$)")


class QueryError(ValueError):
    """A query the peer does not understand (Solr would answer a parse error, or the peer
    does not implement it)."""


@lru_cache(maxsize=65536)
def solr_time(value: str) -> datetime:
    """A date as Solr holds it: naive UTC, truncated to milliseconds (QueryError if unreadable)."""
    try:
        when = datetime.fromisoformat(value.strip().removesuffix("Z"))
    except ValueError as err:
        raise QueryError(f"Invalid Date String: {value!r}") from err
    return when.replace(microsecond=when.microsecond // 1000 * 1000, tzinfo=None)


def _unescape(token: str) -> str:
    if token.startswith('"') and token.endswith('"') and len(token) >= 2:
        token = token[1:-1]
    return re.sub(r"\\(.)", r"\1", token)


def field_values(package: dict[str, Any], field: str) -> list[Any]:
    """What the search index holds for ``field`` of ``package`` (dates as :func:`solr_time`)."""
    value = package.get(field)
    if field == "organization":
        value = (value or {}).get("name") if isinstance(value, dict) else value
    if field in ("tags", "groups") and isinstance(value, list):
        return [v.get("name") for v in value if isinstance(v, dict)]
    if value is None or value == "":
        return []
    if field in DATE_FIELDS:
        try:
            return [solr_time(str(value))]
        except QueryError:
            return []
    return [str(value)]


@dataclass(frozen=True, slots=True)
class Clause:
    field: str
    low: Any = None  # None: open (``*``)
    high: Any = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    equals: Any = None  # a term clause: the value (range bounds unused)
    everything: bool = False  # ``*:*``

    def holds(self, package: dict[str, Any]) -> bool:
        if self.everything:
            return True
        return any(self.admits(v) for v in field_values(package, self.field))

    def admits(self, value: Any) -> bool:
        """Whether one indexed value (as :func:`field_values` gives it) passes."""
        if self.equals is not None:
            return bool(value == self.equals)
        if self.low is not None and (
            value < self.low or (value == self.low and not self.low_inclusive)
        ):
            return False
        high = self.high
        return high is None or value < high or (value == high and self.high_inclusive)


@dataclass(frozen=True, slots=True)
class Query:
    """The conjunction of an ``fq``'s clauses."""

    clauses: tuple[Clause, ...] = ()

    def matches(self, package: dict[str, Any]) -> bool:
        return all(clause.holds(package) for clause in self.clauses)

    def ranges(self, field: str) -> list[Clause]:
        return [c for c in self.clauses if c.field == field and not c.everything]


def _endpoint(field: str, bound: str) -> Any:
    if bound == "*":
        return None
    text = _unescape(bound)
    return solr_time(text) if field in DATE_FIELDS else text


def parse_fq(text: str) -> Query:
    """The conjunction ``text`` says (QueryError for what the peer does not read)."""
    clauses: list[Clause] = []
    depth = 0
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char.isspace() or char == "+":
            pos += 1
        elif char == "(":
            depth += 1
            pos += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise QueryError(f"unbalanced ')' at {pos} in {text!r}")
            pos += 1
        elif text.startswith("AND", pos) and (pos + 3 == len(text) or text[pos + 3] in " ("):
            pos += 3
        elif _REFUSED.match(text, pos) or char == "-":
            raise QueryError(f"only conjunctions are supported, not {text[pos : pos + 20]!r}")
        else:
            found = _CLAUSE.match(text, pos)
            if found is None:
                raise QueryError(f"cannot parse {text[pos : pos + 40]!r}")
            clauses.append(_clause(found))
            pos = found.end()
    if depth != 0:
        raise QueryError(f"unbalanced '(' in {text!r}")
    return Query(tuple(clauses))


def _clause(found: re.Match[str]) -> Clause:
    field = found["field"]
    if found["value"] is not None:
        if field == "*" and found["value"] == "*":
            return Clause(field, everything=True)
        value = _unescape(found["value"])
        return Clause(field, equals=solr_time(value) if field in DATE_FIELDS else value)
    if field == "*":
        raise QueryError("a range needs a field")
    return Clause(
        field,
        low=_endpoint(field, found["low"]),
        high=_endpoint(field, found["high"]),
        low_inclusive=found["open"] == "[",
        high_inclusive=found["close"] == "]",
    )


def parse_sort(text: str) -> list[tuple[str, bool]]:
    """``field asc|desc, ...`` as (field, ascending) pairs (QueryError for an unknown field)."""
    out = []
    for part in text.split(","):
        words = part.split()
        if not words:
            continue
        field = words[0]
        direction = words[1].lower() if len(words) > 1 else "asc"
        if field not in SORT_FIELDS or direction not in ("asc", "desc") or len(words) > 2:
            raise QueryError(f"cannot sort by {part.strip()!r}")
        out.append((field, direction == "asc"))
    return out


def sort_packages(
    packages: list[dict[str, Any]], sort: Sequence[tuple[str, bool]]
) -> list[dict[str, Any]]:
    """``packages`` in ``sort`` order, as Solr sorts CKAN's fields: dates at millisecond
    precision, a package without the date as if it had the epoch (Solr's missing value 0:
    first when ascending); a package without a string field last either way (CKAN's string
    type is ``sortMissingLast``)."""
    for field, ascending in reversed(sort):
        if field == "score":
            continue
        keyed = [(field_values(p, field), p) for p in packages]
        if field in DATE_FIELDS:
            keyed = [(values or [EPOCH], p) for values, p in keyed]
        present = [(values[0], p) for values, p in keyed if values]
        present.sort(key=lambda pair: pair[0], reverse=not ascending)
        packages = [p for _, p in present] + [p for values, p in keyed if not values]
    return packages
