"""Only a DOCTYPE in the prolog is a DOCTYPE: ``<!DOCTYPE html>`` quoted in a literal (in
CDATA, or escaped as text) is content, harvested and mapped exactly as published; a real
DOCTYPE is still read (internal string entities) or refused (anything more).

Through a real harvest (the RDF dump peer, an on-disk store) and through ``aggregator map``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyoxigraph import Literal, NamedNode

from aggregator.cli import main
from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.core.errors import UnsafeInputError
from aggregator.core.models import JobStatus
from aggregator.core.xml import parse_xml, scan_prolog
from aggregator.demo.peers.rdf_files import RdfFilesApp
from aggregator.demo.peers.server import PeerServer
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.mapping.dcat.input import check_rdf_xml
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

BASE = "http://127.0.0.1:8000/"
DESCRIPTION = NamedNode("http://purl.org/dc/terms/description")
HTML_PAGE = (
    '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" '
    '"http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">'
    "<html><body><p>The page as the portal wrote it</p></body></html>"
)
PLAIN = "<!DOCTYPE html><html><body>x</body></html>"
ESCAPED = "before <!DOCTYPE html> after"


WANTED = {
    "http://example.org/ds/public": HTML_PAGE,
    "http://example.org/ds/plain": PLAIN,
    "http://example.org/ds/escaped": ESCAPED,
}


def rdf_xml(prolog: str = "", wanted: dict[str, str] = WANTED) -> bytes:
    """RDF/XML of one dataset per ``wanted`` item: its description in CDATA, or escaped as
    text where it holds no markup but the DOCTYPE."""
    parts = []
    for iri, text in wanted.items():
        quoted = (
            text.replace("<", "&lt;").replace(">", "&gt;")
            if text == ESCAPED
            else f"<![CDATA[{text}]]>"
        )
        parts.append(
            f'  <dcat:Dataset rdf:about="{iri}">\n'
            f"    <dct:title>{iri.rsplit('/', 1)[-1]}</dct:title>\n"
            f"    <dct:description>{quoted}</dct:description>\n"
            "  </dcat:Dataset>\n"
        )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        + prolog
        + '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
        ' xmlns:dcat="http://www.w3.org/ns/dcat#" xmlns:dct="http://purl.org/dc/terms/">\n'
        + "".join(parts)
        + "</rdf:RDF>\n"
    ).encode()


@pytest.fixture
def app() -> RdfFilesApp:
    return RdfFilesApp()


@pytest.fixture
def server(app: RdfFilesApp) -> Iterator[PeerServer]:
    with PeerServer(app) as running:
        yield running


def harvest(tmp_path: Path, url: str) -> tuple[str, str, dict[str, str]]:
    """Harvest ``url`` into a fresh store: (job status, job message, description by dataset)."""
    source = SourceConfig(name="dump", type="rdf-dump", url=url, format="dcat")
    settings = Settings(
        config_path=None,
        store_path=tmp_path / "store",
        base_iri=BASE,
        http=HttpSettings(allow_private=True, retries=0, timeout=5.0),
        harvest=HarvestSettings(workers=0),
        sources={"dump": source},
    )
    with RecordStore(settings.store_path, BASE) as store:
        job = run_source(
            settings,
            store,
            "dump",
            RunOptions(),
            http=HttpClient(settings.http, sleep=lambda s: None),
        )
        found: dict[str, str] = {}
        for quad in store.graphs.store.quads_for_pattern(None, DESCRIPTION, None, None):  # type: ignore[attr-defined]
            if quad.subject.value in WANTED and isinstance(quad.object, Literal):
                found[quad.subject.value] = quad.object.value
    return job.status, job.message, found


def test_a_doctype_quoted_in_a_literal_is_harvested_exactly(
    app: RdfFilesApp, server: PeerServer, tmp_path: Path
) -> None:
    app.put("/quoted.rdf", rdf_xml(), "application/rdf+xml")
    status, message, found = harvest(tmp_path, server.url + "quoted.rdf")
    assert status == JobStatus.SUCCEEDED.value, message
    assert found == WANTED


def test_a_plain_quoted_doctype_is_not_cut_from_the_literal(
    app: RdfFilesApp, server: PeerServer, tmp_path: Path
) -> None:
    """Without an external identifier the quoted DOCTYPE used to be taken for the document's
    own and cut out of the description."""
    plain = {"http://example.org/ds/plain": PLAIN}
    app.put("/plain.rdf", rdf_xml(wanted=plain), "application/rdf+xml")
    status, message, found = harvest(tmp_path, server.url + "plain.rdf")
    assert status == JobStatus.SUCCEEDED.value, message
    assert found == plain


def test_with_a_real_doctype_of_entities_the_quoted_one_is_still_content(
    app: RdfFilesApp, server: PeerServer, tmp_path: Path
) -> None:
    doc = rdf_xml('<!DOCTYPE rdf:RDF [ <!ENTITY xsd "http://www.w3.org/2001/XMLSchema#"> ]>\n')
    app.put("/entities.rdf", doc, "application/rdf+xml")
    status, message, found = harvest(tmp_path, server.url + "entities.rdf")
    assert status == JobStatus.SUCCEEDED.value, message
    assert found == WANTED


def test_a_real_doctype_with_an_external_entity_is_still_refused(
    app: RdfFilesApp, server: PeerServer, tmp_path: Path
) -> None:
    doc = rdf_xml('<!DOCTYPE rdf:RDF [ <!ENTITY x SYSTEM "file:///etc/passwd"> ]>\n')
    app.put("/hostile.rdf", doc, "application/rdf+xml")
    status, message, found = harvest(tmp_path, server.url + "hostile.rdf")
    assert status == JobStatus.FAILED.value
    assert "external entity" in message and found == {}
    with pytest.raises(UnsafeInputError, match="external entity"):
        check_rdf_xml(doc)


def test_aggregator_map_keeps_the_literals(tmp_path: Path) -> None:
    path = tmp_path / "quoted.rdf"
    path.write_bytes(rdf_xml())
    result = CliRunner().invoke(main, ["map", "--from", "dcat", "--to", "ntriples", str(path)])
    assert result.exit_code == 0, result.output
    for text in WANTED.values():
        assert str(Literal(text)) in result.output


@pytest.mark.parametrize(
    ("prolog", "refused"),
    [
        ("<!ENTITY x 'y'>\n", "before the root element"),  # a declaration outside a DOCTYPE
        ("<!doctype rdf:RDF [ <!ENTITY x SYSTEM 'file:///etc/passwd'> ]>\n", "external entity"),
    ],
)
def test_other_declarations_in_the_prolog_are_refused(prolog: str, refused: str) -> None:
    with pytest.raises(UnsafeInputError, match=refused):
        check_rdf_xml(rdf_xml(prolog))


def test_the_one_prolog_scan_reads_no_further_than_the_root() -> None:
    doc = rdf_xml()
    assert scan_prolog(doc).kind == "root"
    assert doc[scan_prolog(doc).offset :].startswith(b"<rdf:RDF")
    parse_xml(doc)  # the protocol parser agrees: no DOCTYPE
    with_doctype = rdf_xml("<!DOCTYPE rdf:RDF>\n")
    found = scan_prolog(with_doctype)
    assert found.kind == "doctype" and with_doctype[found.offset :].startswith(b"<!DOCTYPE")
