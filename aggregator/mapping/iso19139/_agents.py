"""Responsible parties (``gmd:CI_ResponsibleParty``) -> agents, contact points, attributions.

Each party's role (``gmd:role/gmd:CI_RoleCode``) is looked up in ``[roles]`` of
mappings/iso19139.toml: ``pointOfContact`` becomes a ``dcat:contactPoint`` (a vCard with name,
e-mail, telephone, address and web page), the other roles a ``foaf:Agent`` as the value of
the role's property (``dct:publisher``, ``dct:creator``, ``geodcat:custodian`` ...), and every
role listed with ``attribution = true`` also a ``prov:qualifiedAttribution`` naming the agent
and the INSPIRE ResponsiblePartyRole. The same organisation (or person) in several roles is
one node.
"""

from __future__ import annotations

import re
from collections import Counter

from lxml import etree

from aggregator.core.vocab import DCAT, FOAF, PROV, VCARD
from aggregator.mapping.iso19139._table import IsoTable
from aggregator.mapping.iso19139._xml import (
    GMD,
    TYPE,
    Node,
    Out,
    Texts,
    anchor_href,
    code_value,
    compile_xpath,
    iri,
    is_iri,
    lit,
    named,
    plain,
)

ROLE_BASE = "http://inspire.ec.europa.eu/metadata-codelist/ResponsiblePartyRole/"

FOAF_NAME = named(FOAF + "name")
FOAF_MBOX = named(FOAF + "mbox")
FOAF_PHONE = named(FOAF + "phone")
FOAF_HOMEPAGE = named(FOAF + "homepage")
FOAF_WORKPLACE = named(FOAF + "workplaceHomepage")
FOAF_ORGANIZATION = named(FOAF + "Organization")
FOAF_PERSON = named(FOAF + "Person")
FOAF_AGENT = named(FOAF + "Agent")
V = {
    name: named(VCARD + name)
    for name in (
        "Organization",
        "Individual",
        "Kind",
        "Address",
        "fn",
        "organization-name",
        "hasEmail",
        "hasTelephone",
        "hasAddress",
        "hasURL",
        "street-address",
        "locality",
        "region",
        "postal-code",
        "country-name",
        "title",
    )
}
QUALIFIED_ATTRIBUTION = named(PROV + "qualifiedAttribution")
PROV_ATTRIBUTION = named(PROV + "Attribution")
PROV_AGENT = named(PROV + "agent")
HAD_ROLE = named(DCAT + "hadRole")
CONTACT_POINT = named(DCAT + "contactPoint")

ORGANISATION = GMD + "organisationName"
INDIVIDUAL = GMD + "individualName"
POSITION = GMD + "positionName"
ROLE_CODE = GMD + "CI_RoleCode"
VOICE = GMD + "voice"
LINKAGE = GMD + "linkage"
EMAIL = GMD + "electronicMailAddress"
_ADDRESS = (
    (GMD + "deliveryPoint", "street-address"),
    (GMD + "city", "locality"),
    (GMD + "administrativeArea", "region"),
    (GMD + "postalCode", "postal-code"),
    (GMD + "country", "country-name"),
)
# Everything a party says, in one evaluation: its names and position, its first role code
# and, from its first contact, the telephone numbers, the parts of the first address and the
# web links. Each leaf's tag says which it is (no tag is reached by two branches); the
# first in document order is the one used, as with one lookup per leaf.
_CONTACT = "(gmd:contactInfo/gmd:CI_Contact)[1]"
_ADDRESS_PART = " or ".join(
    f"self::gmd:{name}"
    for name in (
        "electronicMailAddress",
        "deliveryPoint",
        "city",
        "administrativeArea",
        "postalCode",
        "country",
    )
)
_LEAVES = compile_xpath(
    "gmd:organisationName | gmd:individualName | gmd:positionName"
    " | (gmd:role/gmd:CI_RoleCode)[1]"
    f" | {_CONTACT}/gmd:phone/gmd:CI_Telephone/gmd:voice"
    f" | ({_CONTACT}/gmd:address/gmd:CI_Address)[1]/*[{_ADDRESS_PART}]"
    f" | {_CONTACT}/gmd:onlineResource/gmd:CI_OnlineResource/gmd:linkage"
)


