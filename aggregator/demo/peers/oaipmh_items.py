"""The records an OAI-PMH peer serves: :class:`OaiItem`, and the :class:`ItemSource` kinds
(:class:`MemoryItems`, mutable; :class:`SequenceItems`, built on demand from an index, with
:func:`generated_items` for the demo and the benchmark). See :mod:`aggregator.demo.peers.oaipmh`.
"""

from __future__ import annotations

import bisect
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True, slots=True)
class OaiItem:
    """One item. ``datestamp`` is normalised to UTC seconds; ``metadata`` is the XML of the
    ``<metadata>`` element's child, without an XML declaration (None for deleted items)."""

    identifier: str
    datestamp: datetime
    sets: tuple[str, ...] = ()
    deleted: bool = False
    metadata: bytes | None = None

    def __post_init__(self) -> None:
        when = self.datestamp
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
        object.__setattr__(self, "datestamp", when.replace(microsecond=0))

    def in_set(self, spec: str) -> bool:
        return any(s == spec or s.startswith(spec + ":") for s in self.sets)


@dataclass(frozen=True, slots=True)
class Query:
    """The selection of a ListIdentifiers/ListRecords request (bounds inclusive)."""

    start: datetime | None = None
    end: datetime | None = None
    set_spec: str | None = None

    def matches(self, item: OaiItem) -> bool:
        if self.start is not None and item.datestamp < self.start:
            return False
        if self.end is not None and item.datestamp > self.end:
            return False
        return self.set_spec is None or item.in_set(self.set_spec)


class ItemSource(ABC):
    """Items in ascending datestamp order, each with an opaque position string."""

    @abstractmethod
    def scan(self, after: str | None, start: datetime | None) -> Iterator[tuple[str, OaiItem]]:
        """Items after position ``after`` (or from datestamp ``start`` on), in order."""

    @abstractmethod
    def get(self, identifier: str) -> OaiItem | None: ...

    @abstractmethod
    def set_specs(self) -> tuple[str, ...]: ...

    def count(self, query: Query) -> int:
        n = 0
        for _, item in self.scan(None, query.start):
            if query.end is not None and item.datestamp > query.end:
                break
            n += query.matches(item)
        return n

    def earliest(self) -> datetime | None:
        for _, item in self.scan(None, None):
            return item.datestamp
        return None


def _key(item: OaiItem) -> tuple[datetime, str]:
    return (item.datestamp, item.identifier)


class MemoryItems(ItemSource):
    """A mutable, thread-safe collection; tests change it between requests."""

    def __init__(self, items: Iterable[OaiItem] = ()) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, OaiItem] = {i.identifier: i for i in items}
        self._sorted: list[OaiItem] | None = None

    def put(self, *items: OaiItem) -> None:
        with self._lock:
            for item in items:
                self._items[item.identifier] = item
            self._sorted = None

    def delete(self, identifier: str, when: datetime | None = None) -> None:
        """Keep a deleted header (what ``deletedRecord=persistent`` promises)."""
        with self._lock:
            old = self._items[identifier]
            self._items[identifier] = OaiItem(identifier, when or datetime.now(UTC), old.sets, True)
            self._sorted = None

    def remove(self, identifier: str) -> None:
        """Forget an item without trace (a repository without deletion support)."""
        with self._lock:
            self._items.pop(identifier, None)
            self._sorted = None

    def __len__(self) -> int:
        return len(self._items)

    def _snapshot(self) -> list[OaiItem]:
        with self._lock:
            if self._sorted is None:
                self._sorted = sorted(self._items.values(), key=_key)
            return self._sorted

    def scan(self, after: str | None, start: datetime | None) -> Iterator[tuple[str, OaiItem]]:
        items = self._snapshot()
        if after is not None:
            stamp, _, ident = after.partition("|")
            lo = bisect.bisect_right(items, (datetime.fromisoformat(stamp), ident), key=_key)
        elif start is not None:
            lo = bisect.bisect_left(items, (start, ""), key=_key)
        else:
            lo = 0
        for item in items[lo:]:
            yield f"{item.datestamp.isoformat()}|{item.identifier}", item

    def get(self, identifier: str) -> OaiItem | None:
        return self._items.get(identifier)

    def set_specs(self) -> tuple[str, ...]:
        specs: set[str] = set()
        for item in self._snapshot():
            for spec in item.sets:
                parts = spec.split(":")
                specs.update(":".join(parts[: i + 1]) for i in range(len(parts)))
        return tuple(sorted(specs))


