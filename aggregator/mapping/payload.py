"""One parse per record: the source payload and its parsed forms, shared along the chain.

A record's payload is checked by the payload validators of its source's chain (XSD,
Schematron, ...) and then read by its mapper. Each of them asks :class:`ParsedPayload` for
the form it needs; the first request parses, with the project's hardened parsers, and every
later one gets the same object::

    payload = ParsedPayload(raw)
    payload.xml()       # lxml root element, via aggregator.core.xml.parse_xml (no DTD, no network)
    payload.rdf()       # quads, via aggregator.mapping.dcat.input.parse_document
    payload.json()      # a JSON value (json.loads on the UTF-8 bytes)

Every form is read within the input limits (:mod:`aggregator.core.input_limits`, given by the
mapping context): the payload's size is checked before any parse, and the parsed form's
content (text lengths, JSON nesting, integers, lone surrogates) before it is handed out; a
payload over a limit raises :class:`~aggregator.core.input_limits.InputLimitError`.

A parse that fails raises :class:`~aggregator.core.errors.ParseError` or
:class:`~aggregator.core.errors.UnsafeInputError` and the failure is cached too: asking again
raises the same error without parsing again. The parsed forms are shared, not copied:
validators and mappers must treat them as read-only (an XSLT, an XPath or a Schematron run
reads a tree without changing it).

``parses`` counts the parses actually made, by form (``{"xml": 1}``): what the one-parse
guarantee is tested on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aggregator.core.errors import AggregatorError
from aggregator.core.input_limits import DEFAULT_LIMITS, InputLimits
from aggregator.core.models import RawRecord
from aggregator.core.xml import parse_xml

if TYPE_CHECKING:
    from lxml import etree

    from aggregator.mapping.dcat.input import ParsedDocument

T = TypeVar("T")


class ParsedPayload:
    """A raw record with lazily made, cached parses of its payload (one per form)."""

    __slots__ = ("_cache", "limits", "parses", "raw")

    def __init__(self, raw: RawRecord, limits: InputLimits = DEFAULT_LIMITS) -> None:
        self.raw = raw
        self.limits = limits
        self.parses: Counter[str] = Counter()
        self._cache: dict[str, Any] = {}

    def _once(self, form: str, parse: Callable[[], T]) -> T:
        if form not in self._cache:
            self.parses[form] += 1
            try:
                self._cache[form] = parse()
            except AggregatorError as err:
                self._cache[form] = err
        value = self._cache[form]
        if isinstance(value, AggregatorError):
            raise value
        return value  # type: ignore[no-any-return]

    def xml(self) -> etree._Element:
        """The payload as an XML element tree (hardened parse, DOCTYPE refused)."""
        raw, limits = self.raw, self.limits

        def parse() -> etree._Element:
            limits.check_size(raw)
            root = parse_xml(raw.payload, url=raw.url)
            limits.check_xml(root, len(raw.payload), raw.url)
            return root

        return self._once("xml", parse)

    def rdf(self) -> ParsedDocument:
        """The payload as RDF quads in the default graph (syntax from media type or bytes)."""
        from aggregator.mapping.dcat.input import parse_document

        raw, limits = self.raw, self.limits

        def parse() -> ParsedDocument:
            limits.check_size(raw)
            return parse_document(raw.payload, raw.media_type, raw.url, limits)

        return self._once("rdf", parse)

    def json(self) -> Any:
        """The payload as a JSON value."""
        raw, limits = self.raw, self.limits

        def load() -> Any:
            limits.check_size(raw)
            return limits.load_json(raw.payload, raw.url)

        return self._once("json", load)
