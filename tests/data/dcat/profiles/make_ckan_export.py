"""Writes ckan-100.nt: a CKAN (ckanext-dcat) catalogue export of 100 datasets, as N-Triples.

Deterministic. Run from this directory: ``python make_ckan_export.py``. It follows what
ckanext-dcat's euro_dcat_ap profile writes: formats and media types as literals, byte sizes as
xsd:decimal, licences as opendefinition IRIs, schema:startDate periods, owl:versionInfo,
GeoJSON geometries, keywords without language tags, a Hydra paging node, and the dirt of real
portals (a few datasets without description, a "12 MB" byte size, literal frequencies,
languages and places).
"""

from __future__ import annotations

from pathlib import Path

BASE = "https://ckan.example.org"
D = "http://www.w3.org/ns/dcat#"
T = "http://purl.org/dc/terms/"
TYPE = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
XSD = "http://www.w3.org/2001/XMLSchema#"
LICENCES = [
    "http://www.opendefinition.org/licenses/cc-by",
    "http://www.opendefinition.org/licenses/odc-odbl",
    "http://www.opendefinition.org/licenses/cc-zero",
]
FORMATS = [
    ("CSV", "text/csv"),
    ("JSON", "application/json"),
    ("XLSX", ""),
    ("ZIP", "application/zip"),
    ("GeoJSON", "application/geo+json"),
    ("API", ""),
]
TOPICS = [
    "traffic",
    "schools",
    "budget",
    "air-quality",
    "parking",
    "libraries",
    "elections",
    "waste",
    "parks",
    "housing",
]


def lit(text: str, datatype: str | None = None) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"' + (f"^^<{datatype}>" if datatype else "")


