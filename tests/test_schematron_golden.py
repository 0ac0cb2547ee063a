"""The compiled-XPath Schematron run gives the XSLT's findings on a corpus of real records.

The records a harvest meets: the generated GEMINI records of bench/iso_pipeline.py and of the
CSW peer (aggregator/demo/peers/gemini_samples.py), the bundled GEMINI and ISO samples, and each
of them broken in the ways publishers break records (an empty identifier, a bounding box in
eastings, an empty title, a wrong resource type, a missing lineage, ...), so that most rules
of both bundled files fire somewhere. For every record and both rule files, the findings of
``validate_payload`` (compiled XPaths) equal those of ``validate_with_xslt`` (lxml's ISO
skeleton) exactly: rule ids, severities, messages, SVRL locations, lines, order.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from aggregator.core.models import RawRecord
from aggregator.core.resources import bundled
from aggregator.demo.peers.gemini_samples import bundled_gemini_records, generate_gemini_record
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.schematron import SchematronValidator

ROOT = Path(__file__).parents[1]
ISO = ROOT / "aggregator" / "demo" / "peers" / "data" / "iso"
RULES = (bundled("schemas", "iso19139-table-a1.sch"), bundled("schemas", "gemini-2.3.sch"))


def _bench_records(count: int) -> list[bytes]:
    spec = importlib.util.spec_from_file_location(
        "iso_pipeline", ROOT / "bench" / "iso_pipeline.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    base = module.template()
    return [module.record(base, i) for i in range(count)]


def _corpus() -> list[tuple[str, bytes]]:
    out = [(f"bench-{i}", data) for i, data in enumerate(_bench_records(6))]
    out += [(f"peer-{i}", generate_gemini_record(i, revision=i % 2)) for i in range(6)]
    out += [(f"peer-{name}", data) for name, data in bundled_gemini_records()]
    out += [(f"iso-{path.name}", path.read_bytes()) for path in sorted(ISO.glob("*.xml"))]
    return out


def _sub(pattern: str, replacement: str, count: int = 1) -> Callable[[str], str]:
    compiled = re.compile(pattern, re.S)
    return lambda text: compiled.sub(replacement, text, count=count)


CS = r"<gco:CharacterString>[^<]*</gco:CharacterString>"
MUTATIONS: dict[str, Callable[[str], str]] = {
    "empty-identifier": _sub(rf"(<gmd:fileIdentifier>){CS}", r"\1<gco:CharacterString/>"),
    "eastings-bbox": _sub(r"(<gmd:westBoundLongitude>\s*<gco:Decimal>)[^<]*", r"\g<1>325000"),
    "south-above-north": _sub(r"(<gmd:southBoundLatitude>\s*<gco:Decimal>)[^<]*", r"\g<1>89.5"),
    "empty-title": _sub(
        rf"(<gmd:title>\s*){CS}", r"\1<gco:CharacterString> </gco:CharacterString>"
    ),
    "wrong-resource-type": _sub(
        r'(<gmd:hierarchyLevel>\s*<gmd:MD_ScopeCode[^>]*codeListValue=")[^"]*', r"\1software"
    ),
    "two-resource-types": _sub(r"(<gmd:hierarchyLevel>.*?</gmd:hierarchyLevel>)", r"\1\1"),
    "no-data-quality": _sub(r"<gmd:dataQualityInfo>.*</gmd:dataQualityInfo>", ""),
    "no-contact-email": _sub(
        r"(<gmd:contact>.*?)<gmd:electronicMailAddress>.*?</gmd:electronicMailAddress>", r"\1"
    ),
    "empty-leaf-elements": _sub(
        r"(<gmd:identificationInfo>\s*<(?:gmd:MD_DataIdentification|srv:SV_ServiceIdentification)[^>]*>)",
        r"\1<gmd:purpose/><gmd:status/>",
    ),
    "relative-links": _sub(r"<gmd:URL>\s*https?://", "<gmd:URL>www.", count=0),
    "no-keywords": _sub(r"<gmd:descriptiveKeywords>.*</gmd:descriptiveKeywords>", ""),
    "nameless-parties": _sub(r"<gmd:organisationName>.*?</gmd:organisationName>", "", count=0),
    "no-lineage-statement": _sub(r"<gmd:statement>.*?</gmd:statement>", ""),
    "empty-texts": _sub(CS, "<gco:CharacterString/>", count=0),
    "no-temporal-begin": _sub(
        r"<gml(?:32)?:beginPosition[^>]*>[^<]*</gml(?:32)?:beginPosition>", "", count=0
    ),
    "other-restrictions-unexplained": _sub(
        r"<gmd:otherConstraints>.*?</gmd:otherConstraints>", "", count=0
    ),
}


def _validators() -> list[SchematronValidator]:
    out = [SchematronValidator(str(path)) for path in RULES]
    out += [SchematronValidator(str(path), max_findings=3) for path in RULES]
    assert all(v._xpath is not None for v in out)
    return out


@pytest.fixture(scope="module")
def validators() -> list[SchematronValidator]:
    return _validators()


def _same(validators: list[SchematronValidator], data: bytes) -> set[str]:
    found: set[str] = set()
    for v in validators:
        p = ParsedPayload(RawRecord("s", "r", "iso19139", data, "application/xml"))
        fast, reference = v.validate_payload(p), v.validate_with_xslt(p)
        assert fast == reference, v
        found.update(f.rule for f in fast.findings)
    return found


def test_the_corpus_passes_both_ways(validators: list[SchematronValidator]) -> None:
    corpus = _corpus()
    assert len(corpus) >= 15
    for name, data in corpus:
        found = _same(validators, data)
        # the bundled records conform; the generated ones conform but for recommendations
        assert not {f for f in found if not f.startswith("gemini-inspire")}, (name, found)


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_broken_records_get_the_xslt_findings(
    validators: list[SchematronValidator], mutation: str
) -> None:
    mutate = MUTATIONS[mutation]
    changed = 0
    found: set[str] = set()
    for _, data in _corpus():
        text = data.decode("utf-8")
        broken = mutate(text)
        if broken == text:
            continue
        changed += 1
        found |= _same(validators, broken.encode("utf-8"))
    assert changed >= 5, f"{mutation} changed {changed} records"
    assert found, f"{mutation} broke no rule"


def test_the_mutations_break_most_rules(validators: list[SchematronValidator]) -> None:
    """All mutations at once, record by record: the corpus exercises most assertions."""
    found: set[str] = set()
    for _, data in _corpus():
        text = data.decode("utf-8")
        for mutate in MUTATIONS.values():
            text = mutate(text)
        found |= _same(validators, text.encode("utf-8"))
    assert len(found) >= 25, sorted(found)


TAG_RULES = """<sch:schema xmlns:sch="http://purl.oclc.org/dsdl/schematron">
  <sch:ns prefix="a" uri="urn:a"/><sch:ns prefix="b" uri="urn:b"/>
  <sch:pattern>
    <sch:rule context="a:x/a:y"><sch:assert id="xy" test="@ok">x/y <sch:name/></sch:assert>
    </sch:rule>
    <sch:rule context="a:x/*/a:z | b:z"><sch:assert id="x-any-z" test="@ok">z</sch:assert>
      <sch:report id="z-report" test="@flag">flagged z</sch:report></sch:rule>
    <sch:rule context="a:y"><sch:assert id="y" test="@ok">y</sch:assert></sch:rule>
    <sch:rule context="a:root"><sch:assert id="root" test="@ok">root</sch:assert></sch:rule>
    <sch:rule context="y"><sch:assert id="plain-y" test="@ok">plain y</sch:assert></sch:rule>
  </sch:pattern>
  <sch:pattern>
    <sch:rule context="a:y"><sch:report id="y-again" test="1">every y (a number: true)</sch:report>
    </sch:rule>
  </sch:pattern>
  <sch:pattern>
    <sch:rule context="a:*[not(*)][starts-with(local-name(), 'z')]">
      <sch:assert id="leaf-z" test="@ok">an a:z leaf</sch:assert></sch:rule>
    <sch:rule context="a:y[1]"><sch:report id="first-y" test="true()">first y</sch:report>
    </sch:rule>
  </sch:pattern>
