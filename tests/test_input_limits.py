"""Hostile payloads (50 MB records, 100,000-digit integers, lone surrogates, over-long texts)
are refused one record at a time, with a finding that names the limit, in bounded memory.

Each harvest runs ``aggregator harvest`` in a child process against a local peer in this
process, into an on-disk store; the child's peak RSS comes from ``os.wait4``. Each hostile
file also goes through ``aggregator map`` in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aggregator.core.errors import ParseError
from aggregator.core.input_limits import InputLimitError, InputLimits, dump_record, load_page
from aggregator.demo.peers.ckan import CkanPeer, MemoryCatalogue
from aggregator.demo.peers.ckan_data import generate_package
from aggregator.demo.peers.mdr import MdrService
from aggregator.demo.peers.mdr_pages import load_sample_pages
from aggregator.demo.peers.rdf_files import RdfFilesApp
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.waf import WafApp
from aggregator.jobs.deadletter import rejections
from aggregator.store.records import ReadOnlyStore

BASE = "http://localhost:8000/"
MB = 1024 * 1024
#: the peak RSS allowed to a child harvesting or mapping one hostile record: the record itself
#: is fetched (50 MB), but nothing is allowed to grow with what it holds
MAX_RSS_MB = 450
BIG_INTEGER = "1" * 100_000
ISO = Path(__file__).parents[1] / "aggregator" / "demo" / "peers" / "data" / "iso"


@dataclass
class Run:
    code: int
    output: str
    rss_mb: float


# ``ru_maxrss`` survives exec: a child forked (or vforked) by a large process (a pytest-xdist
# worker that ran other tests) reports that process's peak. A fresh, small launcher starts the
# command and reports the command's own peak.
LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(proc.pid, 0)
sys.stdout.write(f"\\nmaxrss-kb {usage.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_child(args: list[str], env: dict[str, str] | None = None) -> Run:
    """``aggregator ARGS`` in a child process: exit code, output and peak RSS."""
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCHER, sys.executable, "-m", "aggregator.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        check=False,
    )
    output, _, peak = proc.stdout.decode("utf-8", "replace").rpartition("\nmaxrss-kb ")
    return Run(proc.returncode, output, int(peak) / 1024)


def write_config(tmp: Path, sources: str) -> Path:
    path = tmp / "aggregator.toml"
    path.write_text(
        f'[store]\npath = "data"\nbase_iri = "{BASE}"\n'
        "[http]\nallow_private = true\nretries = 0\ntimeout = 30\n"
        "[harvest]\nworkers = 0\n" + sources,
        encoding="utf-8",
    )
    return path


def harvest(tmp: Path, sources: str, name: str, env: dict[str, str] | None = None) -> Run:
    config = write_config(tmp, sources)
    run = run_child(["-c", str(config), "harvest", name], env)
    assert "Traceback" not in run.output, run.output[-3000:]
    assert run.rss_mb < MAX_RSS_MB, f"peak RSS {run.rss_mb:.0f} MB\n{run.output[-2000:]}"
    return run


def stored(tmp: Path, source: str) -> tuple[dict[str, int], dict[str, str]]:
    """(record counts by status, the cause of each open rejection by local id)."""
    with ReadOnlyStore(tmp / "data", BASE) as store:
        counts = store.db.counts_by_status(source)
        causes = {r.local_id: r.cause() for r in rejections(store, source=source)}
    return counts, causes


def map_file(path: Path, fmt: str) -> Run:
    run = run_child(["map", "--from", fmt, str(path)])
    assert "Traceback" not in run.output, run.output[-3000:]
    assert run.rss_mb < MAX_RSS_MB, f"peak RSS {run.rss_mb:.0f} MB\n{run.output[-2000:]}"
    return run


@contextmanager
def long_integers() -> Iterator[None]:
    """Let this process (the peer) write a 100,000-digit integer, as a hostile portal does."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(before)


# -- CKAN -----------------------------------------------------------------------------------


def hostile_packages() -> dict[str, dict[str, object]]:
    big = generate_package(1) | {"id": "big-notes", "notes": "x" * (50 * MB)}
    number = generate_package(2) | {"id": "long-integer"}
    number["num_resources"] = 10**99_999  # 100,000 digits
    surrogate = generate_package(3) | {"id": "lone-surrogate", "notes": "broken \ud800 text"}
    return {p["id"]: p for p in (big, number, surrogate)}  # type: ignore[misc]


