"""The Mapper contract and the helpers every mapper shares (IRI minting, canonical form)."""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, ClassVar

from pyoxigraph import (
    BlankNode,
    CanonicalizationAlgorithm,
    Dataset,
    DefaultGraph,
    Quad,
    RdfFormat,
    Triple,
    serialize,
)

from aggregator.core.input_limits import DEFAULT_LIMITS, InputLimits
from aggregator.core.models import MappedDataset, RawRecord

# re-exported: every mapper hashes its N-Triples; it lives with MappedDataset so that what
# runs after the mapper (categorisation) need not import the mapping package
from aggregator.core.models import content_hash as content_hash
from aggregator.core.vocab import minted_iri
from aggregator.mapping.payload import ParsedPayload

if TYPE_CHECKING:
    from aggregator.config.categorisation import CategorisationConfig


@dataclass(frozen=True, slots=True)
class MappingContext:
    """Everything a mapper may know besides the record itself (no network, no store)."""

    base_iri: str  # ends with '/'
    source: str
    publisher: str | None = None
    #: the source's EU data-theme categorisation, applied after the mapper (jobs/processing.py)
    categorisation: CategorisationConfig | None = None
    #: the size and content limits of the payload (``[input]``, aggregator.core.input_limits)
    limits: InputLimits = DEFAULT_LIMITS


def mint_iri(ctx: MappingContext, kind: str, key: str) -> str:
    """A stable IRI under the configured base: the same (source, key) always gives the same IRI.

    Readable keys are kept as they are; anything else is replaced by a hash of it.
    """
    return minted_iri(ctx.base_iri, ctx.source, kind, key)


def canonical_ntriples(triples: Iterable[Triple | Quad]) -> bytes:
    """Canonical N-Triples: blank nodes relabelled with RDFC-1.0, lines sorted, UTF-8.

    Equal graphs give equal bytes, so a hash of them is a content hash. Quads (in the default
    graph) are taken as they are: a mapper that builds them saves making each term twice.
    """
    triples = list(triples)
    default = DefaultGraph()
    ds = Dataset(
        t if isinstance(t, Quad) else Quad(t.subject, t.predicate, t.object, default)
        for t in triples
    )
    if any(isinstance(t.subject, BlankNode) or isinstance(t.object, BlankNode) for t in triples):
        ds.canonicalize(CanonicalizationAlgorithm.RDFC_1_0)
    # default-graph quads serialise as N-Triples lines (no Python object per quad)
    data = serialize(ds, format=RdfFormat.N_QUADS)
    assert data is not None
    lines = sorted(set(data.splitlines()))
    return b"\n".join(lines) + b"\n" if lines else b""


def merge_lines(
    data: bytes,
    removed: set[bytes],
    added: Iterable[bytes],
    lines: list[bytes] | None = None,
) -> bytes:
    """The lines of canonical N-Triples ``data`` less ``removed``, plus ``added``, sorted and
    each once: what a step after the mapper that adds or removes statements without a blank
    node hands on (equal graphs, equal bytes). A mapper's canonical lines are sorted and unique
    already (checked: one C-level pass), so the few added lines are put in their places by
    bisection; other text is sorted as a set (sorting the set of every line cost more than the
    rest of such a step: docs/benchmarks.md#issue-30). ``lines``: ``data.splitlines()`` when
    the caller has split it already (copied, not changed)."""
    lines = data.splitlines() if lines is None else list(lines)
    if not all(map(operator.lt, lines, islice(lines, 1, None))):
        merged = set(lines)
        merged.difference_update(removed)
        merged.update(added)
        return b"\n".join(sorted(merged)) + b"\n"
    if removed:
        lines = [line for line in lines if line not in removed]
    for line in added:
        at = bisect_left(lines, line)
        if at == len(lines) or lines[at] != line:
            lines.insert(at, line)
    return b"\n".join(lines) + b"\n"


class Mapper:
    """Base class: subclasses set ``name`` (the format key) and implement ``map_payload``
    (or, for a mapper that parses nothing itself, ``map``).

    The pipeline calls :meth:`map_payload` with the record's
    :class:`~aggregator.mapping.payload.ParsedPayload`, whose parsed form (``payload.xml()``,
    ``payload.rdf()``, ``payload.json()``) the payload validators have usually made already:
    a mapper asks for it instead of parsing ``raw.payload`` again. :meth:`map` is the
    convenience for one raw record (tests, ``aggregator map``).
    """

    name: ClassVar[str]
    #: whether one payload may describe many datasets (an RDF dump): ``aggregator map`` reads
    #: a file as one collection then, and as one record (within ``max_record_bytes``) else
    reads_collections: ClassVar[bool] = False

    def map_payload(self, payload: ParsedPayload, ctx: MappingContext) -> list[MappedDataset]:
        """Return one MappedDataset per dataset the record describes.

        Raise ParseError / MappingError / UnsafeInputError for a record that cannot be mapped;
        the pipeline records it as a per-record error and carries on.
        """
        if type(self).map is Mapper.map:
            raise NotImplementedError(f"{type(self).__name__}: implement map_payload or map")
        return self.map(payload.raw, ctx)

    def map(self, raw: RawRecord, ctx: MappingContext) -> list[MappedDataset]:
        """Map one raw record (parses it): ``map_payload`` on a fresh ParsedPayload."""
        if type(self).map_payload is Mapper.map_payload:
            raise NotImplementedError(f"{type(self).__name__}: implement map_payload or map")
        return self.map_payload(ParsedPayload(raw, ctx.limits), ctx)