def main() -> None:
    lines: list[str] = []

    def t(s: str, p: str, o: str) -> None:
        lines.append(f"{s} {p} {o} .")

    cat = f"<{BASE}/catalog>"
    t(cat, TYPE, f"<{D}Catalog>")
    t(cat, f"<{T}title>", lit("Example City open data (CKAN)"))
    t(cat, f"<{T}description>", lit("Datasets of the Example City CKAN portal."))
    t(cat, f"<{T}publisher>", "_:catpub")
    t("_:catpub", TYPE, "<http://xmlns.com/foaf/0.1/Organization>")
    t("_:catpub", "<http://xmlns.com/foaf/0.1/name>", lit("Example City"))
    t(cat, "<http://xmlns.com/foaf/0.1/homepage>", f"<{BASE}>")
    t(cat, f"<{T}language>", lit("en"))
    t(cat, f"<{T}modified>", lit("2024-05-02T11:04:55.123456", XSD + "dateTime"))
    hydra = "http://www.w3.org/ns/hydra/core#"
    page = f"<{BASE}/catalog.nt?page=1>"
    t(page, TYPE, f"<{hydra}PagedCollection>")
    t(page, f"<{hydra}totalItems>", lit("100", XSD + "integer"))
    t(page, f"<{hydra}itemsPerPage>", lit("100", XSD + "integer"))
    t(page, f"<{hydra}firstPage>", lit(f"{BASE}/catalog.nt?page=1"))
    for n in range(100):
        uid = f"{n:08x}-5d1c-4c3e-9b6a-{n * 7919 % 10**12:012d}"
        ds = f"<{BASE}/dataset/{uid}>"
        topic = TOPICS[n % len(TOPICS)]
        t(cat, f"<{D}dataset>", ds)
        t(ds, TYPE, f"<{D}Dataset>")
        t(ds, f"<{T}identifier>", lit(uid))
        t(ds, f"<{T}title>", lit(f"{topic.title()} {2010 + n % 14} (#{n})"))
        if n % 17 != 5:  # CKAN's notes are optional: a few datasets have none
            t(ds, f"<{T}description>", lit(f"Data about {topic} in Example City, release {n}."))
        for word in [topic, "example city", f"year {2010 + n % 14}"]:
            t(ds, f"<{D}keyword>", lit(word))
        t(
            ds,
            f"<{T}issued>",
            lit(f"2019-0{1 + n % 9}-1{n % 10}T08:00:00.000{n:03d}", XSD + "dateTime"),
        )
        t(ds, f"<{T}modified>", lit(f"2024-0{1 + n % 9}-2{n % 10}T16:30:00", XSD + "dateTime"))
        t(ds, f"<{D}landingPage>", f"<{BASE}/dataset/{topic.replace(' ', '-')}-{n}>")
        if n % 3 == 0:
            t(ds, "<http://www.w3.org/2002/07/owl#versionInfo>", lit(f"1.{n % 5}"))
        pub = f"_:pub{n}"
        t(ds, f"<{T}publisher>", pub)
        t(pub, TYPE, "<http://xmlns.com/foaf/0.1/Organization>")
        t(
            pub,
            "<http://xmlns.com/foaf/0.1/name>",
            lit(["Mobility department", "Education department", "Finance department"][n % 3]),
        )
        t(pub, "<http://xmlns.com/foaf/0.1/mbox>", lit(f"dept{n % 3}@city.example.org"))
        cp = f"_:cp{n}"
        t(ds, f"<{D}contactPoint>", cp)
        t(cp, TYPE, "<http://www.w3.org/2006/vcard/ns#Organization>")
        t(cp, "<http://www.w3.org/2006/vcard/ns#fn>", lit("Open data team"))
        if n % 4 == 1:  # ckanext-dcat before 1.0 wrote the address as a string
            t(cp, "<http://www.w3.org/2006/vcard/ns#hasEmail>", lit("opendata@city.example.org"))
        else:
            t(
                cp,
                "<http://www.w3.org/2006/vcard/ns#hasEmail>",
                "<mailto:opendata@city.example.org>",
            )
        if n % 5 == 0:
            t(
                ds,
                f"<{T}accrualPeriodicity>",
                lit(["monthly", "annually", "weekly", "irregular", "R/P1D"][n // 5 % 5]),
            )
        if n % 6 == 0:
            t(ds, f"<{T}language>", lit(["en", "English", "de"][n // 6 % 3]))
        if n % 7 == 0:
            sp = f"_:sp{n}"
            t(ds, f"<{T}spatial>", sp)
            t(sp, TYPE, f"<{T}Location>")
            t(
                sp,
                "<http://www.w3.org/ns/locn#geometry>",
                lit(
                    '{"type": "Point", "coordinates": [13.4, 52.5]}',
                    "https://www.iana.org/assignments/media-types/application/vnd.geo+json",
                ),
            )
        elif n % 7 == 3:
            t(ds, f"<{T}spatial>", lit("Example City"))
        if n % 8 == 0:
            tp = f"_:tp{n}"
            t(ds, f"<{T}temporal>", tp)
            t(tp, TYPE, f"<{T}PeriodOfTime>")
            t(tp, "<http://schema.org/startDate>", lit(f"{2010 + n % 14}-01-01", XSD + "date"))
            t(tp, "<http://schema.org/endDate>", lit(f"{2010 + n % 14}-12-31", XSD + "date"))
        for k in range(1 + n % 3):
            dist = f"<{BASE}/dataset/{uid}/resource/{k}>"
            fmt, media = FORMATS[(n + k) % len(FORMATS)]
            t(ds, f"<{D}distribution>", dist)
            t(dist, TYPE, f"<{D}Distribution>")
            t(dist, f"<{T}title>", lit(f"{topic} {fmt} file"))
            t(dist, f"<{D}accessURL>", f"<{BASE}/dataset/{uid}/resource/{k}/download>")
            t(
                dist,
                f"<{D}downloadURL>",
                f"<https://files.city.example.org/{uid}/{k}.{fmt.lower()}>",
            )
            t(dist, f"<{T}format>", lit(fmt))
            if media:
                t(dist, f"<{D}mediaType>", lit(media))
            t(dist, f"<{T}license>", f"<{LICENCES[n % 3]}>")
            size = "12 MB" if (n, k) == (42, 0) else str(1000 + n * 3571 + k)
            t(
                dist,
                f"<{D}byteSize>",
                lit(size, XSD + "decimal") if size[0].isdigit() else lit(size),
            )
            if k == 0 and n % 10 == 0:
                ck = f"_:ck{n}"
                t(dist, "<http://spdx.org/rdf/terms#checksum>", ck)
                t(ck, TYPE, "<http://spdx.org/rdf/terms#Checksum>")
                t(ck, "<http://spdx.org/rdf/terms#checksumValue>", lit(f"{n:040x}"))
                t(
                    ck,
                    "<http://spdx.org/rdf/terms#algorithm>",
                    "<http://spdx.org/rdf/terms#checksumAlgorithm_sha1>",
                )
    Path(__file__).with_name("ckan-100.nt").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
