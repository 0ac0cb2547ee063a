"""Golden-output check of the ``iso19139`` mapper, for work on its speed (not a test).

    python bench/iso_golden.py --save /tmp/iso-golden.json    # before a change
    python bench/iso_golden.py --check /tmp/iso-golden.json   # after it: exit 1 on any change

Maps a fixed corpus and digests every field of every MappedDataset (N-Triples, catalogue
N-Triples, content hash, datestamp, findings, themes; a MappingError's message when the
record fails): the bundled ISO and GEMINI samples, 300 records of
:func:`aggregator.peers.gemini_samples.generate_gemini_record` (some in two revisions),
bench/iso_pipeline.py's generated records, any ``--extra`` folder of records,
and variants of every bundled sample that reach the mapper's corners:
each element removed in turn, each element's children reversed, each sample made a dataset,
a series and a service. A speed change must leave every digest as it was.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from lxml import etree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from aggregator.errors import AggregatorError  # noqa: E402
from aggregator.mapping.base import MappingContext  # noqa: E402
from aggregator.mapping.iso19139 import IsoMapper  # noqa: E402
from aggregator.models import RawRecord  # noqa: E402
from aggregator.peers.gemini_samples import bundled_gemini_records, generate_gemini_record  # noqa: E402

CTX = MappingContext("https://aggregator.example.org/", "golden")
LEVELS = ("dataset", "series", "service")


def samples() -> list[tuple[str, bytes]]:
    iso = sorted((ROOT / "aggregator" / "peers" / "data" / "iso").glob("*.xml"))
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


def corpus(extra: Path | None = None) -> Iterator[tuple[str, bytes]]:
    import iso_pipeline

    for path in sorted(extra.glob("*.xml")) if extra else ():
        yield f"extra/{path.name}", path.read_bytes()
    for name, data in samples():
        yield name, data
        yield from _variants(name, data)
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
    args = parser.parse_args()
    mapper = IsoMapper()
    digests = {name: digest(mapper, name, data) for name, data in corpus(args.extra)}
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
