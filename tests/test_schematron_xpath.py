"""Schematron run as compiled XPaths (aggregator/validate/schematron_xpath.py) gives the
findings lxml.isoschematron's XSLT gives: same rule ids, messages, severities, SVRL locations
and lines, in the same order, on every failing fixture of the bundled rule files, on every
bundled sample with each of its elements removed or emptied in turn, and on a rule file made
to exercise the corners (first matching rule wins, reports, lets, names, positions, the
findings cap). Rule files outside the compiled subset keep the XSLT."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lxml import etree
from test_validation_iso19139 import CASES, DATASET, GEMINI, SAMPLES, SERIES, SERVICE, TABLE_A1

from aggregator.core.models import RawRecord
from aggregator.core.resources import bundled
from aggregator.mapping.payload import ParsedPayload
from aggregator.validate.schematron import SchematronValidator
from aggregator.validate.schematron_xpath import Unsupported, run

META_SHARE = bundled("schemas", "meta-share-3.0.sch")
MS_SAMPLES = Path(__file__).parents[1] / "aggregator" / "demo" / "peers" / "data" / "meta-share"
_VALIDATORS: dict[str, SchematronValidator] = {}


def validator(path: Path | str, max_findings: int = 50) -> SchematronValidator:
    key = f"{path}:{max_findings}"
    if key not in _VALIDATORS:
        _VALIDATORS[key] = SchematronValidator(str(path), max_findings=max_findings)
    return _VALIDATORS[key]


def payload(data: str | bytes) -> ParsedPayload:
    raw = data.encode() if isinstance(data, str) else data
    return ParsedPayload(RawRecord("s", "r", "xml", raw, "application/xml"))


def same_findings(v: SchematronValidator, data: str | bytes) -> tuple[str, ...]:
    """Both implementations on one document; the rule ids found (to show the case bites)."""
    p = payload(data)
    fast, reference = v.validate_payload(p), v.validate_with_xslt(p)
    assert fast == reference
    return tuple(f.rule for f in fast.findings)


def test_the_bundled_rule_files_run_as_compiled_xpaths() -> None:
    for path in (TABLE_A1, GEMINI, META_SHARE):
        assert validator(path)._xpath is not None, path.name


@pytest.mark.parametrize(("path", "rule", "sample", "mutate"), CASES, ids=[c[1] for c in CASES])
def test_every_failing_fixture_gets_the_xslt_findings(
    path: Path, rule: str, sample: str, mutate: Callable[[str], str]
) -> None:
    for rules in (TABLE_A1, GEMINI):  # each broken record through both rule files
        found = same_findings(validator(rules), mutate(sample))
        if rules == path:
            assert rule in found


def _variants(data: bytes) -> list[bytes]:
    """The document with each element name removed everywhere, then emptied everywhere."""
    root = etree.fromstring(data)
    names = sorted({e.tag for e in root.iter() if isinstance(e.tag, str)} - {root.tag})
    out = []
    for name in names:
        for how in ("remove", "empty"):
            copy = etree.fromstring(data)
            for e in list(copy.iter(name)):
                if how == "remove" and e.getparent() is not None:
                    e.getparent().remove(e)  # type: ignore[union-attr]
                elif how == "empty":
                    e.text = None
                    e[:] = []
                    e.attrib.clear()
            out.append(etree.tostring(copy))
    return out


@pytest.mark.parametrize("sample", ["dataset", "series", "service"])
def test_gemini_samples_with_each_element_removed_or_emptied(sample: str) -> None:
    text = {"dataset": DATASET, "series": SERIES, "service": SERVICE}[sample]
    seen: set[str] = set()
    for variant in _variants(text.encode()):
        for rules in (TABLE_A1, GEMINI):
            seen.update(same_findings(validator(rules), variant))
    assert len(seen) > 20  # the variants break many rules, not none


def test_meta_share_samples_with_each_element_removed_or_emptied() -> None:
    seen: set[str] = set()
    for path in sorted(MS_SAMPLES.glob("*.xml")):
        for variant in _variants(path.read_bytes()):
            seen.update(same_findings(validator(META_SHARE), variant))
    assert len(seen) > 5


CORNERS = Path(__file__).parent / "data" / "schematron" / "corners.sch"
DOCUMENT = """<root xmlns:a="urn:a" xmlns:b="urn:b">
  <a:item kind="special"><a:name>x</a:name></a:item>
  <b:item flag="yes"/>
  <a:item><a:name> </a:name></a:item>
  <a:item kind="special" flag="no"><a:code>1</a:code></a:item>
  <plain>ab</plain><plain>abc</plain><plain/>