def test_ckan_hostile_packages_are_rejected_alone(tmp_path: Path) -> None:
    good = [generate_package(i) for i in range(10, 14)]
    hostile = hostile_packages()
    with long_integers(), PeerServer(CkanPeer(MemoryCatalogue([*good, *hostile.values()]))) as s:
        sources = f'[sources.portal]\ntype = "ckan"\nurl = "{s.url}"\nformat = "ckan"\n'
        run = harvest(tmp_path, sources, "portal")
    counts, causes = stored(tmp_path, "portal")
    assert counts == {"active": len(good), "rejected": len(hostile)}, run.output
    assert set(causes) == set(hostile), run.output
    assert "max_record_bytes" in causes["big-notes"]
    assert causes["big-notes"].startswith("inputLimit: ")
    assert "100,000 digits" in causes["long-integer"]
    assert "lone UTF-16 surrogate" in causes["lone-surrogate"]
    assert "\\ud800" in causes["lone-surrogate"]


@pytest.mark.parametrize("which", ["big-notes", "long-integer", "lone-surrogate"])
def test_ckan_hostile_package_files_are_refused_by_map(tmp_path: Path, which: str) -> None:
    path = tmp_path / f"{which}.json"
    with long_integers():
        path.write_bytes(dump_record(hostile_packages()[which]))
    run = map_file(path, "ckan")
    assert run.code == 1
    assert {"big-notes": "max_record_bytes", "long-integer": "100,000 digits"}.get(
        which, "lone UTF-16 surrogate"
    ) in run.output


# -- MDR ------------------------------------------------------------------------------------


