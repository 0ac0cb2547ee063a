"""The size and content limits of every harvested payload (JSON, XML, RDF), in one place.

A record that passes a limit is refused alone, with :class:`InputLimitError` (code
``inputLimit``, a violation of the parse stage naming the limit and the value found); the
harvest goes on with the other records, and memory stays bounded by the limits, not by what
a source sends. The limits (``[input]`` in ``aggregator.toml``, :class:`InputLimits`):

* ``max_record_bytes``: one record's payload, checked before anything parses it. Collections
  (RDF dumps, one document of many datasets) are bounded by ``http.max_bytes`` only.
* ``max_text_length``: characters in one JSON string, XML text node or attribute, or RDF
  literal. Only payloads longer than the limit are walked, so records below it cost nothing.
  pyoxigraph cannot read an N-Triples line over 16 MiB back (a store, a feed, ``aggregator
  map`` parse them again), which a literal must stay well under.
* ``max_json_depth``: nesting of JSON arrays and objects (the json module's recursion and
  every recursive reader after it).
* ``max_triples``: triples a mapper may make of one record (the MDR mapper checks it as it
  goes: a 50 MB page of keywords made ~16 million triples and aborted the process).
* Integers in JSON longer than Python's ``sys.get_int_max_str_digits()`` (4,300 digits by
  default; the interpreter refuses to convert longer ones, a guard against quadratic time)
  and lone UTF-16 surrogates (``"\\ud800"``: JSON allows the escape, but it is not a Unicode
  character and cannot be written as UTF-8) are refused. XML has libxml2's own limits (depth
  256, text nodes of 10 MB, :mod:`aggregator.core.xml`).

Harvesters that split a JSON page into records (CKAN) read it with :func:`load_page` and write
each record with :func:`dump_record`, which keep an over-long integer and a lone surrogate in
the record's payload as the source sent them, so that the one record carrying it is refused
here, with the payload kept for ``aggregator rejected show``, and its page is not lost.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aggregator.core.errors import ParseError, UnsafeInputError

if TYPE_CHECKING:
    from lxml import etree
    from pyoxigraph import Quad

    from aggregator.core.models import RawRecord


class InputLimitError(UnsafeInputError):
    """A payload over one of the input limits: refused, alone."""

    code = "inputLimit"


@dataclass(frozen=True, slots=True)
class InputLimits:
    max_record_bytes: int = 16 * 1024 * 1024
    max_text_length: int = 1_000_000  # characters
    max_json_depth: int = 100
    max_triples: int = 200_000

    def check_size(self, raw: RawRecord) -> None:
        """InputLimitError if a single record's payload is over ``max_record_bytes``."""
        size = len(raw.payload)
        if not raw.is_collection and size > self.max_record_bytes:
            raise InputLimitError(
                f"the payload{_where(raw.url)} is {size:,} bytes, more than the input limit "
                f"max_record_bytes = {self.max_record_bytes:,}: refused before parsing"
            )

    def load_json(
        self,
        payload: bytes,
        url: str | None = None,
        *,
        kind: str = "JSON",
        where: str | None = None,
    ) -> Any:
        """``json.loads`` of UTF-8 bytes within the limits; ParseError if it is not JSON."""
        where = _where(url) if where is None else where
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ParseError(f"malformed {kind}{where}: not UTF-8 ({err.reason})") from err
        if _nesting_may_exceed(payload, self.max_json_depth):
            depth = _bracket_depth(text)
            if depth > self.max_json_depth:
                raise InputLimitError(
                    f"{kind}{where} nests arrays and objects {depth:,} deep, more than the input "
                    f"limit max_json_depth = {self.max_json_depth}"
                )
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise ParseError(
                f"malformed {kind}{where} at line {err.lineno} column {err.colno}: {err.msg}"
            ) from err
        except RecursionError as err:
            raise InputLimitError(f"{kind}{where} is nested too deeply") from err
        except ValueError as err:  # an integer over sys.get_int_max_str_digits()
            raise InputLimitError(
                f"{kind}{where} holds an integer of {_longest_integer(text):,} digits, more than "
                f"the {sys.get_int_max_str_digits():,} Python converts "
                "(sys.get_int_max_str_digits)"
            ) from err
        self.check_json_strings(value, len(payload), payload, where)
        return value

    def check_json_strings(self, value: Any, size: int, payload: bytes, where: str) -> None:
        """InputLimitError for a string over ``max_text_length`` or with a lone surrogate.

        Walks the value only when the payload could hold one: longer than the limit, or
        holding a ``\\uD800``-``\\uDFFF`` escape (a valid pair too: then nothing is found)."""
        long_possible = size > self.max_text_length
        if not long_possible and not _SURROGATE_ESCAPE.search(payload):
            return
        for path, text in _strings(value):
            if long_possible and len(text) > self.max_text_length:
                raise InputLimitError(
                    f"the JSON string at {path}{where} is {len(text):,} characters long, more "
                    f"than the input limit max_text_length = {self.max_text_length:,}"
                )
            lone = _LONE_SURROGATE.search(text)
            if lone is not None:
                raise InputLimitError(
                    f"the JSON string at {path}{where} holds a lone UTF-16 surrogate "
                    f"(\\u{ord(lone.group()):04x} at character {lone.start() + 1:,}), which is "
                    "not a Unicode character"
                )

    def check_xml(self, root: etree._Element, size: int, url: str | None = None) -> None:
        """InputLimitError for a text node or attribute over ``max_text_length`` characters
        (only walked when the document is longer than the limit)."""
        if size <= self.max_text_length:
            return
        limit = self.max_text_length
        for element in root.iter():
            for kind, text in (("text", element.text), ("tail", element.tail)):
                if text is not None and len(text) > limit:
                    raise InputLimitError(
                        f"XML{_where(url)}: the {kind} of <{_tag(element)}> (line "
                        f"{element.sourceline}) is {len(text):,} characters long, more than "
                        f"the input limit max_text_length = {limit:,}"
                    )
            for name, value in element.attrib.items():
                if len(value) > limit:
                    raise InputLimitError(
                        f"XML{_where(url)}: the attribute {name!s} of <{_tag(element)}> (line "
                        f"{element.sourceline}) is {len(value):,} characters long, more than "
                        f"the input limit max_text_length = {limit:,}"
                    )

    def check_literals(self, quads: list[Quad], size: int, url: str | None = None) -> None:
        """InputLimitError for an RDF literal over ``max_text_length`` characters (only
        looked for when the document is longer than the limit)."""
        if size <= self.max_text_length:
            return
        from pyoxigraph import Literal

        for quad in quads:
            value = quad.object
            if isinstance(value, Literal) and len(value.value) > self.max_text_length:
                raise InputLimitError(
                    f"RDF{_where(url)}: the literal of <{quad.predicate.value}> of "
                    f"{quad.subject} is {len(value.value):,} characters long, more than the "
                    f"input limit max_text_length = {self.max_text_length:,}"
                )

    def too_many_triples(self, count: int) -> InputLimitError:
        return InputLimitError(
            f"the record maps to more than {count:,} triples: over the input limit "
            f"max_triples = {self.max_triples:,}"
        )


