"""The fast paths of the steps after every mapper give what their full paths give.

* :func:`aggregator.mapping.base.merge_lines` (how the range step and the categorisation put
  their added statements into a record's canonical lines) equals sorting the set of all lines,
  whether or not the text was sorted and unique;
* the range step's text pre-check (:meth:`aggregator.mapping.ranges._Lines.settled`) never
  settles a statement that the full rules would change: on the demo records of every format,
  and on the same records with some of their types and labels taken away, the step gives the
  same bytes and findings with the pre-check as with every range statement parsed and run
  through the rules; the lines it split to read the record, handed to ``merge_lines``, give
  what splitting the text again gives;
* the categorisation's reading of the statements it needs (one pattern over the text) gives
  what parsing the whole record gives, on the same records and on text that quotes a
  predicate inside a literal.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from aggregator.config.categorisation import CategorisationConfig
from aggregator.core.models import MappedDataset, RawRecord, content_hash
from aggregator.demo.peers.gemini_samples import generate_gemini_record
from aggregator.demo.peers.sample_data import generate_dataset
from aggregator.mapping import base, categorisation, ranges
from aggregator.mapping.base import MappingContext, merge_lines
from aggregator.mapping.finish import finish_mapped
from aggregator.mapping.publisher import with_source_publisher
from aggregator.plugin import mappers

DATA = Path(__file__).resolve().parents[1] / "aggregator" / "demo" / "peers" / "data"
CTX = MappingContext(base_iri="https://aggregator.example.org/", source="demo")
TYPE = b"<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"


def _set_sorted(data: bytes, removed: set[bytes], added: list[bytes]) -> bytes:
    lines = set(data.splitlines()) - removed
    lines.update(added)
    return b"\n".join(sorted(lines)) + b"\n"


@pytest.mark.parametrize(
    ("data", "removed", "added"),
    [
        (b"<a> <p> <b> .\n<c> <p> <d> .\n", set(), [b"<b> <t> <C> ."]),
        (b"<a> <p> <b> .\n<c> <p> <d> .\n", set(), [b"<a> <p> <b> .", b"<0> <p> <z> ."]),
        (b"<a> <p> <b> .\n<c> <p> <d> .\n", {b"<a> <p> <b> ."}, [b"<e> <p> <f> ."]),
        (b"<c> <p> <d> .\n<a> <p> <b> .\n", set(), [b"<b> <t> <C> ."]),  # not sorted
        (b"<a> <p> <b> .\n<a> <p> <b> .\n", set(), [b"<a> <p> <b> ."]),  # a line twice
        (b"", set(), [b"<b> <t> <C> .", b"<a> <t> <C> ."]),
        (b"<a> <p> <b> .\n", set(), [b"<z> <t> <C> .", b"<z> <t> <C> ."]),
    ],
)
def test_merge_lines_equals_sorting_the_set(
    data: bytes, removed: set[bytes], added: list[bytes]
) -> None:
    assert merge_lines(data, removed, added) == _set_sorted(data, removed, added)
    lines = data.splitlines()  # the range step hands over the lines it has split already
    assert merge_lines(data, removed, added, lines) == _set_sorted(data, removed, added)
    assert lines == data.splitlines()  # copied, not changed


def _demo_datasets() -> dict[str, list[MappedDataset]]:
    files = {
        "iso19139": [*(DATA / "iso").glob("*.xml"), *(DATA / "gemini").glob("*.xml")],
        "dcat": sorted((DATA / "oai").glob("*.rdf")) + sorted((DATA / "dump").glob("*")),
        "ckan": sorted((DATA / "ckan").glob("*.json")),
        "meta-share": sorted((DATA / "meta-share").glob("*.xml")),
    }
    out: dict[str, list[MappedDataset]] = {fmt: [] for fmt in files}
    for fmt, paths in files.items():
        mapper = mappers.get(fmt)()
        for path in paths:
            media = "application/json" if path.suffix == ".json" else "application/rdf+xml"
            if path.suffix in (".ttl", ".nt"):
                media = "text/turtle" if path.suffix == ".ttl" else "application/n-triples"
            if fmt in ("iso19139", "meta-share"):
                media = "application/xml"
            raw = RawRecord("demo", path.name, fmt, path.read_bytes(), media, is_collection=True)
            out[fmt].extend(mapper.map(raw, CTX))
    iso = mappers.get("iso19139")()
    dcat = mappers.get("dcat")()
    for i in range(5):  # as the harvest benchmarks generate them
        raw = RawRecord("g", str(i), "iso19139", generate_gemini_record(i), "application/xml")
        out["iso19139"].extend(iso.map(raw, CTX))
        raw = RawRecord("d", str(i), "dcat", generate_dataset(i), "application/rdf+xml")
        out["dcat"].extend(dcat.map(raw, CTX))
    return out


def _stripped(ds: MappedDataset, rng: random.Random, share: float) -> MappedDataset:
    """``ds`` with about ``share`` of its type and label statements taken away."""

    def strip(data: bytes) -> bytes:
        lines = data.splitlines()
        kept = [
            line
            for line in lines
            if not ((TYPE in line or b"abel> " in line) and rng.random() < share)
        ]
        return b"\n".join(kept) + b"\n" if kept else b""

    ntriples = strip(ds.ntriples)
    return replace(
        ds,
        ntriples=ntriples,
        catalog_ntriples=strip(ds.catalog_ntriples),
        content_hash=content_hash(ntriples),
    )


def test_range_pre_check_settles_only_what_the_rules_leave_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(30)
    by_format = _demo_datasets()
    assert all(by_format.values()), {fmt: len(ds) for fmt, ds in by_format.items()}
    datasets = [ds for found in by_format.values() for ds in found]
    cases = [
        *datasets,
        *(_stripped(ds, rng, share) for ds in datasets for share in (0.3, 0.7, 1.0)),
    ]
    fast = [ranges.complete_ranges(ds) for ds in cases]
    untouched = sum(out is ds for out, ds in zip(fast, cases, strict=True))
    changed = len(cases) - untouched
    assert untouched and changed > len(cases) // 2  # both paths of the step are exercised
    monkeypatch.setattr(ranges._Lines, "settled", lambda *args: False)
    full = [ranges.complete_ranges(ds) for ds in cases]
    for ds, quick, slow in zip(cases, fast, full, strict=True):
        assert quick == slow, ds.dataset_iri
        assert (quick is ds) == (slow is ds), ds.dataset_iri


def _cases() -> list[MappedDataset]:
    rng = random.Random(31)
    datasets = [ds for found in _demo_datasets().values() for ds in found]
    return [*datasets, *(_stripped(ds, rng, share) for ds in datasets for share in (0.3, 1.0))]


def test_range_step_merges_into_its_split_lines_as_into_the_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cases = _cases()
    fast = [ranges.complete_ranges(ds) for ds in cases]
    assert sum(out is not ds for out, ds in zip(fast, cases, strict=True)) > len(cases) // 2

    def split_again(
        data: bytes, removed: set[bytes], added: list[bytes], lines: object = None
    ) -> bytes:
        return base.merge_lines(data, removed, added)

    monkeypatch.setattr(ranges, "merge_lines", split_again)
    for ds, quick in zip(cases, fast, strict=True):
        assert quick == ranges.complete_ranges(ds), ds.dataset_iri


def test_range_step_reads_a_raw_carriage_return_as_before() -> None:
    """A text with a raw CR (not canonical N-Triples) is read line by line at LF, as before
    the lines were kept, and merged by splitting the text again."""
    data = (
        b"<https://x.example/d> <http://purl.org/dc/terms/license> <https://x.example/l> .\n"
        b'<https://x.example/d> <http://purl.org/dc/terms/title> "a\rb" .\n'
    )
    table = ranges.load_ranges()
    read = ranges._Read(data, table)
    assert read.lines is None and len(read.links) == 1
    out, notes = ranges._complete(data, table)
    assert out is not None and "range-class-added" in notes
    assert out == _set_sorted(
        data,
        set(),
        [b"<https://x.example/l> " + TYPE + b" <http://purl.org/dc/terms/LicenseDocument> ."],
    )


QUOTING = (
    b'<https://x.example/d> <http://purl.org/dc/terms/description> "see '
    b'<http://www.w3.org/ns/dcat#keyword> and <http://purl.org/dc/terms/subject> "@en .\n'
)


def _with_keyword(ds: MappedDataset, keyword: str) -> bytes:
    line = f'<{ds.dataset_iri}> <http://www.w3.org/ns/dcat#keyword> "{keyword}"@en .'
    return merge_lines(ds.ntriples, set(), [line.encode()])


@pytest.mark.parametrize("keywords", [True, False])
def test_categorisation_reads_what_parsing_the_whole_record_reads(
    monkeypatch: pytest.MonkeyPatch, keywords: bool
) -> None:
    config = CategorisationConfig(keywords=keywords)
    cases = _cases()
    cases += [replace(ds, ntriples=QUOTING + ds.ntriples) for ds in cases[:20]]
    cases += [replace(ds, ntriples=_with_keyword(ds, "farming")) for ds in cases[:20]]
    fast = [categorisation.categorise(ds, config) for ds in cases]
    assert any(out is not ds for out, ds in zip(fast, cases, strict=True))
    monkeypatch.setattr(categorisation, "_statements_read", lambda data: data)
    for ds, quick in zip(cases, fast, strict=True):
        slow = categorisation.categorise(ds, config)
        assert quick == slow, ds.dataset_iri
        assert (quick is ds) == (slow is ds), ds.dataset_iri


@pytest.mark.parametrize("publisher", [None, "Riverside Environment Agency"])
def test_finish_mapped_hashes_once_and_gives_what_hashing_at_every_step_gives(
    publisher: str | None,
) -> None:
    """``finish_mapped`` has only its last step compute the content hash (SHA-256 of the
    whole text, the dearest part of a step that adds a few lines): the datasets are the same,
    bytes, findings and hash, as when each step hashes what it changed, whichever steps
    change a record (none, one or several), and each hash is that of the text."""
    config = CategorisationConfig(keywords=True)
    ctx = replace(CTX, categorisation=config, publisher=publisher)
    cases = _cases()
    cases += [replace(ds, ntriples=_with_keyword(ds, "farming")) for ds in cases[:40]]
    finished = finish_mapped(cases, ctx)
    paths: set[tuple[bool, bool, bool]] = set()
    for ds, done in zip(cases, finished, strict=True):
        categorised = categorisation.categorise(ds, config)
        published = with_source_publisher(categorised, ctx) if publisher else categorised
        ranged = ranges.complete_ranges(published)
        assert done == ranged, ds.dataset_iri
        assert done.content_hash == content_hash(done.ntriples), ds.dataset_iri
        paths.add((categorised is not ds, published is not categorised, ranged is not published))
    # every way through: categorised or not, the range step changing the record or not
    assert {(c, r) for c, _, r in paths} == {
        (True, True),
        (True, False),
        (False, True),
        (False, False),
    }
    if publisher:
        assert any(p for _, p, _ in paths)
