"""Golden-output check of the ``iso19139`` mapper, for work on its speed (not a test).

    python bench/iso_golden.py --save /tmp/iso-golden.json    # before a change
    python bench/iso_golden.py --check /tmp/iso-golden.json   # after it: exit 1 on any change

Maps a fixed corpus and digests every field of every MappedDataset (N-Triples, catalogue
N-Triples, content hash, datestamp, findings, themes; a MappingError's message when the
record fails): the bundled ISO and GEMINI samples, 300 records of
:func:`aggregator.demo.peers.gemini_samples.generate_gemini_record` (some in two revisions),
bench/iso_pipeline.py's generated records, any ``--extra`` folder of records,
and variants of every bundled sample that reach the mapper's corners:
each element removed in turn, each element's children reversed, each sample made a dataset,
a series and a service. A speed change must leave every digest as it was.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from lxml import etree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from aggregator.core.errors import AggregatorError  # noqa: E402
from aggregator.core.models import RawRecord  # noqa: E402
from aggregator.demo.peers.gemini_samples import bundled_gemini_records, generate_gemini_record  # noqa: E402
from aggregator.mapping.base import MappingContext  # noqa: E402
from aggregator.mapping.iso19139 import IsoMapper  # noqa: E402

CTX = MappingContext("https://aggregator.example.org/", "golden")
LEVELS = ("dataset", "series", "service")
DATASET = "iso/gemini-dataset-flood-risk.xml"
_S = "<gco:CharacterString>{}</gco:CharacterString>"
# replacements of the dataset sample's time period (any gml namespace, GML 3.1 begin/end)
PERIODS = (
    '<gml:TimeInstant gml:id="i"><gml:timePosition>2020-02-03</gml:timePosition></gml:TimeInstant>',
    '<gml:TimeInstant gml:id="i"><!-- c --><gml:timePosition indeterminatePosition="now">'
    "2020</gml:timePosition><gml:timePosition>2021</gml:timePosition></gml:TimeInstant>",
    '<gml:TimePeriod gml:id="t"><gml:begin><gml:TimeInstant><gml:timePosition>2001-01'
    "</gml:timePosition></gml:TimeInstant></gml:begin><gml:end><gml:TimeInstant>"
    "<gml:timePosition>2002-02-02T10:00:00Z</gml:timePosition></gml:TimeInstant></gml:end>"
    "</gml:TimePeriod>",
    '<gml:TimePeriod gml:id="t"><gml:endPosition>2010</gml:endPosition><!-- c -->'
    "<gml:begin><x:w xmlns:x='urn:x'><gml:timePosition>1999</gml:timePosition></x:w></gml:begin>"
    "<gml:beginPosition>2000</gml:beginPosition><gml:end><gml:timePosition>2011"
    "</gml:timePosition></gml:end></gml:TimePeriod>",
    '<gml:TimePeriod gml:id="t"><gml:begin/><gml:beginPosition indeterminatePosition="unknown"'
    "/><gml:endPosition>bad</gml:endPosition></gml:TimePeriod>",
    '<x:TimePeriod xmlns:x="urn:other"><x:beginPosition>2003-04-05</x:beginPosition>'
    "<x:endPosition>2004-13-01</x:endPosition></x:TimePeriod>",
)
# replacements of the dataset sample's first responsible party
PARTIES = (
    "<gmd:CI_ResponsibleParty/>",
    "<gmd:CI_ResponsibleParty><gmd:individualName>"
    + _S.format("A Person")
    + "</gmd:individualName>"
    "<gmd:role/><gmd:role><gmd:CI_RoleCode codeList='x' codeListValue='author'/></gmd:role>"
    "<gmd:role><gmd:CI_RoleCode codeList='x' codeListValue='owner'/></gmd:role>"
    "</gmd:CI_ResponsibleParty>",
    "<gmd:CI_ResponsibleParty><gmd:organisationName>"
    + _S.format("Org One")
    + "</gmd:organisationName>"
    "<gmd:organisationName>" + _S.format("Org Two") + "</gmd:organisationName>"
    "<gmd:contactInfo/><gmd:contactInfo><gmd:CI_Contact><gmd:onlineResource><gmd:CI_OnlineResource>"
    "<gmd:linkage><gmd:URL>https://one.example.org/</gmd:URL></gmd:linkage></gmd:CI_OnlineResource>"
    "</gmd:onlineResource><gmd:address/><gmd:address><gmd:CI_Address><gmd:linkage>"
    "<gmd:URL>https://in-address.example.org/</gmd:URL></gmd:linkage><gmd:city>"
    + _S.format("Ely")
    + "</gmd:city><gmd:city>"
    + _S.format("Bath")
    + "</gmd:city><gmd:electronicMailAddress>"
    + _S.format("a@example.org")
    + "</gmd:electronicMailAddress></gmd:CI_Address></gmd:address>"
    "<gmd:address><gmd:CI_Address><gmd:country>" + _S.format("UK") + "</gmd:country>"
    "</gmd:CI_Address></gmd:address><gmd:phone><gmd:CI_Telephone><gmd:facsimile>"
    + _S.format("1")
    + "</gmd:facsimile><gmd:voice>"
    + _S.format("+44 1")
    + "</gmd:voice><gmd:voice>"
    + _S.format("+44 2")
    + "</gmd:voice></gmd:CI_Telephone></gmd:phone></gmd:CI_Contact>"
    "</gmd:contactInfo><gmd:contactInfo><gmd:CI_Contact><gmd:phone><gmd:CI_Telephone><gmd:voice>"
    + _S.format("+44 3")
    + "</gmd:voice></gmd:CI_Telephone></gmd:phone></gmd:CI_Contact>"
    "</gmd:contactInfo><gmd:role><gmd:CI_RoleCode codeList='x' codeListValue='publisher'/>"
    "</gmd:role><gmd:positionName/><gmd:positionName>" + _S.format("Boss") + "</gmd:positionName>"
    "</gmd:CI_ResponsibleParty>",
)


def samples() -> list[tuple[str, bytes]]:
    iso = sorted((ROOT / "aggregator" / "demo" / "peers" / "data" / "iso").glob("*.xml"))
    return [(f"iso/{p.name}", p.read_bytes()) for p in iso] + [
        (f"gemini/{name}", data) for name, data in bundled_gemini_records()
    ]


def _variants(name: str, data: bytes) -> Iterator[tuple[str, bytes]]:
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    tree = etree.fromstring(data, parser)
    count = sum(1 for _ in tree.iter())
    for i in range(1, count):  # each element but the root removed in turn
        root = etree.fromstring(data, parser)
        el = list(root.iter())[i]
        parent = el.getparent()
        if parent is not None:
            parent.remove(el)
            yield f"{name}#drop{i}", etree.tostring(root)
    for i in range(count):  # each element's children in reverse order
        root = etree.fromstring(data, parser)
        el = list(root.iter())[i]
        children = list(el)
        if len(children) > 1:
            for child in children:
                el.remove(child)
            for child in reversed(children):
                el.append(child)
            yield f"{name}#reverse{i}", etree.tostring(root)
    text = data.decode("utf-8")
    for level in LEVELS:
        for other in LEVELS:
            if other != level:
                swapped = text.replace(f'codeListValue="{other}"', f'codeListValue="{level}"')
                yield f"{name}#as-{level}-from-{other}", swapped.encode()


def _swap(pattern: re.Pattern[str], text: str, snippet: str) -> str:
    """``text`` with the first match of ``pattern`` replaced by ``snippet``."""
    found = pattern.search(text)
    assert found is not None, pattern.pattern
    return text[: found.start()] + snippet + text[found.end() :]


def _snippets(name: str, data: bytes) -> Iterator[tuple[str, bytes]]:
    text = data.decode("utf-8")
    period = re.compile(r"<gml:TimePeriod.*?</gml:TimePeriod>", re.S)
    for i, snippet in enumerate(PERIODS):
        yield f"{name}#period{i}", _swap(period, text, snippet).encode()
    party = re.compile(r"<gmd:CI_ResponsibleParty>.*?</gmd:CI_ResponsibleParty>", re.S)
    for i, snippet in enumerate(PARTIES):
        for where in ("pointOfContact", "contact"):  # the resource's, the catalogue record's
            first = text.index(f"<gmd:{where}>")
            swapped = text[:first] + _swap(party, text[first:], snippet)
            yield f"{name}#{where}{i}", swapped.encode()
    extent = text.replace(
        "<gmd:extent>\n        <gmd:EX_Extent>",
        '<srv:extent xmlns:srv="http://www.isotc211.org/2005/srv"><gmd:EX_Extent>',
        1,
    )
    extent = extent.replace(
        "</gmd:EX_Extent>\n      </gmd:extent>", "</gmd:EX_Extent></srv:extent>", 1
    )
    assert "srv:extent" in extent
    yield f"{name}#srv-extent", extent.encode()


def corpus(extra: Path | None = None) -> Iterator[tuple[str, bytes]]:
    import iso_pipeline

    for path in sorted(extra.glob("*.xml")) if extra else ():
        yield f"extra/{path.name}", path.read_bytes()
    for name, data in samples():
        yield name, data
        yield from _variants(name, data)
        if name == DATASET:
            yield from _snippets(name, data)
    for i in range(300):
        yield f"generated/{i}", generate_gemini_record(i)
        if i % 10 == 0:
            yield f"generated/{i}r1", generate_gemini_record(i, revision=1)
    base = iso_pipeline.template()
    for i in range(200):
        yield f"bench/{i}", iso_pipeline.record(base, i)


def digest(mapper: IsoMapper, name: str, data: bytes) -> str:
    raw = RawRecord("golden", name, "iso19139", data, "application/xml")
    try:
        results = mapper.map(raw, CTX)
    except AggregatorError as err:
        return hashlib.sha256(f"{type(err).__name__}: {err}".encode()).hexdigest()
    h = hashlib.sha256()
    for m in results:
        for value in (
            m.local_id,
            m.dataset_iri,
            m.ntriples,
            m.content_hash,
            repr(m.datestamp),
            m.catalog_ntriples,
            repr(m.findings),
            repr(m.themes),
        ):
            h.update(value if isinstance(value, bytes) else value.encode())
            h.update(b"\x00")
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path, help="write the digests to this file")
    group.add_argument("--check", type=Path, help="compare with the digests in this file")
    parser.add_argument("--extra", type=Path, help="a folder of more records (*.xml) to map")
    parser.add_argument("--limit", type=int, default=0, help="map only the first N (0: all)")
    args = parser.parse_args()
    mapper = IsoMapper()
    records = corpus(args.extra)
    chosen = islice(records, args.limit) if args.limit else records
    digests = {name: digest(mapper, name, data) for name, data in chosen}
    if args.save:
        args.save.write_text(json.dumps(digests, indent=0, sort_keys=True), encoding="utf-8")
        print(f"{len(digests)} digests saved to {args.save}")
        return
    want = json.loads(args.check.read_text(encoding="utf-8"))
    changed = sorted(k for k in want.keys() | digests.keys() if want.get(k) != digests.get(k))
    for name in changed[:20]:
        print(f"CHANGED {name}")
    print(f"{len(digests)} records mapped, {len(changed)} changed")
    sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()
