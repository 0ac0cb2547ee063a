"""What a store holds and what it costs on disk (``aggregator store stats``): records by source
and status, the size of each part of the data directory, bytes per record.

Read-only and lock-free, so it runs beside a harvest and ``serve``: the state database is read
through a read-only connection (WAL: one committed state), and file sizes are taken with
``stat`` while RocksDB may be compacting (a file that vanishes between the listing and its
``stat`` is skipped). Sizes are what the files take on disk (allocated blocks). Files are
counted once by inode: a snapshot shares its files with the live graph store (hard links),
so the snapshots' part is only what they hold alone, the files the live store has compacted
away since they were published (docs/store.md#one-writer-many-readers).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATUSES = ("active", "withdrawn", "rejected", "flagged")
#: the parts of a data directory, in the order they are reported
PARTS = (
    "graph store",
    "state: records",
    "state: payloads and versions",
    "state: jobs and other tables",
    "state: indexes",
    "state: free pages and log",
    "search index",
    "snapshots (held only by them)",
    "scheduler and other files",
)
_PAYLOAD_TABLES = {"payloads", "record_payloads", "source_versions", "rejections"}
_RECORD_TABLES = {"records", "record_sets", "set_counts", "journal", "shared_triples"}


@dataclass
class StoreStats:
    path: Path
    records: dict[str, dict[str, int]] = field(default_factory=dict)  # source -> status -> n
    parts: dict[str, int] = field(default_factory=dict)  # part -> bytes on disk

    @property
    def record_count(self) -> int:
        """Every catalogue record the store keeps (active, withdrawn and rejected)."""
        return sum(
            n for by in self.records.values() for status, n in by.items() if status != "flagged"
        )

    @property
    def total_bytes(self) -> int:
        return sum(self.parts.values())

    @property
    def bytes_per_record(self) -> int:
        n = self.record_count
        return round(self.total_bytes / n) if n else 0

    def per_record(self) -> dict[str, float]:
        """Bytes per record of each part (0 with no record)."""
        n = self.record_count
        return {part: round(size / n, 1) if n else 0.0 for part, size in self.parts.items()}

    def totals(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for by in self.records.values():
            for status, n in by.items():
                out[status] = out.get(status, 0) + n
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "records": self.records,
            "totals": self.totals(),
            "record_count": self.record_count,
            "parts": self.parts,
            "total_bytes": self.total_bytes,
            "bytes_per_record": self.bytes_per_record,
            "bytes_per_record_by_part": self.per_record(),
        }

    def lines(self) -> Iterator[str]:
        yield f"store at {self.path}"
        yield f"records: {self.record_count}"
        width = max((len(s) for s in self.records), default=6)
        yield f"  {'source':<{width}}  " + "  ".join(f"{s:>9}" for s in STATUSES)
        rows = [*sorted(self.records.items()), ("(all)", self.totals())]
        for source, by in rows:
            counts = "  ".join(f"{by.get(s, 0):>9}" for s in STATUSES)
            yield f"  {source:<{width}}  {counts}"
        yield f"size on disk: {'':<19} {'in all':>10} {'per record':>11}"
        per_record = self.per_record()
        for part in PARTS:
            size = self.parts.get(part, 0)
            yield f"  {part:<32} {human(size):>10} {human(per_record.get(part, 0)):>11}"
        yield f"  {'total':<32} {human(self.total_bytes):>10} {human(self.bytes_per_record):>11}"
        yield f"bytes per record: {human(self.bytes_per_record)}"


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


def _files(folder: Path) -> Iterator[os.stat_result]:
    """``stat`` of each file under ``folder``; files removed meanwhile are skipped."""
    for root, _dirs, names in os.walk(folder):
        for name in names:
            try:
                yield os.stat(os.path.join(root, name), follow_symlinks=False)
            except FileNotFoundError:
                continue


def _on_disk(st: os.stat_result) -> int:
    return st.st_blocks * 512


def record_counts(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    """source -> {status: n, "flagged": active records stored with violations}."""
    out: dict[str, dict[str, int]] = {}
    cur = conn.execute(
        "SELECT source, status, count(*), sum(flagged) FROM records GROUP BY source, status"
    )
    for source, status, n, flagged in cur:
        by = out.setdefault(str(source), dict.fromkeys(STATUSES, 0))
        by[str(status)] = int(n)
        if status == "active":
            by["flagged"] = int(flagged or 0)
    return out


def _state_parts(conn: sqlite3.Connection) -> dict[str, int]:
    """The state database's pages by what they hold (SQLite's ``dbstat`` table)."""
    indexes = {
        str(name) for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
    }
    parts = dict.fromkeys(PARTS[1:5], 0)
    for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
        name = str(name)
        if name in indexes or name.startswith("sqlite_autoindex"):
            part = "state: indexes"
        elif name in _RECORD_TABLES:
            part = "state: records"
        elif name in _PAYLOAD_TABLES:
            part = "state: payloads and versions"
        else:
            part = "state: jobs and other tables"
        parts[part] += int(size)
    return parts


def store_stats(path: Path, conn: sqlite3.Connection) -> StoreStats:
    """The figures of the store at ``path``; ``conn``: its state database, read-only."""
    stats = StoreStats(path, record_counts(conn))
    parts = dict.fromkeys(PARTS, 0)
    seen: set[tuple[int, int]] = set()

    def add(part: str, st: os.stat_result) -> None:
        key = (st.st_dev, st.st_ino)
        if key not in seen:  # a hard link counts once, for the first part that has it
            seen.add(key)
            parts[part] += _on_disk(st)

    for st in _files(path / "graphs"):
        add("graph store", st)
    for st in _files(path / "snapshots"):
        add("snapshots (held only by them)", st)
    state_files = {"state.sqlite3", "state.sqlite3-wal", "state.sqlite3-shm"}
    search_files = {"search.sqlite3", "search.sqlite3-wal", "search.sqlite3-shm"}
    state_bytes = 0
    for entry in path.iterdir() if path.is_dir() else ():
        if entry.is_dir() and entry.name in ("graphs", "snapshots"):
            continue
        for st in _files(entry) if entry.is_dir() else _stat(entry):
            if entry.name in state_files:
                state_bytes += _on_disk(st)
            elif entry.name in search_files:
                add("search index", st)
            else:
                add("scheduler and other files", st)
    parts.update(_state_parts(conn))
    # what the files hold beyond the pages in use: the free list, the write-ahead log
    parts["state: free pages and log"] = max(0, state_bytes - sum(parts[p] for p in PARTS[1:5]))
    stats.parts = parts
    return stats


def disk_total(path: Path) -> int:
    """What the data directory at ``path`` takes on disk, each file once: the figure
    without ``dbstat``'s read of every page of the state database."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for st in _files(path):
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += _on_disk(st)
    return total


def _stat(entry: Path) -> Iterator[os.stat_result]:
    try:
        yield entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return
