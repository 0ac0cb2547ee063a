"""The 1M run (issue 31; not a test): N generated records of mixed formats, harvested into ONE
fresh embedded store through the real pipeline, then served, every figure beside its target.

    python bench/million.py --records 1000000 --dir /var/tmp/million   # the 1M run (~1 h+)
    python bench/million.py --records 10000                            # what CI runs

The peers (bench/_mixed_peers.py), each in its own process like a remote server, make every
record when a page asks for it, deterministically from its number: DCAT-AP over OAI-PMH,
ISO 19139 (GEMINI) over CSW, CKAN (``--mix``, default 50/30/20 %). The store is configured by
an ``aggregator.toml`` written into the work folder and read by the configuration loader, so
each source gets the validation chain ``aggregator harvest`` gives it (CSW: ``gemini`` then
SHACL), and the three sources run one after another with ``run_source``, each with its own
mapping workers, as ``aggregator harvest --all`` runs them (one compaction after the last
job, inside the phase's time, ``compaction_seconds``). Phases: the first harvest (then
``store optimize``, as after any large harvest), an unchanged re-harvest (full listings: every
record listed and skipped by its date), a re-harvest after every ``--change-step``-th record
of each peer changed (1 %). Then ``aggregator serve`` serves the store (bench/_million_serve.py).

It fails (exit 1) on a crash or on counts that do not match the generation (added, skipped or
unchanged, updated per source and phase); missed targets are reported, never a failure.
Printed: readable lines, then everything as one JSON line (the last line).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench helpers, when imported

from _common import GroupSampler, at_shares, process_cpu
from _million_serve import measure_serving
from _mixed_peers import KINDS, Peers, changed_count

SOURCES = {"oai": "portal-oai", "csw": "geo-csw", "ckan": "city-ckan"}
#: the CPU of the harvesting process's threads, by the pipeline stage each runs
STAGES = {
    "main": "store writer (main thread: batches, state DB, job flow)",
    "harvest-listing": "harvest listing",
    "oai-pmh-pages": "harvest listing",
    "csw-page-ahead": "harvest listing",
    "graph-applier": "graph applier",
    # native threads the OS names after the process: the graph store's bulk-load helpers
    "python": "unnamed native threads (graph store bulk load)",
    "python3": "unnamed native threads (graph store bulk load)",
}
TARGETS: dict[str, tuple[str, float, str]] = {  # figure -> (comparison, bound, what it means)
    "first_harvest_minutes_at_1M": ("<", 60, "first harvest of 1M, minutes (linear from N)"),
    "peak_rss_mb": ("<", 500, "peak RSS of the harvesting process group, MB"),
    "unchanged_records_per_s": (">=", 5000, "unchanged re-harvest, records/s"),
    "oai_page_ms_worst": ("<", 50, "OAI-PMH page of 100 at any depth, p50 ms"),
    "keyword_search_ms": ("<", 200, "keyword search (full-text index), p50 ms"),
    "point_query_ms": ("<", 10, "SPARQL point query, p50 ms"),
    "group_by_ms_worst": ("<", 5000, "SPARQL group-by over all datasets, p50 ms"),
}


def split(total: int, mix: list[float]) -> dict[str, int]:
    """Records per kind: shares of ``total``, the rounding on the first kind."""
    counts = {k: int(total * share / sum(mix)) for k, share in zip(KINDS, mix, strict=True)}
    counts["oai"] += total - sum(counts.values())
    return counts


def write_config(folder: Path, peers: Peers, counts: dict[str, int], workers: int) -> Path:
    """The ``aggregator.toml`` of the run: the store in ``folder/store``, the three sources."""
    options = {
        "csw": 'options = { mode = "full", page_size = 100 }\nformat = "iso19139"\n',
        "ckan": 'options = { rows = 1000 }\nformat = "ckan"\n',
        "oai": "",
    }
    lines = [
        '[store]\npath = "store"\nbase_iri = "http://127.0.0.1:8000/"\n',
        "[http]\nallow_private = true\ntimeout = 300\n",
        f"[harvest]\nworkers = {workers}\n",
        # a group-by over a million datasets may take longer than the default 30 s: measured
        "[serve]\nsparql_timeout = 600\n",
    ]
    for kind, n in counts.items():
        if n:
            lines.append(
                f'[sources.{SOURCES[kind]}]\ntype = "{ {"oai": "oai-pmh"}.get(kind, kind) }"\n'
                f'url = "{peers.url(kind)}"\n{options[kind]}'
            )
    path = folder / "aggregator.toml"
    path.write_text("\n".join(lines))
    return path


def expected(phase: str, n: int, changed: int) -> dict[str, int]:
    """The counters a phase must end with for a source of ``n`` records (skipped and
    unchanged together: ``listed``)."""
    if phase == "first":
        return {"added": n, "updated": 0, "listed": 0}
    if phase == "unchanged":
        return {"added": 0, "updated": 0, "listed": n}
    return {"added": 0, "updated": changed, "listed": n - changed}


def run_phase(
    phase: str, settings: Any, store: Any, sampler: GroupSampler, counts: dict[str, int],
    step: int, peer_pids: set[int],
) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """One harvest of every source; (its figures, what did not match the generation)."""
    from aggregator.jobs.pipeline import RunOptions, compact_after_jobs, run_source
    from aggregator.net.client import HttpClient

    http = HttpClient(settings.http)
    total = sum(counts.values())
    sampler.mark()
    threads0, kids0 = sampler.thread_cpu(), sampler.children_cpu_total()
    peers0 = sum(process_cpu(p) for p in peer_pids)
    own0 = time.process_time()
    t0 = time.perf_counter()
    sources, wrong, jobs = {}, [], []
    for kind, n in counts.items():
        if not n:
            continue
        name = SOURCES[kind]
        s0 = time.perf_counter()
        # as ``harvest --all``: one compaction after the last job, not one per large job
        job = run_source(settings, store, name, RunOptions(full=True, compact=False), http=http)
        jobs.append(job)
        c = job.counters
        got = {
            "added": c.get("added", 0),
            "updated": c.get("updated", 0),
            "listed": c.get("skipped", 0) + c.get("unchanged", 0),
        }
        want = expected(phase, n, changed_count(n, step))
        bad = c.get("rejected", 0) + c.get("errored", 0) + c.get("withdrawn", 0)
        if got != want or bad or job.status != "succeeded":
            wrong.append(f"{phase} {name}: {job.status} {dict(c)}, expected {want}")
        sources[name] = {
            "seconds": round(time.perf_counter() - s0, 2),
            "status": job.status,
            "counters": {k: v for k, v in c.items() if v},
        }
    compacted = compact_after_jobs(store, jobs, settings)
    seconds = time.perf_counter() - t0
    own = time.process_time() - own0
    samples = sampler.mark()
    threads = sampler.thread_cpu()
    per = 1e6 / total
    stages: dict[str, float] = {"mapping + validation workers": 0.0}
    for tname, cpu in threads.items():
        stage = STAGES.get(tname, "rocksdb" if tname.startswith("rocksdb") else tname)
        stages[stage] = stages.get(stage, 0.0) + (cpu - threads0.get(tname, 0.0)) * per
    # threads that ended since their last sample (the listing's last half second)
    stages["threads ended between samples"] = own * per - sum(stages.values())
    stages["mapping + validation workers"] = (sampler.children_cpu_total() - kids0) * per
    figures = {
        "seconds": round(seconds, 2),
        "records_per_s": round(total / seconds),
        "sources": sources,
        # the one compaction after the last job (None: together not a large harvest)
        "compaction_seconds": compacted and compacted.get("seconds"),
        "cpu_us_per_record": {k: round(v) for k, v in stages.items() if round(v)},
        "cpu_us_per_record_total": round(sum(stages.values())),
        "peers_cpu_us_per_record": round((sum(process_cpu(p) for p in peer_pids) - peers0) * per),
        "rss_mb_at_25_50_75_100": at_shares(samples, (0.25, 0.5, 0.75, 1.0)),
    }
    return figures, wrong


def disk(store_path: Path) -> dict[str, Any]:
    """What ``aggregator store stats`` reports, per record."""
    from aggregator.store.stats import store_stats

    conn = sqlite3.connect(f"file:{store_path / 'state.sqlite3'}?mode=ro", uri=True)
    try:
        stats = store_stats(store_path, conn)
    finally:
        conn.close()
    n = max(1, stats.record_count)
    return {
        "records": stats.record_count,
        "total_mb": round(stats.total_bytes / 2**20, 1),
        "bytes_per_record": stats.bytes_per_record,
        "bytes_per_record_by_part": {k: round(v / n) for k, v in stats.parts.items() if v},
    }


def verdicts(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target beside its figure, met or missed (a harvest's time scaled linearly to 1M)."""
    serve = results["serve"]
    figures = {
        "first_harvest_minutes_at_1M": results["first"]["seconds"] / results["records"] * 1e6 / 60,
        "peak_rss_mb": results["peak_rss_mb"],
        "unchanged_records_per_s": results["unchanged"]["records_per_s"],
        "oai_page_ms_worst": max(d["p50_ms"] for d in serve["oai_page_ms"].values()),
        "keyword_search_ms": serve["dashboard_ms"]["keyword_search"]["p50_ms"],
        "point_query_ms": serve["sparql_ms"]["point"]["p50_ms"],
        "group_by_ms_worst": max(
            v.get("p50_ms", math.inf) for k, v in serve["sparql_ms"].items() if k.startswith("by_")
        ),
    }
    out = {}
    for key, (op, bound, _) in TARGETS.items():
        value = figures[key]
        met = value < bound if op == "<" else value >= bound
        shown = round(value, 2) if math.isfinite(value) else None  # None: a query failed
        out[key] = {"figure": shown, "target": f"{op} {bound}", "met": met}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--mix", default="50,30,20", help="OAI-PMH,CSW,CKAN shares")
    ap.add_argument("--change-step", type=int, default=100, help="change every Nth record")
    ap.add_argument("--workers", type=int, default=1, help="mapping processes per source")
    ap.add_argument("--repeats", type=int, default=20, help="requests per latency figure")
    ap.add_argument(
        "--dir", type=Path, default=None,
        help="work folder (default: temporary); its peers/ files of records are reused",
    )  # fmt: skip
    ap.add_argument(
        "--peer-generates", action="store_true",
        help="the peers make each record when a page asks for it (their CPU shares the cores"
        " with the harvest) instead of before the clock, into files of their own",
    )  # fmt: skip
    args = ap.parse_args(argv)
    counts = split(args.records, [float(x) for x in args.mix.split(",")])
    tmp = None if args.dir else tempfile.TemporaryDirectory(prefix="million-")
    folder = args.dir or Path(tmp.name)  # type: ignore[union-attr]
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "store").exists():
        raise SystemExit(f"{folder / 'store'} exists: remove it, the run needs a fresh store")
    from aggregator.config.loading import load_settings
    from aggregator.store.optimize import optimize_store
    from aggregator.store.records import RecordStore

    t0 = time.perf_counter()
    peers = Peers(counts, args.change_step, None if args.peer_generates else folder / "peers")
    results: dict[str, Any] = {"records": args.records, "per_kind": counts}
    results.update(change_step=args.change_step, workers=args.workers)
    results["peers_ready_seconds"] = round(time.perf_counter() - t0, 1)
    results["peers_generate"] = args.peer_generates
    print(f"peers ready in {results['peers_ready_seconds']} s (records made before the clock:"
          f" {not args.peer_generates})", flush=True)  # fmt: skip
    wrong: list[str] = []
    try:
        settings = load_settings(write_config(folder, peers, counts, args.workers))
        sampler = GroupSampler(exclude=peers.pids)
        sampler.start()
        with RecordStore(settings.store_path, settings.base_iri) as store:
            for phase in ("first", "unchanged", "changed"):
                if phase == "changed":
                    peers.change()
                figures, bad = run_phase(
                    phase, settings, store, sampler, counts, args.change_step, peers.pids
                )
                results[phase], wrong = figures, wrong + bad
                print(
                    f"{phase:9} {figures['records_per_s']:>7} records/s {figures['seconds']:>8} s"
                    f"  CPU us/record {figures['cpu_us_per_record']}"
                    f" (+ peers {figures['peers_cpu_us_per_record']})"
                    f"  RSS MB at 25/50/75/100 % {figures['rss_mb_at_25_50_75_100']}",
                    flush=True,
                )
                if phase == "first":
                    t0 = time.perf_counter()
                    optimize_store(store)
                    results["optimize_seconds"] = round(time.perf_counter() - t0, 1)
        sampler.stop.set()
        # the harvesting process alone (the group's sum counts shared pages in each process):
        # its high-water mark, which a peak between two samples of the group can exceed
        results["peak_rss_harvester_mb"] = (
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        )
        results["peak_rss_mb"] = max(round(sampler.peak_mb), results["peak_rss_harvester_mb"])
        results["disk"] = disk(settings.store_path)
        print(
            f"peak RSS {results['peak_rss_mb']} MB (the harvesting process alone"
            f" {results['peak_rss_harvester_mb']} MB); disk {results['disk']}",
            flush=True,
        )
        if wrong:
            raise SystemExit("counts do not match the generation:\n" + "\n".join(wrong))
        results["serve"] = measure_serving(
            settings.config_path or folder, settings.store_path, args.records, args.repeats
        )
        walked = results["serve"]["oai_walk"]["records"]
        if walked != args.records:
            raise SystemExit(f"the OAI-PMH walk gave {walked} records, not {args.records}")
        print(f"serving: {json.dumps(results['serve'])}")
        results["targets"] = verdicts(results)
        for key, v in results["targets"].items():
            met = "met" if v["met"] else "MISSED"
            print(f"  {TARGETS[key][2]:<48} {v['figure']!s:>10} (target {v['target']}): {met}")
        print(json.dumps(results))
        return results
    finally:
        peers.close()
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