DEFAULT_LIMITS = InputLimits()

# a \uXXXX escape of a UTF-16 surrogate, as it stands in JSON bytes
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _where(url: str | None) -> str:
    return f" ({url})" if url else ""


def _tag(element: etree._Element) -> str:
    tag = element.tag
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else "?"


def _nesting_may_exceed(payload: bytes, depth: int) -> bool:
    """Whether there are enough brackets for ``depth`` (two counts at memory speed)."""
    return payload.count(b"[") + payload.count(b"{") > depth


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _bracket_depth(text: str) -> int:
    """The deepest nesting of brackets outside strings (iterative: never recurses)."""
    depth = deepest = 0
    for token in _TOKENS.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _longest_integer(text: str) -> int:
    """The digits of the longest run of digits (only called on the error path)."""
    longer = re.compile(rf"\d{{{sys.get_int_max_str_digits() + 1},}}")
    return max((len(m.group()) for m in longer.finditer(text)), default=0)


def _strings(value: Any) -> Iterator[tuple[str, str]]:
    """(path, string) of every string in a JSON value, keys included; iterative."""
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            yield path, item
        elif isinstance(item, dict):
            for key, inner in item.items():
                yield f"{path} (a key)", key
                stack.append((f"{path}.{key}", inner))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", inner) for i, inner in enumerate(item))


# -- JSON pages split into records (CKAN) ---------------------------------------------------


class _LongInteger:
    """An integer too long for Python's int(), kept as its digits."""

    __slots__ = ("digits",)

    def __init__(self, digits: str) -> None:
        self.digits = digits


def _parse_int(digits: str) -> int | _LongInteger:
    if len(digits) > sys.get_int_max_str_digits():
        return _LongInteger(digits)
    return int(digits)


def load_page(content: bytes | str) -> Any:
    """``json.loads`` of a page of records that keeps an over-long integer as it is (for
    :func:`dump_record`); raises what ``json.loads`` raises otherwise."""
    return json.loads(content, parse_int=_parse_int)


def dump_record(value: Any) -> bytes:
    """One record of a page read by :func:`load_page` as UTF-8 JSON bytes.

    An over-long integer is written back digit for digit, and a string with a lone surrogate
    (which UTF-8 cannot hold) as its ``\\ud800`` escape: the record's payload carries them as
    the source sent them, and :meth:`InputLimits.load_json` refuses that record alone."""
    longs: list[str] = []
    nonce: list[str] = []  # made when first needed (most records hold no long integer)

    def placeholder(obj: Any) -> str:
        if isinstance(obj, _LongInteger):
            if not nonce:
                nonce.append(secrets.token_hex(8))
            longs.append(obj.digits)
            return f"{nonce[0]}:{len(longs) - 1}"
        raise TypeError(f"{type(obj).__name__} is not JSON serializable")

    text = json.dumps(value, ensure_ascii=False, default=placeholder)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: ASCII JSON keeps it as an escape
        longs.clear()
        data = json.dumps(value, ensure_ascii=True, default=placeholder).encode("ascii")
    for number, digits in enumerate(longs):
        data = data.replace(f'"{nonce[0]}:{number}"'.encode(), digits.encode(), 1)
    return data
