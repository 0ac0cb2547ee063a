"""A harvested store's data directory as today's code would keep it (not a test): its state
database copied with the layout a new store gets (pages of 16 KB, findings packed) beside the
same graph store, snapshots and search index (hard links), and the bytes per record of each
part for both, as ``aggregator store stats`` counts them.

    python bench/state_layout_copy.py --store /var/tmp/m1m/run/store --copy /var/tmp/copy

Used on the 1M run's store (docs/benchmarks.md#the-1m-run-issue-31), whose state database was
written before the findings were packed and with pages of 4 KB. Needs the state database's
size again in free disk; ``--copy`` is replaced.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import time
from pathlib import Path

from aggregator.store.migrations import PAGE_SIZE
from aggregator.store.packing import NO_FINDINGS, pack_findings
from aggregator.store.stats import store_stats


def show(label: str, path: Path) -> None:
    conn = sqlite3.connect(f"file:{path / 'state.sqlite3'}?mode=ro", uri=True)
    stats = store_stats(path, conn)
    conn.close()
    n = sum(v for c in stats.records.values() for k, v in c.items() if k != "flagged")
    parts = {k: round(v / max(n, 1)) for k, v in stats.parts.items()}
    print(f"{label}: {n} records, {sum(parts.values())} bytes/record {json.dumps(parts)}")


def pack_all(db: sqlite3.Connection) -> int:
    after, packed = 0, 0
    while rows := db.execute(
        "SELECT id, findings FROM records WHERE id > ? AND typeof(findings) = 'text'"
        " AND findings != ? ORDER BY id LIMIT 5000",
        (after, NO_FINDINGS),
    ).fetchall():
        db.execute("BEGIN")
        db.executemany(
            "UPDATE records SET findings = ? WHERE id = ?",
            [(pack_findings(f), rid) for rid, f in rows],
        )
        db.execute("COMMIT")
        packed += len(rows)
        after = rows[-1][0]
    return packed


def link_tree(real: Path, copy: Path) -> None:
    """The graph store and snapshots as hard links: the same files, counted once each."""
    for name in ("graphs", "snapshots"):
        for f in (real / name).rglob("*"):
            target = copy / name / f.relative_to(real / name)
            if f.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.hardlink_to(f)
    for f in real.iterdir():
        if f.is_file() and not f.name.startswith("state.sqlite3"):
            (copy / f.name).hardlink_to(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--store", type=Path, required=True, help="a harvested store (its folder)")
    ap.add_argument("--copy", type=Path, required=True, help="where the copy goes (replaced)")
    args = ap.parse_args()
    show("the store", args.store)
    shutil.rmtree(args.copy, ignore_errors=True)
    args.copy.mkdir(parents=True)
    t0 = time.perf_counter()
    src = sqlite3.connect(f"file:{args.store / 'state.sqlite3'}?mode=ro", uri=True)
    src.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # VACUUM INTO writes pages of this size
    src.execute("VACUUM INTO ?", (str(args.copy / "state.sqlite3"),))
    src.close()
    print(f"VACUUM INTO with pages of {PAGE_SIZE} bytes: {time.perf_counter() - t0:.0f} s")
    t0 = time.perf_counter()
    db = sqlite3.connect(args.copy / "state.sqlite3", isolation_level=None)
    packed = pack_all(db)
    db.execute("VACUUM")
    db.close()
    print(f"findings of {packed} records packed, then VACUUM: {time.perf_counter() - t0:.0f} s")
    link_tree(args.store, args.copy)
    show("the copy in today's layout", args.copy)


if __name__ == "__main__":
    main()
