"""Every benchmark script runs, at a small size (the full sizes run outside CI; their figures
are in docs/benchmarks.md). This catches a benchmark that no longer matches the code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parent.parent / "bench"


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