class SequenceItems(ItemSource):
    """``count`` items made on demand by ``make(index)``; datestamps must not decrease with
    the index. Memory stays flat whatever the count (the benchmark serves 100,000)."""

    def __init__(
        self,
        count: int,
        make: Callable[[int], OaiItem],
        *,
        sets: Sequence[str] = (),
        locate: Callable[[str], int | None] | None = None,
    ) -> None:
        self.size = count
        self.make = make
        self._sets = tuple(sets)
        self._locate = locate

    def _first_at(self, start: datetime) -> int:
        return bisect.bisect_left(range(self.size), start, key=lambda i: self.make(i).datestamp)

    def scan(self, after: str | None, start: datetime | None) -> Iterator[tuple[str, OaiItem]]:
        if after is not None:
            lo = int(after) + 1
        else:
            lo = self._first_at(start) if start is not None else 0
        for i in range(lo, self.size):
            yield str(i), self.make(i)

    def count(self, query: Query) -> int:
        if query.set_spec is not None:
            return super().count(query)
        lo = self._first_at(query.start) if query.start is not None else 0
        hi = self.size
        if query.end is not None:
            end = query.end
            hi = bisect.bisect_right(range(self.size), end, key=lambda i: self.make(i).datestamp)
        return max(0, hi - lo)

    def get(self, identifier: str) -> OaiItem | None:
        if self._locate is not None:
            index = self._locate(identifier)
            return self.make(index) if index is not None and 0 <= index < self.size else None
        return next((i for _, i in self.scan(None, None) if i.identifier == identifier), None)

    def set_specs(self) -> tuple[str, ...]:
        return self._sets


# -- generated collections (demo and benchmark) --------------------------------------------------
def minimal_dcat(index: int) -> bytes:
    """A small DCAT dataset as RDF/XML; the demo and benchmark pass a richer generator
    (``aggregator.demo.peers.sample_data.generate_dataset``) to :func:`generated_items`."""
    return (
        '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
        'xmlns:dcat="http://www.w3.org/ns/dcat#" xmlns:dct="http://purl.org/dc/terms/">'
        f'<dcat:Dataset rdf:about="https://data.example.org/dataset/{index}">'
        f'<dct:title xml:lang="en">Dataset {index}</dct:title>'
        f'<dct:description xml:lang="en">Generated dataset {index}.</dct:description>'
        "</dcat:Dataset></rdf:RDF>"
    ).encode()


def generated_items(
    count: int,
    metadata: Callable[[int], bytes] = minimal_dcat,
    *,
    identifier: str = "oai:example.org:{}",
    start: datetime = datetime(2024, 1, 1, tzinfo=UTC),
    step: timedelta = timedelta(seconds=1),
    sets: Sequence[str] = ("even", "odd"),
) -> SequenceItems:
    """``count`` items made on demand, one ``step`` apart from ``start``. ``identifier`` is a
    format string with one field for the index (``"oai:x:dataset-{:06d}"``); item ``i`` is in
    set ``sets[i % len(sets)]``. Nothing is built until a page asks for it."""
    head, _, tail = identifier.partition("{")
    tail = tail.partition("}")[2]

    def make(i: int) -> OaiItem:
        spec = (sets[i % len(sets)],) if sets else ()
        return OaiItem(identifier.format(i), start + step * i, spec, False, metadata(i))

    def locate(ident: str) -> int | None:
        digits = ident.removeprefix(head).removesuffix(tail)
        ok = digits.isdigit() and identifier.format(int(digits)) == ident
        return int(digits) if ok else None

    return SequenceItems(count, make, sets=sets, locate=locate)