</root>"""


def test_the_corners_of_the_subset_match_the_xslt() -> None:
    rules = CORNERS
    v = validator(rules)
    assert v._xpath is not None
    found = same_findings(v, DOCUMENT)
    # the first special item fails its own rule only (the second rule does not see it); the
    # flagged special item is not reported by the second rule either
    assert found.count("special-code") == 1 and found.count("item-flagged") == 1
    assert found.count("item-name") == 2 and found.count("plain-text") == 2
    assert "root-count" in found and "test false()" in found
    for cap in (1, 3):
        capped = validator(rules, max_findings=cap)
        p = payload(DOCUMENT)
        report = capped.validate_payload(p)
        assert report == capped.validate_with_xslt(p)
        assert report.findings[-1].rule == "tooManyFindings"


@pytest.mark.parametrize(
    "rule",
    [
        '<sch:rule context="a:item"><sch:assert id="x" test="@n = current()/@n">m</sch:assert>',
        '<sch:rule context="a:item"><sch:let name="v" value="@n"/>'
        '<sch:assert id="x" test="a:code[. = $v]">m</sch:assert>',
        '<sch:rule context="a:item[position() = 1]">'
        '<sch:assert id="x" test="a:code">m</sch:assert>',
        '<sch:rule context="a:item"><sch:assert id="x" test="a:code">m <sch:emph>e</sch:emph>'
        "</sch:assert>",
    ],
    ids=["current", "let-in-predicate", "position", "markup"],
)
def test_rules_outside_the_subset_keep_the_xslt(tmp_path: Path, rule: str) -> None:
    rules = tmp_path / "outside.sch"
    rules.write_text(
        '<sch:schema xmlns:sch="http://purl.oclc.org/dsdl/schematron"><sch:ns prefix="a"'
        f' uri="urn:a"/><sch:pattern>{rule}</sch:rule></sch:pattern></sch:schema>',
        encoding="utf-8",
    )
    v = SchematronValidator(str(rules))
    assert v._xpath is None
    found = [f.rule for f in v.validate_payload(payload(DOCUMENT)).findings]
    assert found and set(found) == {"x"}


def test_a_phase_keeps_the_xslt() -> None:
    assert SchematronValidator(str(GEMINI), phase="#ALL")._xpath is None


def test_a_context_on_a_comment_runs_the_xslt_for_that_record(tmp_path: Path) -> None:
    """The walk of lxml's compiled XSLT decides what a comment context gives, not us."""
    rules = tmp_path / "comments.sch"
    rules.write_text(
        '<sch:schema xmlns:sch="http://purl.oclc.org/dsdl/schematron"><sch:pattern>'
        '<sch:rule context="comment()"><sch:assert id="no-comment" test="false()">'
        "no comments</sch:assert></sch:rule></sch:pattern></sch:schema>",
        encoding="utf-8",
    )
    v = SchematronValidator(str(rules))
    assert v._xpath is not None
    doc = payload("<root><!-- a note --><x/></root>")
    with pytest.raises(Unsupported):
        run(v._xpath, doc.xml())
    assert v.validate_payload(doc) == v.validate_with_xslt(doc)


def test_bundled_gemini_records_pass_both_ways() -> None:
    for path in sorted(SAMPLES.glob("*.xml")):
        for rules in (TABLE_A1, GEMINI):
            assert same_findings(validator(rules), path.read_bytes()) == ()