def bloated_mdr_page() -> bytes:
    """A plausible page whose keywords were pasted over and over, to 50 MB (6 elements of
    9 MB each, each under libxml2's text node limit)."""
    base = (Path(__file__).parent / "data" / "mdr" / "hospitals.xml").read_bytes()
    keywords = b"<subjectKeywords>hospitals; health centres; emergency</subjectKeywords>"
    bloated = b"\n".join(
        b"<subjectKeywords>" + b"k0;" * (9 * MB // 3) + b"</subjectKeywords>" for _ in range(6)
    )
    return base.replace(keywords, bloated)


def test_mdr_page_of_50_mb_is_rejected_alone(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    pages = load_sample_pages()
    for page in pages:
        page.published = now - timedelta(hours=2)
    bloated = pages[0]  # its keywords pasted over and over: 6 elements of 9 MB
    bloated.metadata["subjectKeywords"] = ["k0;" * (9 * MB // 3)] * 6
    service = MdrService({"apmdrsrv": "Mdr-s3cret-Pa55"}, pages)
    with PeerServer(service) as server:
        since = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        sources = (
            f'[sources.portal]\ntype = "mdr"\nurl = "{server.url}mdr/services/MdrService"\n'
            f'format = "mdr"\nsecrets = {{ password = "MDR_PASSWORD" }}\n'
            f'options = {{ username = "apmdrsrv", since = "{since}", chunk_minutes = 1440 }}\n'
        )
        run = harvest(tmp_path, sources, "portal", {"MDR_PASSWORD": "Mdr-s3cret-Pa55"})
    counts, causes = stored(tmp_path, "portal")
    assert counts == {"active": len(pages) - 1, "rejected": 1}, run.output
    assert list(causes) == [bloated.identifier], run.output
    assert "max_record_bytes" in causes[bloated.identifier]


def test_mdr_page_file_of_50_mb_is_refused_by_map(tmp_path: Path) -> None:
    path = tmp_path / "page.xml"
    path.write_bytes(bloated_mdr_page())
    run = map_file(path, "mdr")
    assert run.code == 1 and "max_record_bytes" in run.output, run.output


def test_mdr_page_under_the_size_limit_cannot_blow_up_the_mapper(tmp_path: Path) -> None:
    """The cause, not only the symptom: a page of repeated keywords is a few triples (a graph
    is a set), and a page of many distinct ones stops at max_triples as it is mapped."""
    base = (Path(__file__).parent / "data" / "mdr" / "hospitals.xml").read_bytes()
    keywords = b"<subjectKeywords>hospitals; health centres; emergency</subjectKeywords>"
    repeated = b"\n".join(
        b"<subjectKeywords>" + b"k0;" * 300_000 + b"</subjectKeywords>" for _ in range(12)
    )
    path = tmp_path / "repeated.xml"
    path.write_bytes(base.replace(keywords, repeated))
    run = map_file(path, "mdr")
    assert run.code == 0, run.output
    assert run.output.count('"k0"') == 1
    distinct = b"\n".join(
        b"<subjectKeywords>"
        + b";".join(b"kw%d" % i for i in range(start, start + 100_000))
        + b"</subjectKeywords>"
        for start in range(0, 1_500_000, 100_000)
    )
    path = tmp_path / "distinct.xml"
    path.write_bytes(base.replace(keywords, distinct))
    assert len(path.read_bytes()) < InputLimits().max_record_bytes
    run = map_file(path, "mdr")
    assert run.code == 1 and "max_triples" in run.output, run.output


# -- ISO 19139 through a WAF ----------------------------------------------------------------


def iso_record(identifier: str, big_texts: int = 0, long_title: int = 0) -> bytes:
    """The bundled GEMINI dataset record under ``identifier``; ``big_texts`` more keywords of
    9 MB each (each under libxml2's 10 MB text node limit); a title ``long_title`` longer."""
    data = (ISO / "gemini-dataset-flood-risk.xml").read_bytes()
    data = data.replace(b"4f0c6f3e-5a7b-4d0e-9b1a-2c3d4e5f6a01", identifier.encode(), 1)
    if big_texts:
        start = data.index(b"<gmd:keyword>")
        keyword = b"<gmd:keyword><gco:CharacterString>%s</gco:CharacterString></gmd:keyword>"
        data = data[:start] + (keyword % (b"flood " * (9 * MB // 6))) * big_texts + data[start:]
        assert len(data) > 50 * MB
    if long_title:
        marker = b"<gco:CharacterString>Areas of Wales"
        assert marker in data
        data = data.replace(marker, marker + b"y" * long_title, 1)
    return data


def many_elements(identifier: str) -> bytes:
    """The record with 50 MB more of small keyword elements (parsed, many times its size)."""
    data = iso_record(identifier)
    start = data.index(b"<gmd:keyword>")
    keyword = b"<gmd:keyword><gco:CharacterString>k</gco:CharacterString></gmd:keyword>"
    return data[:start] + keyword * (50 * MB // len(keyword)) + data[start:]


def test_iso_records_over_the_limits_are_rejected_alone(tmp_path: Path) -> None:
    app = WafApp()
    when = datetime(2026, 3, 1, tzinfo=UTC)
    app.put("good.xml", iso_record("good"), when)
    app.put("big.xml", iso_record("big", big_texts=6), when)
    app.put("many.xml", many_elements("many"), when)
    app.put("long-text.xml", iso_record("long-text", long_title=2_000_000), when)
    with PeerServer(app) as server:
        sources = f'[sources.waf]\ntype = "waf"\nurl = "{server.url}waf/"\nformat = "iso19139"\n'
        run = harvest(tmp_path, sources, "waf")
    counts, causes = stored(tmp_path, "waf")
    assert counts == {"active": 1, "rejected": 3}, run.output
    # files over the size limit are not parsed for their identifier: kept under their URL
    by_file = {lid.rsplit("/", 1)[-1]: cause for lid, cause in causes.items()}
    assert set(by_file) == {"big.xml", "many.xml", "long-text"}, causes
    assert "max_record_bytes" in by_file["big.xml"] and "max_record_bytes" in by_file["many.xml"]
    causes["long-text"] = by_file["long-text"]
    assert "max_text_length" in causes["long-text"] and "2,000,1" in causes["long-text"]


def test_iso_record_file_over_the_text_limit_is_refused_by_map(tmp_path: Path) -> None:
    path = tmp_path / "long.xml"
    path.write_bytes(iso_record("long", long_title=2_000_000))
    run = map_file(path, "iso19139")
    assert run.code == 1 and "max_text_length" in run.output, run.output


# -- RDF: JSON-LD and Turtle ----------------------------------------------------------------

JSONLD = (
    '{"@context": {"dcat": "http://www.w3.org/ns/dcat#", "dct": "http://purl.org/dc/terms/"},'
    ' "@id": "http://example.org/ds/1", "@type": "dcat:Dataset", "dct:title": "T",'
    ' "dct:description": %s}'
)
TURTLE = (
    "@prefix dcat: <http://www.w3.org/ns/dcat#> . @prefix dct: <http://purl.org/dc/terms/> .\n"
    '<http://example.org/ds/1> a dcat:Dataset ; dct:title "T" ; dct:description %s .\n'
)


def rdf_documents() -> dict[str, tuple[bytes, str, str]]:
    """name -> (document, media type, what the refusal names)."""
    return {
        "integer.jsonld": (
            (JSONLD % BIG_INTEGER).encode(),
            "application/ld+json",
            "100,000 digits",
        ),
        "surrogate.jsonld": (
            (JSONLD % '"a \\ud800 b"').encode(),
            "application/ld+json",
            "lone UTF-16 surrogate",
        ),
        "long.ttl": (
            (TURTLE % ('"' + "z" * 2_000_000 + '"')).encode(),
            "text/turtle",
            "max_text_length",
        ),
        "huge.ttl": ((TURTLE % ('"' + "z" * 50 * MB + '"')).encode(), "text/turtle", "longer"),
        "deep.jsonld": (
            (JSONLD % ('{"dct:title": ' * 500 + '"x"' + "}" * 500)).encode(),
            "application/ld+json",
            "max_json_depth",
        ),
    }


@pytest.mark.parametrize("name", list(rdf_documents()))
def test_rdf_documents_over_the_limits_are_refused_alone(tmp_path: Path, name: str) -> None:
    """Each dump is one record: the hostile one is refused with the limit it passed (by the
    harvester, before the mapper, when not even the page's links can be read), and the
    source beside it is harvested."""
    body, media_type, named = rdf_documents()[name]
    app = RdfFilesApp()
    app.put(f"/{name}", body, media_type)
    app.put("/good.ttl", (TURTLE % '"fine"').encode(), "text/turtle")
    with PeerServer(app) as server:
        sources = "".join(
            f'[sources.{key}]\ntype = "rdf-dump"\nurl = "{server.url}{file}"\nformat = "dcat"\n'
            for key, file in (("bad", name), ("good", "good.ttl"))
        )
        run = harvest(tmp_path, sources, "--all")
    assert stored(tmp_path, "good")[0] == {"active": 1}, run.output
    counts, causes = stored(tmp_path, "bad")
    assert "active" not in counts, run.output
    if causes:  # refused by the mapper: a rejected record
        assert len(causes) == 1 and named in next(iter(causes.values())), causes
    else:  # refused by the harvester, whose listing cannot go on: the job's error
        assert named in run.output and "bad: failed" in run.output, run.output


@pytest.mark.parametrize("name", list(rdf_documents()))
def test_rdf_files_over_the_limits_are_refused_by_map(tmp_path: Path, name: str) -> None:
    body, _, named = rdf_documents()[name]
    path = tmp_path / name
    path.write_bytes(body)
    run = map_file(path, "dcat")
    assert run.code == 1 and named in run.output, run.output


# -- the module itself ----------------------------------------------------------------------


def test_pages_keep_long_integers_and_surrogates_for_their_record() -> None:
    page = (
        b'{"results": [{"id": "a", "n": 1}, {"id": "b", "n": -'
        + BIG_INTEGER.encode()
        + b'}, {"id": "c", "t": "x\\ud800y"}, {"id": "d", "t": "\\u00e9\\ud83d\\ude00"}]}'
    )
    records = [dump_record(p) for p in load_page(page)["results"]]
    assert json.loads(records[0]) == {"id": "a", "n": 1}
    assert records[1] == b'{"id": "b", "n": -' + BIG_INTEGER.encode() + b"}"
    assert records[2] == b'{"id": "c", "t": "x\\ud800y"}'
    assert records[3].decode("utf-8") == '{"id": "d", "t": "é😀"}'  # a valid pair is a character
    limits = InputLimits()
    with pytest.raises(InputLimitError, match="100,000 digits"):
        limits.load_json(records[1])
    with pytest.raises(InputLimitError, match=r"at \$\.t .*\\ud800 at character 2"):
        limits.load_json(records[2])
    assert limits.load_json(records[3]) == {"id": "d", "t": "é😀"}


def test_json_depth_and_text_length_are_checked_without_recursion() -> None:
    limits = InputLimits(max_json_depth=5, max_text_length=10)
    assert InputLimits(max_json_depth=5).load_json(b'{"a": [[["[[[[[[ in a string"]]]}')
    with pytest.raises(InputLimitError, match="6 deep"):
        limits.load_json(b"[[[[[[1]]]]]]")
    with pytest.raises(InputLimitError, match="max_json_depth"):
        InputLimits().load_json(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(InputLimitError, match=r"at \$\.a\[1\] is 11 characters"):
        limits.load_json(b'{"a": ["short", "eleven char"]}')
    with pytest.raises(ParseError, match="malformed JSON"):
        limits.load_json(b'{"a": ')
