"""Sample data for the demo and the tests: a synthetic DCAT-AP generator and bundled catalogues.

* :func:`generate_dataset` writes one realistic, synthetic DCAT-AP 2.x/3 dataset as RDF/XML
  (~75 triples, 2-4 distributions), deterministic from ``(index, seed, revision)``, fast
  enough (tens of thousands per second) to feed load tests of a million records.
* :func:`load_bundled_oai_records` returns the hand-written records in ``data/oai/`` (one
  DCAT-AP dataset per file, several domains and languages) as OAI-PMH records.
* :func:`bundled_dump_path` is the Turtle catalogue ``data/dump/catalog.ttl`` (a dcat:Catalog
  with ten datasets, some of them blank nodes, and a few DCAT-AP 2 terms the mapper rewrites).

The bundled files were written for this project; they are not copies of third-party records.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "bundled_dump_path",
    "generate_dataset",
    "generate_identifier",
    "load_bundled_oai_records",
]

_EU = "http://publications.europa.eu/resource/authority/"
_IANA = "https://www.iana.org/assignments/media-types/"


class _Topic(NamedTuple):
    themes: tuple[str, ...]  # EU data-theme codes
    title_en: str
    lang: str  # the second language of title, description and keywords
    title_xx: str
    desc_en: str  # description stems, completed with the place and year
    desc_xx: str
    keywords_en: tuple[str, str]
    keywords_xx: tuple[str, str]


# fmt: off
_TOPICS: tuple[_Topic, ...] = (
    _Topic(("ENVI",), "Air quality measurements", "de", "Luftqualitätsmessungen",
           "Hourly concentrations of NO2, PM10 and PM2.5 measured at the monitoring stations of",
           "Stündliche Konzentrationen von NO2, PM10 und PM2,5 an den Messstationen in",
           ("air quality", "pollution"), ("Luftqualität", "Feinstaub")),
    _Topic(("TRAN",), "Public transport timetables", "fr", "Horaires des transports publics",
           "Scheduled departures of buses, trams and regional trains serving",
           "Départs programmés des bus, tramways et trains régionaux desservant",
           ("timetable", "public transport"), ("horaires", "transport en commun")),
    _Topic(("SOCI", "ECON"), "Population by age and sex", "nl",
           "Bevolking naar leeftijd en geslacht",
           "Resident population on 1 January by single year of age and sex for",
           "Bevolking op 1 januari naar leeftijd en geslacht voor",
           ("population", "demography"), ("bevolking", "demografie")),
    _Topic(("HEAL",), "Hospital bed occupancy", "es", "Ocupación de camas hospitalarias",
           "Daily occupancy of general and intensive-care beds in public hospitals of",
           "Ocupación diaria de camas generales y de cuidados intensivos en los hospitales de",
           ("hospitals", "health care"), ("hospitales", "sanidad")),
    _Topic(("ENER", "ENVI"), "Electricity consumption of public buildings", "it",
           "Consumi elettrici degli edifici pubblici",
           "Monthly electricity consumption metered in schools, offices and sports halls in",
           "Consumi elettrici mensili misurati in scuole, uffici e palestre del comune di",
           ("energy", "electricity"), ("energia", "elettricità")),
    _Topic(("AGRI",), "Crop yields", "pl", "Plony roślin uprawnych",
           "Harvested area, production and yield of the main arable crops around",
           "Powierzchnia zbiorów, produkcja i plony głównych upraw polowych w regionie",
           ("agriculture", "crops"), ("rolnictwo", "uprawy")),
    _Topic(("EDUC",), "School enrolment", "sv", "Inskrivning i skolan",
           "Number of pupils enrolled by school, grade and programme in",
           "Antal inskrivna elever per skola, årskurs och program i",
           ("education", "schools"), ("utbildning", "skolor")),
    _Topic(("GOVE", "ECON"), "Municipal budget", "fi", "Kunnan talousarvio",
           "Approved budget and actual spending by function and economic category of",
           "Hyväksytty talousarvio ja toteutuneet menot tehtävittäin, kunta:",
           ("budget", "public finance"), ("talousarvio", "julkinen talous")),
    _Topic(("REGI", "ENVI"), "Land use map", "pt", "Carta de uso do solo",
           "Land use and land cover polygons interpreted from aerial imagery for",
           "Polígonos de uso e ocupação do solo interpretados a partir de ortofotos para",
           ("land use", "land cover"), ("uso do solo", "ocupação do solo")),
    _Topic(("JUST",), "Court case statistics", "cs", "Statistika soudních případů",
           "Incoming, resolved and pending cases by type of proceedings at the courts of",
           "Nápad, vyřízené a nevyřízené věci podle druhu řízení u soudů, obvod",
           ("courts", "justice"), ("soudy", "justice")),
    _Topic(("TECH", "ECON"), "Broadband coverage", "da", "Bredbåndsdækning",
           "Share of households covered by fixed broadband by download speed class in",
           "Andel husstande dækket af fast bredbånd fordelt på hastighedsklasse i",
           ("broadband", "telecommunications"), ("bredbånd", "telekommunikation")),
    _Topic(("INTR", "ECON"), "Development aid projects", "el", "Έργα αναπτυξιακής βοήθειας",
           "Commitments and disbursements of development cooperation projects managed from",
           "Δεσμεύσεις και εκταμιεύσεις έργων αναπτυξιακής συνεργασίας με έδρα",
           ("development aid", "cooperation"), ("αναπτυξιακή βοήθεια", "συνεργασία")),
)
# Places where each second language is spoken: (name, EU country code).
_PLACES: dict[str, tuple[tuple[str, str], ...]] = {
    "de": (("Freiburg", "DEU"), ("Graz", "AUT"), ("Leipzig", "DEU")),
    "fr": (("Lyon", "FRA"), ("Liège", "BEL"), ("Nantes", "FRA")),
    "nl": (("Utrecht", "NLD"), ("Ghent", "BEL"), ("Groningen", "NLD")),
    "es": (("Valencia", "ESP"), ("Bilbao", "ESP"), ("Zaragoza", "ESP")),
    "it": (("Bologna", "ITA"), ("Torino", "ITA"), ("Bolzano", "ITA")),
    "pl": (("Kraków", "POL"), ("Poznań", "POL"), ("Lublin", "POL")),
    "sv": (("Uppsala", "SWE"), ("Malmö", "SWE"), ("Umeå", "SWE")),
    "fi": (("Tampere", "FIN"), ("Oulu", "FIN"), ("Turku", "FIN")),
    "pt": (("Porto", "PRT"), ("Braga", "PRT"), ("Coimbra", "PRT")),
    "cs": (("Brno", "CZE"), ("Olomouc", "CZE"), ("Plzeň", "CZE")),
    "da": (("Aarhus", "DNK"), ("Odense", "DNK"), ("Aalborg", "DNK")),
    "el": (("Thessaloniki", "GRC"), ("Patras", "GRC"), ("Heraklion", "GRC")),
}
# fmt: on
_PUBLISHERS: tuple[str, ...] = (
    "Statistics Office",
    "Environment Agency",
    "Department of Transport",
    "Health Authority",
    "Open Data Team",
    "Planning Department",
)
_FREQUENCIES: tuple[str, ...] = ("DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "ANNUAL", "IRREG")
# (EU file-type code, IANA media type, title suffix)
_FORMATS: tuple[tuple[str, str, str], ...] = (
    ("CSV", "text/csv", "CSV export"),
    ("JSON", "application/json", "JSON export"),
    ("XLSX", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "Spreadsheet"),
    ("GEOJSON", "application/geo+json", "GeoJSON features"),
    ("XML", "application/xml", "XML export"),
    ("PDF", "application/pdf", "Methodology report"),
    ("ZIP", "application/zip", "Zipped archive"),
    ("RDF_XML", "application/rdf+xml", "Linked data"),
)
_LICENCES: tuple[str, ...] = ("CC_BY_4_0", "CC0", "CC_BYSA_4_0", "OP_DATPRO")

_HEAD = (
    '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
    ' xmlns:dcat="http://www.w3.org/ns/dcat#" xmlns:dct="http://purl.org/dc/terms/"'
    ' xmlns:foaf="http://xmlns.com/foaf/0.1/" xmlns:vcard="http://www.w3.org/2006/vcard/ns#"'
    ' xmlns:adms="http://www.w3.org/ns/adms#" xmlns:owl="http://www.w3.org/2002/07/owl#"'
    ' xmlns:xsd="http://www.w3.org/2001/XMLSchema#"'
    ' xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#"'
    ' xmlns:skos="http://www.w3.org/2004/02/skos/core#">\n'
)
_DATASET = """<dcat:Dataset rdf:about="{iri}">
<dct:identifier>{identifier}</dct:identifier>
<dct:title xml:lang="en">{title_en}</dct:title>
<dct:title xml:lang="{lang}">{title_xx}</dct:title>
<dct:description xml:lang="en">{desc_en}</dct:description>
<dct:description xml:lang="{lang}">{desc_xx}</dct:description>
<dcat:keyword xml:lang="en">{kw_en0}</dcat:keyword>
<dcat:keyword xml:lang="en">{kw_en1}</dcat:keyword>
<dcat:keyword xml:lang="{lang}">{kw_xx0}</dcat:keyword>
<dcat:keyword xml:lang="{lang}">{kw_xx1}</dcat:keyword>
{themes}<dct:publisher>
<foaf:Agent rdf:about="{publisher}">
<foaf:name xml:lang="en">{publisher_name}</foaf:name>
<foaf:homepage rdf:resource="{homepage}"/>
<dct:type rdf:resource="http://purl.org/adms/publishertype/LocalAuthority"/>
</foaf:Agent>
</dct:publisher>
<dcat:contactPoint>
<vcard:Kind>
<vcard:fn>{publisher_name}</vcard:fn>
<vcard:hasEmail rdf:resource="mailto:{email}"/>
</vcard:Kind>
</dcat:contactPoint>
<dct:issued rdf:datatype="http://www.w3.org/2001/XMLSchema#date">{issued}</dct:issued>
<dct:modified rdf:datatype="http://www.w3.org/2001/XMLSchema#dateTime">{modified}</dct:modified>
<dct:accrualPeriodicity rdf:resource="{eu}frequency/{frequency}"/>
<dct:spatial rdf:resource="{eu}country/{country}"/>
<dct:language rdf:resource="{eu}language/ENG"/>
<dct:accessRights rdf:resource="{eu}access-right/PUBLIC"/>
<dct:temporal>
<dct:PeriodOfTime>
<dcat:startDate rdf:datatype="http://www.w3.org/2001/XMLSchema#date">{start}</dcat:startDate>
<dcat:endDate rdf:datatype="http://www.w3.org/2001/XMLSchema#date">{end}</dcat:endDate>
</dct:PeriodOfTime>
</dct:temporal>
<dcat:landingPage rdf:resource="{landing}"/>
<dct:conformsTo rdf:resource="http://www.opengis.net/def/crs/EPSG/0/4326"/>
<dct:provenance>
<dct:ProvenanceStatement>
<rdfs:label xml:lang="en">Compiled by the {publisher_name} from its own registers.</rdfs:label>
</dct:ProvenanceStatement>
</dct:provenance>
<adms:identifier>
<adms:Identifier>
<skos:notation>{slug}</skos:notation>
</adms:Identifier>
</adms:identifier>
{version}{distributions}</dcat:Dataset>
</rdf:RDF>
"""
_DISTRIBUTION = """<dcat:distribution>
<dcat:Distribution rdf:about="{iri}">
<dct:title xml:lang="en">{title}</dct:title>
<dct:description xml:lang="en">{description}</dct:description>
<dcat:accessURL rdf:resource="{access}"/>
<dcat:downloadURL rdf:resource="{download}"/>
<dct:format rdf:resource="{eu}file-type/{code}"/>
<dcat:mediaType rdf:resource="{iana}{media}"/>
<dct:license rdf:resource="{eu}licence/{licence}"/>
<dcat:byteSize rdf:datatype="http://www.w3.org/2001/XMLSchema#nonNegativeInteger">{size}</dcat:byteSize>
<dct:issued rdf:datatype="http://www.w3.org/2001/XMLSchema#date">{issued}</dct:issued>
<adms:status rdf:resource="{eu}distribution-status/COMPLETED"/>
</dcat:Distribution>
</dcat:distribution>
"""
_THEME = '<dcat:theme rdf:resource="' + _EU + 'data-theme/{code}"/>\n'
_EPOCH = date(2015, 1, 1)


def _esc(text: str) -> str:
    """Escape text for XML element content and double-quoted attributes."""
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def generate_identifier(index: int) -> str:
    """The OAI-PMH identifier of generated dataset ``index``."""
    return f"oai:data.example.org:dataset-{index:06d}"


def generate_dataset(
    index: int, *, base: str = "https://data.example.org/", seed: int = 0, revision: int = 0
) -> bytes:
    """One synthetic DCAT-AP dataset as RDF/XML bytes (root ``rdf:RDF``, no XML declaration).

    About 75 triples: bilingual title and description, keywords, EU data themes, a publisher
    and a contact point, dates, frequency, spatial and temporal coverage and 2-4
    distributions. The same ``(index, seed, revision)`` always gives the same bytes; a higher
    ``revision`` changes ``dct:modified`` and the English description. Every fifth dataset
    states its version with the DCAT-AP 2 term ``owl:versionInfo`` (rewritten by the mapper).
    """
    rng = random.Random(seed * 1_000_003 + index)
    topic = _TOPICS[rng.randrange(len(_TOPICS))]
    themes, title_en, lang, title_xx, desc_en, desc_xx, kws_en, kws_xx = topic
    places = _PLACES[lang]
    place, country = places[rng.randrange(len(places))]
    year = 2010 + rng.randrange(15)
    publisher_name = f"{place} {_PUBLISHERS[rng.randrange(len(_PUBLISHERS))]}"
    slug = f"dataset-{index:06d}"
    iri = f"{base}dataset/{slug}"
    issued = _EPOCH + timedelta(days=rng.randrange(3000))
    modified = datetime(issued.year, issued.month, issued.day, 8, 30, tzinfo=UTC) + timedelta(
        days=30 * revision + rng.randrange(20), minutes=rng.randrange(600)
    )
    revision_note = f" Revision {revision}." if revision else ""
    dists = []
    for k in range(2 + rng.randrange(3)):
        code, media, suffix = _FORMATS[rng.randrange(len(_FORMATS))]
        ext = code.lower().replace("_", ".")
        dists.append(
            _DISTRIBUTION.format(
                iri=f"{iri}/distribution/{k + 1}",
                title=_esc(f"{title_en} {place} {year} - {suffix}"),
                description=_esc(f"{suffix} of the dataset '{title_en}' for {place}, {year}."),
                access=f"{base}files/{slug}/",
                download=f"{base}files/{slug}/data-{k + 1}.{ext}",
                eu=_EU,
                code=code,
                iana=_IANA,
                media=media,
                licence=_LICENCES[rng.randrange(len(_LICENCES))],
                size=1_000 + rng.randrange(50_000_000),
                issued=issued.isoformat(),
            )
        )
    version = ""
    if index % 5 == 0:
        version = f"<owl:versionInfo>{1 + revision}.0</owl:versionInfo>\n"
    elif index % 5 == 1:
        version = f"<dcat:version>{1 + revision}.{rng.randrange(10)}</dcat:version>\n"
    body = _DATASET.format(
        iri=iri,
        identifier=generate_identifier(index),
        title_en=_esc(f"{title_en} - {place} {year}"),
        title_xx=_esc(f"{title_xx} - {place} {year}"),
        desc_en=_esc(f"{desc_en} {place}, {year}.{revision_note}"),
        desc_xx=_esc(f"{desc_xx} {place}, {year}."),
        lang=lang,
        kw_en0=_esc(kws_en[0]),
        kw_en1=_esc(kws_en[1]),
        kw_xx0=_esc(kws_xx[0]),
        kw_xx1=_esc(kws_xx[1]),
        themes="".join(_THEME.format(code=c) for c in themes),
        publisher=f"{base}organisation/{_slug(publisher_name)}",
        publisher_name=_esc(publisher_name),
        homepage=f"https://www.{_slug(place)}.example.org/",
        email=f"opendata@{_slug(place)}.example.org",
        issued=issued.isoformat(),
        modified=modified.strftime("%Y-%m-%dT%H:%M:%SZ"),
        eu=_EU,
        frequency=_FREQUENCIES[rng.randrange(len(_FREQUENCIES))],
        country=country,
        start=f"{year}-01-01",
        end=f"{year}-12-31",
        landing=f"{base}datasets/{slug}",
        slug=slug,
        version=version,
        distributions="".join(dists),
    )
    return (_HEAD + body).encode()


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


# --- bundled sample files ---------------------------------------------------------------------

_OAI_DATESTAMP = datetime(2024, 11, 4, 9, 0, tzinfo=UTC)


def _data_dir() -> Path:
    return Path(str(resources.files("aggregator.demo.peers") / "data"))


def load_bundled_oai_records() -> list[tuple[str, datetime, bytes]]:
    """The hand-written records of ``data/oai/*.rdf`` as (identifier, datestamp, payload).

    The identifier is ``oai:sample.example.org:<file stem>``; datestamps are a fixed day plus
    one hour per file in name order, so that a demo harvest with ``from`` returns a subset.
    """
    records: list[tuple[str, datetime, bytes]] = []
    folder = resources.files("aggregator.demo.peers") / "data" / "oai"
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".rdf"))
    for hour, name in enumerate(names):
        payload = (folder / name).read_bytes()
        stem = name.removesuffix(".rdf")
        records.append(
            (f"oai:sample.example.org:{stem}", _OAI_DATESTAMP + timedelta(hours=hour), payload)
        )
    return records


def bundled_dump_path() -> Path:
    """Path of the bundled Turtle catalogue ``data/dump/catalog.ttl``."""
    return _data_dir() / "dump" / "catalog.ttl"
