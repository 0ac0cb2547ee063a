"""What the bundled vocabulary tables know about the terms a document uses, as triples.

The class-range shapes (``shapes/dcat-ap-3-ranges.ttl``) check that a licence is a
``dct:LicenseDocument``, a theme a ``skos:Concept``... A document names those terms by IRI
without describing them: their classes are in the EU vocabularies, which are not in the
document. For the terms listed in the bundled tables (``mappings/dcat-ap-3-vocabularies.toml``
and the format table of ``mappings/dcat-ap-3.toml``), the class comes from the rule table
(the DCAT-AP 3.0.1 range of the property whose table lists the term) and a concept's
preferred label from the table's ``labels``. :func:`vocabulary_triples` returns those facts
for the terms a graph uses, to be validated together with it (``aggregator validate
--vocabularies``). A term no table lists stays undescribed, and the range shapes report it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from pyoxigraph import Literal, NamedNode, Quad, RdfFormat, parse, serialize

from aggregator.mapping.dcat.rules import RuleSet
from aggregator.mapping.dcat.vocab import Vocabulary

RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
SKOS_CONCEPT = NamedNode("http://www.w3.org/2004/02/skos/core#Concept")
SKOS_PREF_LABEL = NamedNode("http://www.w3.org/2004/02/skos/core#prefLabel")


@dataclass(frozen=True, slots=True)
class KnownTerm:
    cls: NamedNode
    label: str | None = None


def known_terms(rules: RuleSet) -> Mapping[str, KnownTerm]:
    """Term IRI -> its class (and label) for every term of the tables the rules look up."""
    out: dict[str, KnownTerm] = {}
    for prop, term in rules.literal_terms.items():
        table = term.table
        rng = rules.ranges.get(prop)
        if table is None or rng is None:
            continue
        if isinstance(table, Vocabulary):
            iris, labels = set(table.table.values()), table.labels
        else:
            iris, labels = set(table.values()), {}
        for iri in iris:
            out.setdefault(iri.value, KnownTerm(rng.cls, labels.get(iri)))
    return out


@lru_cache(maxsize=2)
def _default_terms() -> Mapping[str, KnownTerm]:
    from aggregator.mapping.dcat.rule_table import DEFAULT_RULES_PATH, load_rules

    return known_terms(load_rules(DEFAULT_RULES_PATH))


def vocabulary_triples(ntriples: bytes, terms: Mapping[str, KnownTerm] | None = None) -> bytes:
    """N-Triples of the class (and concept label) of each known term used as an object in
    ``ntriples`` that the graph does not type itself."""
    known = _default_terms() if terms is None else terms
    typed: set[str] = set()
    labelled: set[str] = set()
    used: set[str] = set()
    for quad in parse(ntriples, format=RdfFormat.N_TRIPLES):
        subject, obj = quad.subject, quad.object
        if isinstance(subject, NamedNode):
            if quad.predicate == RDF_TYPE:
                typed.add(subject.value)
            elif quad.predicate == SKOS_PREF_LABEL:
                labelled.add(subject.value)
        if isinstance(obj, NamedNode) and obj.value in known:
            used.add(obj.value)
    added: list[Quad] = []
    for iri in sorted(used - typed):
        term = known[iri]
        node = NamedNode(iri)
        added.append(Quad(node, RDF_TYPE, term.cls))
        if term.cls == SKOS_CONCEPT and iri not in labelled and term.label is not None:
            added.append(Quad(node, SKOS_PREF_LABEL, Literal(term.label, language="en")))
    if not added:
        return b""
    data = serialize((q.triple for q in added), format=RdfFormat.N_TRIPLES)
    return data or b""
