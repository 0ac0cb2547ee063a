"""Every benchmark script runs, at a small size (the full sizes run outside CI; their figures
are in docs/benchmarks.md). This catches a benchmark that no longer matches the code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parent.parent / "bench"
PHASES = ("first", "unchanged", "changed")


def run(script: str, *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def last_json(out: str) -> dict[str, object]:
    """The figures a benchmark prints last: a JSON object on one line or indented."""
    lines = out.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("{"))
    parsed: dict[str, object] = json.loads("\n".join(lines[start:]))
    return parsed


def test_harvest_and_bulk_load_benchmarks(tmp_path: Path) -> None:
    out = run("harvest_oaipmh.py", "--records", "300", "--skip-forced", "--dir", str(tmp_path))
    assert "first" in out and "unchanged" in out and "peak RSS" in out
    out = run("oxigraph_bulk_load.py", "--store", str(tmp_path / "store"), "--settle", "0.2")
    assert "us" in out


def test_oai_feed_benchmark() -> None:
    figures = last_json(run("oai_feed.py", "--records", "600", "--repeats", "2"))
    assert figures["records"] == 600
    assert figures["ListRecords dcat_ap"]["items"] == 600  # type: ignore[index]


def test_sparql_latency_benchmark(tmp_path: Path) -> None:
    out = run(
        "sparql_latency.py",
        "--records", "150", "--store", str(tmp_path / "store"),
        "--clients", "2", "--seconds", "0.3", "--requests", "40",
    )  # fmt: skip
    figures = last_json(out)
    assert figures["records"] == 150
    assert "ours" in figures and "oxigraph" in figures


def test_sparql_harvest_benchmark(tmp_path: Path) -> None:
    out = run(
        "harvest_sparql.py", "--datasets", "60", "--batch-size", "25", "--page-size", "40",
        "--dir", str(tmp_path),
    )  # fmt: skip
    figures = last_json(out)
    assert figures["datasets"] == 60
    assert figures["fetch"]["triples"] > 60 * 40  # type: ignore[index]
    assert figures["harvest"]["counters"] == {"added": 60}  # type: ignore[index]
    assert "peak RSS" in out


def test_csw_harvest_benchmark(tmp_path: Path) -> None:
    out = run("harvest_csw.py", "--records", "250", "--page-size", "40", "--dir", str(tmp_path))
    figures = last_json(out)
    assert figures["records"] == 250
    assert figures["first"]["records_per_s"] > 0  # type: ignore[index]
    if figures["end_to_end"]:
        assert figures["first"]["counters"] == {"added": 250}  # type: ignore[index]
        assert figures["unchanged"]["counters"] == {"skipped": 250}  # type: ignore[index]
    assert "peak RSS" in out


def test_metashare_sync_benchmark(tmp_path: Path) -> None:
    out = run("harvest_metashare.py", "--lrs", "120", "--changed", "0.05", "--dir", str(tmp_path))
    figures = last_json(out)
    assert figures["first sync"]["counters"] == {"added": 120}  # type: ignore[index]
    assert figures["changed"] == 6
    assert figures["resync"]["lr_requests"] == 6  # type: ignore[index]
    assert figures["resync"]["counters"] == {"updated": 6, "skipped": 114}  # type: ignore[index]
    fetched = last_json(run("harvest_metashare.py", "--lrs", "60", "--fetch-only"))
    assert fetched["fetch"]["lrs_per_s"] > 0  # type: ignore[index]


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("map_dcat.py", ("--datasets", "50", "--records", "50")),
        ("iso_pipeline.py", ("--records", "40", "--step-sample", "10")),
        ("mqa.py", ("--datasets", "50", "--runs", "1")),
        ("shacl_engines.py", ("--records", "30", "--reference-records", "3", "--repeats", "1")),
    ],
)
def test_in_process_benchmarks(script: str, args: tuple[str, ...]) -> None:
    assert run(script, *args).strip()


def test_mdr_replication_benchmark() -> None:
    out = run("harvest_mdr.py", "--pages", "120", "--days", "1", "--new", "7", "--workers", "0")
    figures = last_json(out)
    first, second = figures["first"], figures["second"]
    assert first["added"] == 120 and first["windows"] == 25  # type: ignore[index]
    assert second["added"] == 7 and second["windows"] == 1  # type: ignore[index]


def test_ckan_harvest_benchmark(tmp_path: Path) -> None:
    out = run(
        "harvest_ckan.py",
        "--records",
        "300",
        "--rows",
        "100",
        "--skip-forced",
        "--dir",
        str(tmp_path),
    )
    figures = last_json(out)
    assert figures["first"]["counters"] == {"added": 300}  # type: ignore[index]
    assert figures["unchanged"]["counters"] == {"skipped": 300}  # type: ignore[index]


def test_schedule_tick_benchmark() -> None:
    figures = last_json(run("schedule_tick.py", "--sources", "30", "--ticks", "3"))
    assert figures["sources"] == 30 and float(figures["tick ms"]) > 0  # type: ignore[arg-type]


def test_dashboard_search_benchmark() -> None:
    figures = last_json(
        run("dashboard_search.py", "--records", "300", "--repeats", "2", "--quality")
    )
    assert figures["records"] == 300 and figures["quality datasets"] == 300
    assert figures["first catch-up records/s"] > 0  # type: ignore[operator]


def test_million_benchmark(tmp_path: Path) -> None:
    """bench/million.py at 250 records: the three peers, the three harvests into one store,
    ``aggregator serve``; every figure present and the counts those of the generation."""
    out = run("million.py", "--records", "250", "--repeats", "2", "--dir", str(tmp_path))
    figures: dict[str, Any] = last_json(out)
    per_kind = {"oai": 125, "csw": 75, "ckan": 50}  # 50/30/20 %
    changed = {"oai": 2, "csw": 1, "ckan": 1}  # every 100th record: numbers 0 and 100
    names = {"oai": "portal-oai", "csw": "geo-csw", "ckan": "city-ckan"}
    assert figures["records"] == 250 and figures["per_kind"] == per_kind
    for kind, n in per_kind.items():
        counters = {p: figures[p]["sources"][names[kind]]["counters"] for p in PHASES}
        assert counters["first"] == {"added": n}
        assert counters["unchanged"] == {"skipped": n}
        assert counters["changed"] == {"updated": changed[kind], "skipped": n - changed[kind]}
    for phase in PHASES:
        assert figures[phase]["records_per_s"] > 0
        assert figures[phase]["cpu_us_per_record_total"] > 0
        assert len(figures[phase]["rss_mb_at_25_50_75_100"]) == 4
    assert figures["first"]["cpu_us_per_record"]["mapping + validation workers"] > 0
    assert 0 < figures["peak_rss_harvester_mb"] <= figures["peak_rss_mb"] < 2000
    disk = figures["disk"]
    assert disk["records"] == 250 and disk["bytes_per_record"] > 0
    assert disk["bytes_per_record_by_part"]["graph store"] > 0
    serve = figures["serve"]
    assert serve["oai_walk"]["records"] == 250 and serve["oai_walk"]["pages"] == 3
    assert set(serve["oai_page_ms"]) == {"0%", "50%", "99%"}
    assert set(serve["sparql_ms"]) >= {"by_publisher", "by_theme", "by_format", "point"}
    assert serve["sparql_ms"]["by_theme"]["groups"] > 1
    assert set(serve["dashboard_ms"]) == {"overview", "search_page", "keyword_search"}
    assert serve["keyword_hits"] > 0
    assert serve["search_index_caught_up_s"] > 0 and serve["search_first_visit_s"] > 0
    assert set(figures["targets"]) == {
        "first_harvest_minutes_at_1M", "peak_rss_mb", "unchanged_records_per_s",
        "oai_page_ms_worst", "keyword_search_ms", "point_query_ms", "group_by_ms_worst",
    }  # fmt: skip
    assert "(target < 60)" in out