</sch:schema>"""
TAG_DOCUMENT = """<a:root xmlns:a="urn:a" xmlns:b="urn:b">
  <a:x><a:y/><a:y ok="1"/><b:w><a:z/><a:z ok="1" flag="1"/></b:w><a:x><a:y/></a:x></a:x>
  <a:y/><b:x><a:y/></b:x><b:z/><a:w><a:z/></a:w><y/><a:x><y/></a:x>
</a:root>"""


def test_contexts_read_by_descent_select_what_the_xslt_walk_selects(tmp_path: Path) -> None:
    """Contexts read by the descendant axis (a:x/a:y, a:x/*/a:z, unions, the root element, a
    name without a prefix, a:*[not(*)][...]) or kept as a path (a:y[1]: a position) fire on
    the nodes the XSLT's own walk fires on."""
    rules = tmp_path / "tags.sch"
    rules.write_text(TAG_RULES, encoding="utf-8")
    v = SchematronValidator(str(rules))
    assert v._xpath is not None
    contexts = [r.fires_text for pattern in v._xpath for r in pattern.rules]
    assert sum("/descendant::" in c for c in contexts) == 7  # all but a:y[1] (a position)
    found = _same([v], TAG_DOCUMENT.encode())
    assert {"xy", "x-any-z", "z-report", "y", "root", "plain-y", "y-again"} <= found
    assert {"leaf-z", "first-y"} <= found
    ok = re.sub(r"<((?:a|b):\w+|y)\b(?![^>]*\bok=)", r'<\1 ok="1"', TAG_DOCUMENT)
    assert _same([v], ok.encode()) == {"z-report", "y-again", "first-y"}
