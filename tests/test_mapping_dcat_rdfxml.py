"""RDF/XML as real catalogues publish it: internal entities, broken nodes, illegal characters.

Unit tests of :mod:`aggregator.mapping.rdf_xml` and of the dcat mapper's RDF/XML input, and a
harvest of a dump served by the fixture RDF file server through the whole pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyoxigraph import Quad, RdfFormat, parse

from aggregator.cli import main
from aggregator.config import load_settings
from aggregator.core.errors import ParseError, UnsafeInputError
from aggregator.core.models import RawRecord
from aggregator.demo.peers.rdf_files import RdfFilesApp
from aggregator.demo.peers.server import PeerServer
from aggregator.mapping.base import MappingContext
from aggregator.mapping.dcat import DcatMapper
from aggregator.mapping.rdf_xml import read_rdf_xml, split_root
from aggregator.store.records import RecordStore

CTX = MappingContext("https://agg.example.org/", "dump")
HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<!DOCTYPE rdf:RDF [\n"
    '  <!ENTITY xsd "http://www.w3.org/2001/XMLSchema#">\n'
    '  <!ENTITY base "https://data.example.org/">\n'
    "]>\n"
    '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"\n'
    '         xmlns:dcat="http://www.w3.org/ns/dcat#" xmlns:dct="http://purl.org/dc/terms/">\n'
)


def dataset(i: int, title: str | None = None) -> str:
    return (
        f'<dcat:Dataset rdf:about="&base;dataset/{i}">\n'
        f"  <dct:title>{title or f'Dataset {i}'}</dct:title>\n"
        f"  <dct:description>Described {i}.</dct:description>\n"
        f'  <dct:issued rdf:datatype="&xsd;date">2020-01-{1 + i % 28:02d}</dct:issued>\n'
        "  <dcat:distribution><dcat:Distribution>\n"
        f'    <dcat:accessURL rdf:resource="&base;files/{i}"/>\n'
        "  </dcat:Distribution></dcat:distribution>\n"
        "</dcat:Dataset>\n"
    )


def dump(count: int, broken: dict[int, str]) -> bytes:
    """A dump of ``count`` datasets; ``broken``: index -> the title that breaks its node."""
    body = "".join(dataset(i, broken.get(i)) for i in range(count))
    return (HEAD + body + "</rdf:RDF>\n").encode()


def line_of(data: bytes, needle: bytes) -> int:
    return data[: data.index(needle)].count(b"\n") + 1


def column_of(data: bytes, needle: bytes) -> int:
    at = data.index(needle)
    return at - data.rfind(b"\n", 0, at)


def map_raw(payload: bytes, collection: bool = True) -> list[object]:
    raw = RawRecord(
        source="dump",
        local_id="page",
        format="dcat",
        payload=payload,
        media_type="application/rdf+xml",
        url="https://data.example.org/dump.rdf",
        is_collection=collection,
    )
    return list(DcatMapper().map(raw, CTX))


def _pyoxigraph(data: bytes) -> list[Quad]:
    return list(parse(data, RdfFormat.RDF_XML))


# -- the node splitter -----------------------------------------------------------------------
def test_split_root_finds_each_top_level_element_whatever_breaks_inside() -> None:
    data = (
        b'<?xml version="1.0"?><!-- c --><r:RDF xmlns:r="urn:r" a="x>y">'
        b'<a q="1 > 0">t &amp; <![CDATA[ </a> ]]><!-- </a> --></a>'
        b"<b/>  <c>x \x00 & y</c><d><e>unclosed</d></r:RDF>"
    )
    head_end, tail_start, children = split_root(data)
    assert data[:head_end].endswith(b'a="x>y">')
    assert data[tail_start:] == b"</r:RDF>"
    assert [data[s:e][:3] for s, e in children] == [b"<a ", b"<b/", b"<c>", b"<d>"]


def test_a_document_that_parses_whole_is_not_split() -> None:
    data = dump(3, {})
    from aggregator.mapping.dcat.input import check_rdf_xml

    read = read_rdf_xml(check_rdf_xml(data), _pyoxigraph)
    assert read.dropped == () and len(read.quads) == 3 * 7


# -- the mapper ----------------------------------------------------------------------------
def test_internal_entities_are_read() -> None:
    datasets = map_raw(dump(2, {}))
    assert len(datasets) == 2
    nt = datasets[0].ntriples  # type: ignore[attr-defined]
    assert b'"2020-01-01"^^<http://www.w3.org/2001/XMLSchema#date>' in nt
    assert b"<https://data.example.org/files/0>" in nt


def test_a_broken_node_loses_only_itself_and_is_reported_with_its_line() -> None:
    data = dump(30, {7: "NUL \x00 here", 19: "Fish & chips"})
    datasets = map_raw(data)
    iris = {d.dataset_iri for d in datasets}  # type: ignore[attr-defined]
    assert len(iris) == 28
    assert "https://data.example.org/dataset/7" not in iris
    assert "https://data.example.org/dataset/19" not in iris
    finding = next(
        f
        for d in datasets
        for f in d.findings  # type: ignore[attr-defined]
        if f.rule == "rdf-xml-node-unreadable"
    )
    nul_line = line_of(data, b"NUL \x00")
    amp_node = line_of(data, b'<dcat:Dataset rdf:about="&base;dataset/19"')
    column = column_of(data, b"\x00")
    assert f"illegal XML character U+0000 at line {nul_line}, column {column}" in finding.message
    assert f"line {amp_node}, column 1:" in finding.message
    assert finding.message.startswith("2 top-level RDF/XML element(s)")


def test_rdf_node_ids_still_join_across_nodes_after_a_split() -> None:
    data = (
        HEAD
        + '<dcat:Dataset rdf:about="&base;d"><dct:title>T</dct:title>'
        + '<dcat:distribution rdf:nodeID="x"/></dcat:Dataset>\n'
        + '<dcat:Distribution rdf:nodeID="x"><dcat:accessURL rdf:resource="&base;f"/>'
        + "</dcat:Distribution>\n"
        + '<dcat:Dataset rdf:about="&base;broken"><dct:title>\x01</dct:title></dcat:Dataset>\n'
        + "</rdf:RDF>"
    ).encode()
    (mapped,) = map_raw(data)
    assert b"<https://data.example.org/f>" in mapped.ntriples  # type: ignore[attr-defined]


def test_an_illegal_character_in_a_single_record_is_a_clear_parse_error() -> None:
    data = dump(1, {0: "bell \x07"})
    with pytest.raises(ParseError) as caught:
        map_raw(data, collection=False)
    line = line_of(data, b"bell")
    column = column_of(data, b"\x07")
    assert f"illegal XML character U+0007 at line {line}, column {column}" in caught.value.message


def test_an_illegal_character_in_the_root_tag_refuses_the_document() -> None:
    data = dump(2, {}).replace(b'xmlns:dcat="', b'\x0bxmlns:dcat="')
    with pytest.raises(ParseError, match="U\\+000B at line 7"):
        map_raw(data)


def test_an_entity_bomb_is_still_refused() -> None:
    levels = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
    data = dump(1, {0: "&l9;"}).replace(
        b"<!ENTITY xsd", f'<!ENTITY l0 "lol">{levels}<!ENTITY xsd'.encode()
    )
    with pytest.raises(UnsafeInputError, match="expansion bomb"):
        map_raw(data)


def test_external_entities_stay_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("TOP-SECRET")
    data = dump(1, {0: "&leak;"}).replace(
        b"<!ENTITY xsd", f'<!ENTITY leak SYSTEM "file://{secret}"><!ENTITY xsd'.encode()
    )
    with pytest.raises(UnsafeInputError, match="external entity 'leak'"):
        map_raw(data)


# -- through the pipeline ------------------------------------------------------------------
@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, RdfFilesApp]]:
    files = RdfFilesApp()
    with PeerServer(files) as server:
        config = tmp_path / "aggregator.toml"
        config.write_text(
            '[store]\npath = "data"\n[http]\nallow_private = true\nretries = 0\n'
            "[harvest]\nworkers = 0\n"
            f'[sources.dump]\ntype = "rdf-dump"\nurl = "{server.url}dump.rdf"\n',
            encoding="utf-8",
        )
        yield config, files


def test_harvest_keeps_every_readable_dataset_and_the_job_names_the_broken_node(
    served: tuple[Path, RdfFilesApp],
) -> None:
    config, files = served
    count = 120
    data = dump(count, {57: "broken \x00 title"})
    files.put("/dump.rdf", data, "application/rdf+xml")
    runner = CliRunner()
    result = runner.invoke(main, ["-c", str(config), "harvest", "dump"])
    assert result.exit_code == 4, result.output  # partial: nothing may be withdrawn
    line = line_of(data, b"broken \x00")
    node_line = line_of(data, b'<dcat:Dataset rdf:about="&base;dataset/57"')
    shown = json.loads(
        runner.invoke(main, ["-c", str(config), "job", "show", "1", "--json"]).output
    )
    assert shown["status"] == "partial"
    assert f"read, the first at line {node_line}, column 1" in shown["message"]
    assert any(
        f"illegal XML character U+0000 at line {line}" in note for note in shown["listing"]["notes"]
    )
    settings = load_settings(config)
    with RecordStore(settings.store_path, settings.base_iri) as store:
        assert store.db.count_records("dump", "active") == count - 1