class Party:
    """One CI_ResponsibleParty, read once."""

    __slots__ = (
        "address",
        "address_terms",
        "email",
        "fn_term",
        "individual",
        "individual_term",
        "iri",
        "key",
        "mbox",
        "name",
        "organisation",
        "page",
        "phone",
        "position",
        "role",
        "tel",
        "url",
    )

    def __init__(self, el: etree._Element, texts: Texts) -> None:
        part: dict[str, etree._Element] = {}  # tag -> the first leaf with it
        found = _LEAVES(el)
        for leaf in found if isinstance(found, list) else ():
            if isinstance(leaf, etree._Element) and leaf.tag not in part:
                part[leaf.tag] = leaf
        org = part.get(ORGANISATION)
        self.organisation = texts.literals(org) if org is not None else []
        person = part.get(INDIVIDUAL)
        self.individual = plain(person)
        # an agent the record names by IRI (a gmx:Anchor on the individual, else the organisation)
        link = anchor_href(person) or anchor_href(org)
        self.iri = link if link.startswith(("http://", "https://")) and is_iri(link) else ""
        self.position = plain(part.get(POSITION))
        self.role = code_value(part.get(ROLE_CODE))
        self.email = plain(part.get(EMAIL))
        self.phone = plain(part.get(VOICE))
        self.address: list[tuple[str, str]] = []
        for iso, prop in _ADDRESS:
            value = plain(part.get(iso))
            if value:
                self.address.append((prop, value))
        self.url = plain(part.get(LINKAGE))
        self.name = plain(org) if org is not None else ""
        self.key = (self.name.casefold(), self.individual.casefold(), self.email.casefold())
        # the terms the agent and vCard nodes are made of, made once per party read
        self.individual_term = lit(self.individual)
        self.fn_term = lit(self.name or self.individual)
        self.mbox = iri("mailto:" + self.email) if self.email else None
        tel = _tel(self.phone)
        self.tel = named(tel) if tel else None
        self.page = iri(self.url) if self.url.startswith(("http://", "https://")) else None
        self.address_terms = [(V[prop], lit(value)) for prop, value in self.address]

    @property
    def named(self) -> bool:
        return bool(self.organisation or self.individual)


# A catalogue names the same few parties in record after record (its publisher, its contact
# point): a party read is remembered by the XML that says it and the record's languages, which
# are all it depends on (Party holds strings only and is never changed after it is read).
_PARTIES: dict[tuple[bytes, str, tuple[tuple[str, str], ...]], Party] = {}
_PARTIES_MAX = 1024


def _party(el: etree._Element, texts: Texts) -> Party:
    key = (etree.tostring(el, with_tail=False), texts.default_tag, tuple(texts.locales.items()))
    party = _PARTIES.get(key)
    if party is None:
        if len(_PARTIES) >= _PARTIES_MAX:
            _PARTIES.clear()
        party = _PARTIES[key] = Party(el, texts)
    return party


#: an extension at the end of a number ("... Ex:3499", "ext. 12", "x 7")
_EXTENSION = re.compile(r"\s*(?:ext?|extension|x)\s*[.:]?\s*(\d+)\s*$", re.IGNORECASE)


def _tel(phone: str) -> str:
    """A ``tel:`` IRI of a telephone number (RFC 3966: its digits and a leading +, the
    extension as ``;ext=``), "" for none. The national trunk prefix written beside a country
    code (``+44 (0)8456 ...``) is not dialled from abroad and is left out."""
    ext = _EXTENSION.search(phone)
    number = phone[: ext.start()] if ext else phone
    if number.lstrip().startswith("+"):
        number = number.replace("(0)", "")
    digits = "".join(ch for ch in number if ch.isdigit() or ch == "+")
    if not digits:
        return ""
    return f"tel:{digits};ext={ext.group(1)}" if ext else "tel:" + digits


