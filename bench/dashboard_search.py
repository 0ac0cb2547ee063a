"""Dashboard search benchmark (not a test): the FTS5 index of :mod:`aggregator.serve.dashboard.
search` over a state database of N synthetic active records (titles and descriptions in two
languages, keywords, a theme, a licence, distributions with a format), and the Quality page's
MQA pass over the same records.

    python bench/dashboard_search.py --records 100000
    python bench/dashboard_search.py --records 2000 --dir /tmp/dash-bench   # keep the files

Prints (last, as JSON): the first catch-up (records/s), a catch-up after 1 % of the records
changed, a catch-up with nothing new, search latency (p50/p90 over the query mix: one word, two
words, a word with a facet, no words with a facet, page 10), the index size on disk, and, with
``--quality``, the time of one MQA pass (what the Quality page pays once per store change).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from aggregator.serve.dashboard.search import SearchIndex
from aggregator.store.migrations import upgrade

WORDS = [
    "river",
    "water",
    "quality",
    "lake",
    "soil",
    "air",
    "noise",
    "traffic",
    "road",
    "rail",
    "budget",
    "school",
    "hospital",
    "energy",
    "solar",
    "wind",
    "forest",
    "habitat",
    "species",
    "census",
    "population",
    "income",
    "housing",
    "election",
    "crime",
    "bridge",
    "harbour",
    "airport",
    "weather",
    "rainfall",
    "temperature",
    "flood",
    "drought",
    "coast",
    "glacier",
]
THEMES = ("ENVI", "TRAN", "ECON", "EDUC", "HEAL", "ENER", "SOCI", "GOVE", "AGRI", "REGI")
LICENCES = ("CC_BY_4_0", "CC0", "ODC_ODBL", "OGL_3_0")
FORMATS = ("CSV", "JSON", "XML", "GEOJSON", "PDF", "XLSX")
EU = "http://publications.europa.eu/resource/authority/"


def record(n: int, rng: random.Random) -> bytes:
    iri = f"https://bench.example.org/ds/{n}"
    words = rng.sample(WORDS, 6)
    lines = [
        f'<{iri}> <http://purl.org/dc/terms/title> "{" ".join(words[:3]).title()} {n}"@en .',
        f'<{iri}> <http://purl.org/dc/terms/title> "Daten {words[0]} {n}"@de .',
        f'<{iri}> <http://purl.org/dc/terms/description> "Measurements of {" ".join(words)}'
        f' collected by station {n % 977}, updated monthly."@en .',
        f'<{iri}> <http://www.w3.org/ns/dcat#keyword> "{words[3]}" .',
        f'<{iri}> <http://www.w3.org/ns/dcat#keyword> "{words[4]}" .',
        f"<{iri}> <http://www.w3.org/ns/dcat#theme> <{EU}data-theme/{THEMES[n % len(THEMES)]}> .",
    ]
    for d in range(2):
        dist = f"{iri}/d{d}"
        fmt = FORMATS[(n + d) % len(FORMATS)]
        lines += [
            f"<{iri}> <http://www.w3.org/ns/dcat#distribution> <{dist}> .",
            f"<{dist}> <http://purl.org/dc/terms/format> <{EU}file-type/{fmt}> .",
            f"<{dist}> <http://purl.org/dc/terms/license>"
            f" <{EU}licence/{LICENCES[n % len(LICENCES)]}> .",
            f"<{dist}> <http://www.w3.org/ns/dcat#accessURL> <https://bench.example.org/f/{n}> .",
        ]
    return ("\n".join(lines) + "\n").encode()


def fill(db: sqlite3.Connection, first: int, last: int, stamp: str, rng: random.Random) -> None:
    db.execute("BEGIN")
    for n in range(first, last):
        iri = f"https://bench.example.org/ds/{n}"
        db.execute(
            "INSERT OR REPLACE INTO records (id, source, local_id, record_iri, dataset_iri, status,"
            " first_seen, modified, ntriples) VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?)",
            (
                n,
                f"src{n % 7}",
                str(n),
                f"{iri}/r",
                iri,
                stamp,
                f"{stamp[:-8]}{n:07d}Z",
                record(n, rng),
            ),
        )
    db.execute("COMMIT")


CPU: dict[str, float] = {}  # CPU seconds of the last timed call (the VM is shared: wall time
# under load says little)


def timed(fn, *args):  # type: ignore[no-untyped-def]
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    CPU["last"] = time.process_time() - c
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--quality", action="store_true", help="also time one MQA pass")
    args = ap.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="dash-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("state.sqlite3", "search.sqlite3"):
        for suffix in ("", "-wal", "-shm"):
            (folder / (name + suffix)).unlink(missing_ok=True)
    rng = random.Random(7)
    db = sqlite3.connect(folder / "state.sqlite3", isolation_level=None)
    upgrade(db)
    fill(db, 1, args.records + 1, "2026-01-01T00:00:00.0000000Z", rng)
    index = SearchIndex(folder, folder / "state.sqlite3")
    done, first = timed(index.catch_up, db)
    first_cpu = CPU["last"]
    changed = max(1, args.records // 100)
    fill(db, 1, changed + 1, "2026-02-01T00:00:00.0000000Z", rng)
    again, later = timed(index.catch_up, db)
    _, idle = timed(index.catch_up, db)
    mix = [
        ("", {}, 0),
        ("river", {}, 0),
        ("water quality", {}, 0),
        ("forest", {"theme": [f"{EU}data-theme/ENVI"]}, 0),
        ("", {"format": [f"{EU}file-type/CSV"], "source": ["src3"]}, 0),
        ("station", {}, 180),
    ]
    latencies: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for text, facets, offset in mix:
            key = f"{text or '-'} {','.join(facets) or ''} @{offset}".strip()
            _, t = timed(lambda t=text, f=facets, o=offset: index.search(db, t, f, offset=o))
            latencies.setdefault(key, []).append(t * 1000)
            cpu.setdefault(key, []).append(CPU["last"] * 1000)
    figures: dict[str, object] = {
        "records": args.records,
        "first catch-up s": round(first, 2),
        "first catch-up records/s": round(done / first),
        "first catch-up CPU s": round(first_cpu, 2),
        f"catch-up after {changed} changes s": round(later, 3),
        "catch-up with nothing new ms": round(idle * 1000, 2),
        "index MB": round(
            sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith("search.sqlite3"))
            / 1e6,
            1,
        ),
        "search ms p50/p90": {
            k: [round(statistics.median(v), 1), round(sorted(v)[int(len(v) * 0.9) - 1], 1)]
            for k, v in latencies.items()
        },
        "search CPU ms p50": {k: round(statistics.median(v), 1) for k, v in cpu.items()},
        "no words, no filter (the first visit)": "- @0",
    }
    assert again == changed
    if args.quality:
        from aggregator.serve.dashboard.quality_view import compute

        report, q = timed(compute, db)
        figures["quality pass s"] = round(q, 2)
        figures["quality pass CPU s"] = round(CPU["last"], 2)
        figures["quality datasets"] = report.catalogue.datasets
    print(json.dumps(figures, indent=2))
    if args.dir is None:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
