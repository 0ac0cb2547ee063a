"""iso19139._xml.canonical_ntriples (label cache, block-wise sort) against the plain algorithm it
replaced: the same bytes for the mapper's own graphs and for the awkward cases."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from aggregator.core.models import RawRecord
from aggregator.demo.peers.gemini_samples import bundled_gemini_records, generate_gemini_record
from aggregator.mapping.base import MappingContext
from aggregator.mapping.iso19139 import IsoMapper
from aggregator.mapping.iso19139 import _xml as iso_xml

ISO = Path(__file__).resolve().parents[1] / "aggregator" / "demo" / "peers" / "data" / "iso"
Triple = tuple[str, str, str]


def reference(triples: list[Triple]) -> bytes:
    """The algorithm as first written: every line built, one set, one sort."""
    edges: dict[str, list[tuple[str, str]]] = {}
    for s, p, o in triples:
        if s[0] == "_":
            edges.setdefault(s, []).append((p, o))
    names: dict[str, str] = {}

    def name(node: str) -> str:
        if node not in names:
            lines = sorted(f"{p} {name(o) if o[0] == '_' else o}" for p, o in edges.get(node, ()))
            digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]
            names[node] = "_:b" + digest
        return names[node]

    out = {
        f"{name(s) if s[0] == '_' else s} {p} {name(o) if o[0] == '_' else o} ."
        for s, p, o in triples
    }
    return ("\n".join(sorted(out)) + "\n").encode() if out else b""


def _mapped_graphs() -> list[list[Triple]]:
    """The triples the mapper hands to canonical_ntriples for a few real records."""
    seen: list[list[Triple]] = []
    original = iso_xml.canonical_ntriples

    def spy(triples: list[Triple]) -> bytes:
        seen.append(list(triples))
        return original(triples)

    payloads = [p.read_bytes() for p in sorted(ISO.glob("*.xml"))]
    payloads += [data for _, data in bundled_gemini_records()]
    payloads += [generate_gemini_record(i) for i in range(5)]
    ctx = MappingContext("https://aggregator.example.org/", "canon")
    mapper = IsoMapper()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(iso_xml, "canonical_ntriples", spy)
        for i, data in enumerate(payloads):
            mapper.map(RawRecord("canon", str(i), "iso19139", data, "application/xml"), ctx)
    return seen


def test_the_mappers_graphs_canonicalise_as_before() -> None:
    graphs = _mapped_graphs()
    assert len(graphs) >= 20
    for triples in graphs + graphs:  # the second pass answers from the label table
        assert iso_xml.canonical_ntriples(triples) == reference(triples)


AWKWARD: list[list[Triple]] = [
    [],
    [("<http://a>", "<http://p>", '"x"')] * 2,  # a repeated triple
    [  # a node saying one thing twice, an empty node, two nodes saying the same thing
        ("_:n1", "<http://p>", '"a"'),
        ("_:n1", "<http://p>", '"a"'),
        ("<http://s>", "<http://q>", "_:n1"),
        ("<http://s>", "<http://q>", "_:n2"),
        ("<http://s>", "<http://q>", "_:n3"),
        ("_:n3", "<http://p>", '"a"'),
    ],
    [  # nested nodes, literals that are prefixes of others, a tab in a literal
        ("<http://s>", "<http://p>", "_:a"),
        ("_:a", "<http://p>", "_:b"),
        ("_:b", "<http://p>", '"x"'),
        ("_:b", "<http://p>", '"x"@en'),
        ("_:b", "<http://p>", '"x\ty"'),
        ("_:b", "<http://p>", '"x"^^<http://www.w3.org/2001/XMLSchema#string>'),
        ("_:a", "<http://p>", '"x y"'),
    ],
    [  # only blank subjects
        ("_:x", "<http://p>", '"1"'),
        ("_:y", "<http://p>", "_:x"),
    ],
    [  # a subject that sorts after the blank nodes (not one the mapper makes)
        ("zz", "<http://p>", "_:x"),
        ("_:x", "<http://p>", '"1"'),
        ("<http://s>", "<http://p>", "_:x"),
    ],
]


@pytest.mark.parametrize("triples", AWKWARD)
def test_awkward_graphs_canonicalise_as_before(triples: list[Triple]) -> None:
    assert iso_xml.canonical_ntriples(triples) == reference(triples)
    assert iso_xml.canonical_ntriples(triples) == reference(triples)  # from the table
