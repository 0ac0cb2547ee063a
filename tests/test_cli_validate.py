"""``aggregator validate FILE``: does this document, as published, conform to DCAT-AP 3.0.1?"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from aggregator.cli import main

PREFIXES = """@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct: <http://purl.org/dc/terms/> .
@prefix foaf: <http://xmlns.com/foaf/0.1/> .
"""
EU = "http://publications.europa.eu/resource/authority/"
CATALOGUE = """<http://ex.org/cat> a dcat:Catalog ; dct:title "Catalogue"@en ;
    dct:description "All our data."@en ; dct:publisher <http://ex.org/org> ;
    dcat:dataset <http://ex.org/d1> .
<http://ex.org/org> a foaf:Organization , foaf:Agent ; foaf:name "Org" .
"""
DATASET = """<http://ex.org/d1> a dcat:Dataset ; dct:title "One"@en ; dct:description "D"@en ;
    dcat:theme <THEME> ;
    dcat:distribution [ a dcat:Distribution ; dcat:accessURL <http://ex.org/f> ] .
"""
SH = "https://w3id.org/ld-aggregator/shapes/dcat-ap-3"


def validate(tmp_path: Path, text: str, *options: str, name: str = "doc.ttl") -> Result:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return CliRunner().invoke(main, ["validate", *options, str(path)])


TYPED_THEME = """<THEME> a <http://www.w3.org/2004/02/skos/core#Concept> ;
    <http://www.w3.org/2004/02/skos/core#prefLabel> "Economy and finance"@en .
"""


def doc(catalogue: str = CATALOGUE, theme: str = EU + "data-theme/ECON", typed: bool = True) -> str:
    """The document; ``typed``: its theme carries the class DCAT-AP 3.0.1 gives it (and the
    label a concept needs), as the official shapes demand of the document alone."""
    text = PREFIXES + catalogue + DATASET + (TYPED_THEME if typed else "")
    return text.replace("THEME", theme)


def violations(result: Result) -> list[list[str]]:
    return [line.split("\t") for line in result.output.splitlines() if line.startswith("violation")]


def test_a_conforming_document_exits_0(tmp_path: Path) -> None:
    result = validate(tmp_path, doc())
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "conforms"
    assert violations(result) == []


def test_a_catalogue_level_violation_is_caught(tmp_path: Path) -> None:
    no_publisher = CATALOGUE.replace(" dct:publisher <http://ex.org/org> ;", "")
    result = validate(tmp_path, doc(no_publisher))
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[-1] == "does not conform"
    [(_severity, focus, path, message, rule)] = violations(result)
    assert (focus, path) == ("http://ex.org/cat", "http://purl.org/dc/terms/publisher")
    assert "publisher" in message and rule.startswith(SH + "#Catalogue-publisher|")
    assert "# http://ex.org/cat" in result.output.splitlines()  # grouped by focus node
    # the harvest's view: the mapped records do not carry the catalogue's own obligations
    normalised = validate(tmp_path, doc(no_publisher), "--normalised")
    assert normalised.exit_code == 0, normalised.output


def test_the_input_is_validated_before_normalisation(tmp_path: Path) -> None:
    """A DCAT-AP 2 literal where 3.0.1 wants a resource: the mapper repairs it, the
    document as published does not conform."""
    text = doc().replace('dct:title "One"@en ;', 'dct:title "One"@en ; dcat:theme "Economy" ;')
    published = validate(tmp_path, text)
    assert published.exit_code == 1, published.output
    assert any(
        v[1:3] == ["http://ex.org/d1", "http://www.w3.org/ns/dcat#theme"]
        for v in violations(published)
    )
    normalised = validate(tmp_path, text, "--normalised")
    assert normalised.exit_code == 0, normalised.output
    assert "## record http://ex.org/d1" in normalised.output


def test_class_ranges_are_checked_as_the_official_shapes_do(tmp_path: Path) -> None:
    """By default the document alone must state its theme's class (range.ttl, no background
    knowledge); --vocabularies describes the bundled tables' terms beside it."""
    known = doc(typed=False)
    unknown = doc(theme="http://ex.org/our-own-theme", typed=False)
    for text in (known, unknown):
        result = validate(tmp_path, text)
        assert result.exit_code == 1, result.output
        [(_, focus, path, message, rule)] = violations(result)
        assert (focus, path) == ("http://ex.org/d1", "http://www.w3.org/ns/dcat#theme")
        assert "skos:Concept" in message and "dcat-ap-3-ranges#Dataset-theme" in rule
    assert validate(tmp_path, known, "--vocabularies").exit_code == 0  # a known EU term
    result = validate(tmp_path, unknown, "--vocabularies")
    assert result.exit_code == 1, result.output
    [(_, focus, path, message, rule)] = violations(result)
    assert (focus, path) == ("http://ex.org/d1", "http://www.w3.org/ns/dcat#theme")


def test_an_unreadable_document_does_not_conform(tmp_path: Path) -> None:
    result = validate(tmp_path, PREFIXES + "<http://ex.org/d> a dcat:", name="bad.ttl")
    assert result.exit_code == 1
    assert "Turtle syntax error" in result.output
    rdfxml = (
        '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
        ' xmlns:dct="http://purl.org/dc/terms/">'
        '<rdf:Description rdf:about="http://ex.org/a"><dct:title>\x00</dct:title>'
        "</rdf:Description></rdf:RDF>"
    )
    result = validate(tmp_path, rdfxml, name="nul.rdf")
    assert result.exit_code == 1
    assert "illegal XML character U+0000 at line 1" in result.output


def test_a_non_rdf_format_needs_normalised(tmp_path: Path) -> None:
    result = validate(tmp_path, "{}", "--from", "ckan", name="x.json")
    assert result.exit_code == 2
    assert "--normalised" in result.output
