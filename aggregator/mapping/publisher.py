"""The source's registered publisher as the dataset's ``dct:publisher``: a step after the
format mapping, for every format (jobs/processing.py).

A source may name its publisher (``publisher`` in ``[sources.NAME]`` of aggregator.toml). A
dataset whose own description names no publisher (a WAF of ISO records without a publisher
role, a CKAN package without an organization, a META-SHARE LR, which has no publisher
element) gets that one: a ``foaf:Agent`` with its ``foaf:name``, typed as the DCAT-AP 3 range
of ``dct:publisher`` demands, and an INFO finding ``publisher-from-source`` saying so. A
dataset that names its own publisher keeps it alone.

The agent is an IRI minted under the base IRI from the source and the publisher's name
(``{base}publisher/{source}/{name or its hash}``), not a blank node: every dataset of the
source names the same agent, and the added triples hold no blank node, so they merge into
the canonical N-Triples lines without canonicalising the graph again.
"""

from __future__ import annotations

from dataclasses import replace

from pyoxigraph import Literal, NamedNode, RdfFormat, Triple, serialize

from aggregator.core.models import Finding, MappedDataset, Severity, Stage, content_hash
from aggregator.core.vocab import DCT, FOAF, RDF_TYPE
from aggregator.mapping.base import MappingContext, mint_iri

PUBLISHER = DCT + "publisher"
RULE = "publisher-from-source"


def publisher_iri(ctx: MappingContext, name: str) -> str:
    """The IRI of the source's registered publisher called ``name``."""
    return mint_iri(ctx, "publisher", name)


def has_publisher(dataset: MappedDataset) -> bool:
    """Whether the dataset's own graph states a ``dct:publisher`` of the dataset.

    Mappers write canonical N-Triples with single spaces, so the statement is found by its
    subject and predicate, without parsing the graph."""
    needle = f"<{dataset.dataset_iri}> <{PUBLISHER}> ".encode()
    data = dataset.ntriples
    return data.startswith(needle) or b"\n" + needle in data


def with_source_publisher(
    dataset: MappedDataset, ctx: MappingContext, *, hash_content: bool = True
) -> MappedDataset:
    """``dataset`` with the source's publisher added when it has none (itself otherwise).
    ``hash_content=False``: its ``content_hash`` is left as it was, for a caller that sets it
    after a later step (:func:`aggregator.mapping.finish.finish_mapped`)."""
    name = (ctx.publisher or "").strip()
    if not name or has_publisher(dataset):
        return dataset
    subject = NamedNode(dataset.dataset_iri)
    agent = NamedNode(publisher_iri(ctx, name))
    added = [
        Triple(subject, NamedNode(PUBLISHER), agent),
        Triple(agent, NamedNode(RDF_TYPE), NamedNode(FOAF + "Agent")),
        Triple(agent, NamedNode(FOAF + "name"), Literal(name)),
    ]
    data = serialize(added, format=RdfFormat.N_TRIPLES)
    assert data is not None
    lines = set(dataset.ntriples.splitlines())
    lines.update(data.splitlines())
    ntriples = b"\n".join(sorted(lines)) + b"\n"
    finding = Finding(
        Stage.MAP,
        Severity.INFO,
        RULE,
        f"the record names no publisher: the source's registered publisher {name!r} is used",
        location=dataset.dataset_iri,
        path=PUBLISHER,
    )
    return replace(
        dataset,
        ntriples=ntriples,
        content_hash=content_hash(ntriples) if hash_content else dataset.content_hash,
        findings=(*dataset.findings, finding),
    )