class Agents:
    """Makes (and shares) the agent and vCard nodes of one record."""

    def __init__(self, out: Out, table: IsoTable, texts: Texts) -> None:
        self.out = out
        self.table = table
        self.texts = texts
        self._agents: dict[tuple[str, str, str], Node] = {}
        self._cards: dict[tuple[str, str, str], Node] = {}

    def read(self, elements: list[etree._Element]) -> list[Party]:
        parties = [_party(el, self.texts) for el in elements]
        return [p for p in parties if p.named]

    def agent(self, party: Party) -> Node:
        node = self._agents.get(party.key)
        if node is not None:
            return node
        out = self.out
        own = named(party.iri) if party.iri else None
        if party.organisation:
            node = out.typed(FOAF_ORGANIZATION, own)
            out.add_all(node, FOAF_NAME, party.organisation)
        else:
            node = out.typed(FOAF_PERSON, own)
            out.add(node, FOAF_NAME, party.individual_term)
        out.add(node, TYPE, FOAF_AGENT)  # DCAT-AP 3.0.1's range, stated: no inference there
        if party.mbox is not None:
            out.add(node, FOAF_MBOX, party.mbox)
        if party.tel is not None:
            out.add(node, FOAF_PHONE, party.tel)
        if party.page is not None:
            out.add(node, FOAF_HOMEPAGE if party.organisation else FOAF_WORKPLACE, party.page)
        self._agents[party.key] = node
        return node

    def vcard(self, party: Party) -> Node:
        node = self._cards.get(party.key)
        if node is not None:
            return node
        out = self.out
        if party.individual:  # a person (of an organisation): GeoDCAT-AP's vcard:Individual
            node = out.typed(V["Individual"])
            out.add(node, V["fn"], party.individual_term)
        else:
            node = out.typed(V["Organization"])
            out.add(node, V["fn"], party.fn_term)
        out.add(node, TYPE, V["Kind"])  # DCAT-AP 3.0.1's range, stated: no inference there
        out.add_all(node, V["organization-name"], party.organisation)
        if party.position:
            out.add(node, V["title"], lit(party.position))
        if party.mbox is not None:
            out.add(node, V["hasEmail"], party.mbox)
        if party.tel is not None:
            out.add(node, V["hasTelephone"], party.tel)
        if party.page is not None:
            out.add(node, V["hasURL"], party.page)
        if party.address_terms:
            address = out.typed(V["Address"])
            out.add(node, V["hasAddress"], address)
            for prop, value in party.address_terms:
                out.add(address, prop, value)
        self._cards[party.key] = node
        return node

    def attribution(self, subject: Node, party: Party) -> None:
        out = self.out
        node = out.typed(PROV_ATTRIBUTION)
        out.add(subject, QUALIFIED_ATTRIBUTION, node)
        out.add(node, PROV_AGENT, self.agent(party))
        out.add(node, HAD_ROLE, named(ROLE_BASE + party.role))

    def apply(self, subject: Node, parties: list[Party]) -> None:
        """Each party in its role(s) on ``subject`` (the described resource)."""
        used: Counter[str] = Counter()
        for party in parties:
            role = self.table.roles.get(party.role)
            if role is None:
                if party.role.isalnum():  # a role the table does not know: attribution only
                    self.attribution(subject, party)
                continue
            if role.max and used[role.property] >= role.max:
                self.attribution(subject, party)
                continue
            used[role.property] += 1
            value = self.vcard(party) if role.vcard else self.agent(party)
            self.out.add(subject, role.property, value)
            if role.attribution:
                self.attribution(subject, party)

    def record_contacts(self, record: Node, parties: list[Party]) -> None:
        """The metadata point(s) of contact on the source's catalogue record."""
        for party in parties:
            self.out.add(record, CONTACT_POINT, self.vcard(party))
            if party.role.isalnum():
                self.attribution(record, party)
