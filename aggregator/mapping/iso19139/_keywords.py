"""Keywords, thesauri and themes of the ISO 19139 mapping: every keyword a ``dcat:keyword``;
the keywords of a thesaurus (or with a ``gmx:Anchor``) ``dcat:theme`` concepts, with their
label and scheme; the EU data themes of the INSPIRE themes and topic categories.

A concept's IRI is the keyword's anchor, the table's code for it (``[[thesaurus]]`` of
mappings/iso19139.toml), or, in a thesaurus that has no IRI at all, one minted under the
source's base; a keyword that names no concept of a vocabulary that has IRIs stays a keyword,
with a finding.
"""

from __future__ import annotations

from collections.abc import Callable

from lxml import etree

from aggregator.core.models import Finding, Severity, Stage
from aggregator.mapping.iso19139._parts import (
    INSPIRE_THEME,
    C,
    P,
    State,
    citation_dates,
)
from aggregator.mapping.iso19139._table import Thesaurus
from aggregator.mapping.iso19139._xml import (
    GMD,
    TYPE,
    Node,
    anchor_href,
    blank,
    code_value,
    elements,
    first,
    is_iri,
    named,
    plain,
)

APPLICABLE_LEGISLATION = named("http://data.europa.eu/r5r/applicableLegislation")


def keywords(
    state: State, ident: etree._Element, subject: Node, themes: list[str], mint: Mint
) -> None:
    """Every keyword text -> dcat:keyword; a keyword of a thesaurus, or one that links its
    concept (``gmx:Anchor``) -> a ``dcat:theme`` concept (:meth:`_KeywordGroup.concept`)."""
    out = state.out
    for group in elements("gmd:descriptiveKeywords/gmd:MD_Keywords", ident):
        thesaurus = _KeywordGroup(state, subject, themes, group, mint)
        for kw in group.iterchildren(GMD + "keyword"):
            lits = state.texts.literals(kw)
            kw_href = anchor_href(kw)
            if not lits and not kw_href:
                continue
            out.add_all(subject, P["keyword"], lits)
            if thesaurus.named or (kw_href and is_iri(kw_href)):
                thesaurus.concept(kw, kw_href, lits)


#: (kind, key) -> a stable IRI under the source's base (``mapping.base.mint_iri``)
Mint = Callable[[str, str], str]


def _folded(text: str) -> str:
    """A thesaurus title or keyword as a key: case and runs of white space do not count."""
    return " ".join(text.split()).casefold()


