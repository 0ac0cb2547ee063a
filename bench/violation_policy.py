"""Stored / flagged / rejected shares per source, before and after the violation policy
(not a test; docs/validation.md#what-a-violation-does-to-a-record).

    python bench/violation_policy.py
    python bench/violation_policy.py --records ../shared/reference/geodcat-ap-dev/records

Every demo peer of aggregator/demo/peers (the fixture corpus of each format) is started on
127.0.0.1 and harvested as the demo configures it, into two fresh temporary stores:

- **before**: every source ``strict = true``, which is what every source did before the
  policy existed (any violation rejected the record);
- **after**: the sources as configured, the default policy (``flag``: only records that
  cannot be used are rejected; the GEMINI chain stays strict).

With ``--records DIR`` (default: the 29 ISO 19139 / GEMINI records of the development set in
``../shared/reference/geodcat-ap-dev/records``, when present), those files are served by a
WAF peer and harvested twice more: with the chain an ``iso19139`` source gets by default
(``gemini``: strict by default) and with ``validation = "iso19139"`` (the ISO 19139 XSD and
Table A.1, flagged by default). Prints one table row per source: datasets decided (stored +
rejected) and the stored / flagged / rejected counts and shares, before and after (records
the harvest skipped, e.g. two files with one fileIdentifier, in brackets).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aggregator.config import load_settings
from aggregator.config.sources_file import add_source
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.waf import WafApp
from aggregator.demo.run import (
    CONFIG,
    MDR_PASSWORD,
    MDR_PASSWORD_ENV,
    MDR_USER,
    METASHARE_ENV,
    METASHARE_LOGIN,
    start_sources,
)
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

DEV_RECORDS = (
    Path(__file__).resolve().parent.parent.parent / "shared/reference/geodcat-ap-dev/records"
)


def demo_sources(urls: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The demo's sources, as ``aggregator demo`` configures them (aggregator/demo/run.py)."""
    since = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "demo-oai": {"type": "oai-pmh", "url": urls["demo-oai"],
                     "options": {"metadata_prefix": "dcat_ap"}},
        "demo-dump": {"type": "rdf-dump", "url": urls["demo-dump"]},
        "demo-mdr": {
            "type": "mdr", "url": urls["demo-mdr"], "format": "mdr",
            "validation": [{"validator": "mdr-metadata"}, "shacl"],
            "secrets": {"password": MDR_PASSWORD_ENV},
            "options": {"username": MDR_USER, "since": since, "chunk_minutes": 60},
        },
        "demo-csw": {"type": "csw", "url": urls["demo-csw"], "format": "iso19139",
                     "options": {"mode": "identifiers"}},
        "demo-waf": {"type": "waf", "url": urls["demo-waf"], "format": "iso19139"},
        "demo-meta-share": {
            "type": "meta-share", "url": urls["demo-meta-share"],
            "secrets": {"username": METASHARE_ENV[0], "password": METASHARE_ENV[1]},
            "validation": ["meta-share", "shacl"],
        },
        "demo-ckan": {"type": "ckan", "url": urls["demo-ckan"]},
        "demo-records": {"type": "ogc-records", "url": urls["demo-records"],
                         "options": {"collection": "metadata"}},
    }  # fmt: skip


def harvest(
    tmp: Path, sources: dict[str, dict[str, Any]], strict: bool
) -> dict[str, tuple[str, dict[str, int]]]:
    """Harvest every source into a fresh store; source -> (format, job counters)."""
    tmp.mkdir(parents=True)
    config = tmp / "aggregator.toml"
    config.write_text(CONFIG.format(config=config, port=8000), encoding="utf-8")
    for name, table in sources.items():
        add_source(config, name, {**table, **({"strict": True} if strict else {})})
    settings = load_settings(config)
    out: dict[str, tuple[str, dict[str, int]]] = {}
    with RecordStore(settings.store_path, settings.base_iri) as store:
        for name, src in settings.sources.items():
            job = run_source(settings, store, name, RunOptions(), http=HttpClient(settings.http))
            policy = src.policy.value
            out[name] = (f"{src.format} ({policy})", dict(job.counters))
    return out


def shares(counters: dict[str, int]) -> tuple[int, int, int, int]:
    stored = sum(counters.get(k, 0) for k in ("added", "updated", "unchanged"))
    flagged, rejected = counters.get("flagged", 0), counters.get("rejected", 0)
    return stored + rejected, stored, flagged, rejected


def cell(n: int, total: int) -> str:
    return f"{n:>3} {100 * n / total:5.1f}%" if total else f"{n:>3}     -"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--records",
        type=Path,
        default=DEV_RECORDS,
        help="a folder of ISO 19139 records to serve from a WAF peer too",
    )
    args = parser.parse_args()  # fmt: skip
    os.environ.setdefault(MDR_PASSWORD_ENV, MDR_PASSWORD)
    for env_name, value in zip(METASHARE_ENV, METASHARE_LOGIN, strict=True):
        os.environ.setdefault(env_name, value)
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        urls = start_sources(stack)
        sources = demo_sources(urls)
        files = sorted(args.records.glob("*.xml")) if args.records.is_dir() else []
        if files:
            folder = WafApp()
            for path in files:
                folder.put(path.name, path.read_bytes(), datetime(2026, 1, 1, tzinfo=UTC))
            waf = stack.enter_context(PeerServer(folder))
            iso = {"type": "waf", "url": f"{waf.url}waf/", "format": "iso19139"}
            sources["dev-iso-gemini"] = iso
            sources["dev-iso-iso19139"] = {**iso, "validation": "iso19139"}
        else:
            print(f"(no records in {args.records}: the development set is left out)")
        before = harvest(Path(tmp) / "before", sources, strict=True)
        after = harvest(Path(tmp) / "after", sources, strict=False)
    head = f"{'source':<18} {'format (policy after)':<28} {'seen':>4} | before: stored"
    print(f"{head}     flagged     rejected | after: stored     flagged     rejected")
    for name in sources:
        fmt, counters = after[name]
        seen, *b = shares(before[name][1])
        _, *a = shares(counters)
        row = " ".join(cell(n, seen) for n in b) + " | " + " ".join(cell(n, seen) for n in a)
        other = " ".join(f"{k}={v}" for k in ("skipped", "errored") if (v := counters.get(k)))
        print(f"{name:<18} {fmt:<28} {seen:>4} | {row}" + (f"  ({other})" if other else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