class _KeywordGroup:
    """One MD_Keywords: its thesaurus (known to the table, named by an IRI, or only by its
    title) and the concepts of its keywords, in a scheme made once for the group."""

    def __init__(
        self,
        state: State,
        subject: Node,
        themes: list[str],
        group: etree._Element,
        mint: Mint,
    ) -> None:
        self.state, self.subject, self.themes, self.mint = state, subject, themes, mint
        self.citation = first("gmd:thesaurusName/gmd:CI_Citation", group)
        self.title_el = first("gmd:title", self.citation) if self.citation is not None else None
        self.title = title = _folded(plain(self.title_el))
        self.href = href = anchor_href(self.title_el)
        self.named = bool(title or href)  # keywords of no named thesaurus are just keywords
        self.known: Thesaurus | None = None
        if self.named:
            self.known = next(
                (
                    t
                    for t in state.table.thesauri
                    if any(x in title for x in t.titles)
                    or (href and t.anchor and href.startswith(t.anchor))
                ),
                None,
            )
        # a thesaurus with no IRI of its own (no table row, no anchor): its concepts get IRIs
        # minted under the source's base, as a CKAN group's; the scheme is the citation
        self.minted = self.known is None and bool(title) and not (href and is_iri(href))
        self.scheme: Node | None = None  # made with the first concept

    def _concept_iri(self, kw: etree._Element, kw_href: str) -> str:
        known = self.known
        text = plain(kw)
        if kw_href and is_iri(kw_href):
            return kw_href
        if known is not None and known.labels.get(text.casefold()):
            return known.code_base + known.labels[text.casefold()]
        if known is not None and known.codes_are_labels and text.isalnum():
            return known.code_base + text
        if self.minted and text:
            return self.mint("concept", f"{self.title}\n{_folded(text)}")
        return ""

    def concept(self, kw: etree._Element, kw_href: str, lits: list[str]) -> None:
        """The keyword as a concept of the thesaurus, a theme of the dataset: an IRI (DCAT-AP
        3.0.1 wants a theme to be one) with its label and scheme. The IRI is the keyword's
        anchor, the table's code for it, or, in a thesaurus that has no IRI at all, one minted
        from the thesaurus title and the keyword (a keyword of a controlled vocabulary is a
        concept of it). A keyword that names no concept IRI in a thesaurus that has IRIs (a
        label not in the table's list, no anchor) stays a ``dcat:keyword`` only, and the
        finding says so: a minted IRI would pose as one of that vocabulary's concepts."""
        state, known, out = self.state, self.known, self.state.out
        concept_iri = self._concept_iri(kw, kw_href)
        prop = known.property if known is not None and known.property else P["theme"]
        if not concept_iri:
            if known is None or not known.property:  # a code not in that list: just a keyword
                state.findings.append(
                    Finding(
                        Stage.MAP,
                        Severity.INFO,
                        "iso-keyword-not-a-concept",
                        f"keyword {plain(kw)!r} of thesaurus {plain(self.title_el)!r} names no"
                        " concept IRI: kept as dcat:keyword, not a dcat:theme",
                        f"line {kw.sourceline}" if kw.sourceline else None,
                    )
                )
            return
        concept = named(concept_iri)
        out.add(self.subject, prop, concept)
        if known is not None and known.theme and prop != P["theme"]:
            out.add(self.subject, P["theme"], concept)
        out.add(concept, TYPE, C["Concept"])
        out.add_all(concept, P["prefLabel"], lits)
        if self.scheme is None:
            self.scheme = self._scheme()
        if self.scheme:
            out.add(concept, P["inScheme"], self.scheme)
        if known is not None and known.legislation:
            out.add(self.subject, APPLICABLE_LEGISLATION, named(known.legislation))
        if prop == P["theme"] or (known is not None and known.theme):
            self.themes.append(concept_iri)
        if concept_iri.startswith(INSPIRE_THEME):
            state.inspire_themes.append(concept_iri[len(INSPIRE_THEME) :])

    def _scheme(self) -> Node:
        """The thesaurus as a ``skos:ConceptScheme`` with its title: the table's IRI, else the
        title's anchor, else, for a thesaurus that has no IRI, the record's citation of it as
        a blank node with its title and dates (GeoDCAT-AP's "originating controlled
        vocabulary"); none for keywords of no thesaurus. The citation stays a blank node: an
        IRI minted from the title alone would gather the dates of every record's citation
        (other versions) on one resource; its concepts keep minted IRIs, as a theme must be
        an IRI (DCAT-AP 3.0.1)."""
        state, href = self.state, self.href
        if self.known is not None:
            node = named(self.known.scheme)
        elif href and is_iri(href):
            node = named(href)
        elif self.minted:
            node = blank()
        else:
            return ""
        titles = state.texts.literals(self.title_el) if self.title_el is not None else []
        state.out.typed(C["ConceptScheme"], node)
        state.out.add_all(node, P["title"], titles)
        if self.minted and self.citation is not None:
            citation_dates(state, self.citation, node)
        return node


def eu_themes(state: State, ident: etree._Element, subject: Node, themes: list[str]) -> None:
    """EU data themes from the INSPIRE themes and topic categories (eu-data-themes.toml)."""
    found: list[str] = []
    for code in state.inspire_themes:
        found.extend(state.table.inspire_eu_themes.get(code, ()))
    for el in elements("gmd:topicCategory/gmd:MD_TopicCategoryCode", ident):
        found.extend(state.table.topic_eu_themes.get(code_value(el), ()))
    for theme in dict.fromkeys(found):
        if theme not in themes:
            state.out.add(subject, P["theme"], named(theme))
            themes.append(theme)
