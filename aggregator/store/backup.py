"""Consistent online backups of a store, and their restore (``aggregator store backup|restore``).

A backup is a folder: ``state.sqlite3`` (SQLite's online backup API), ``graphs/`` (a copy of
a readers' snapshot of the graph store, ``snapshots.py``), the scheduler's book when there is
one, and ``backup.json`` (what it holds). The search index is not copied: the first search
builds it again.
It is taken as a reader, with no lock on the store, so a harvest and the serving processes go
on (only the snapshot is kept from collection while it is copied):

1. Under the snapshot shelf's lock, where no snapshot is being published, the current snapshot
   ``gen-A`` is pinned (a reader's shared flock) and a read transaction is opened on the state
   database. The graph store reached generation A (its batch committed, loaded, its journal
   marks cleared) before that transaction began, so the state it reads is at a generation
   M >= A.
2. The state database is copied from inside that transaction (``Connection.backup`` reads the
   source connection's transaction: one committed state however long the copy takes), then
   the snapshot's files (immutable, a RocksDB checkpoint) are copied.
3. When M > A, batches after A are in the state copy and not in the graph copy, and some of
   them may have had their journal marks cleared already (loaded into the live store after
   the snapshot). So the copy's journal marks every record with M: a restore replays the
   journal (as after a crash: each graph is compared with its state and replaced where they
   differ) and holds exactly generation M, a state the live store had. When M = A, the
   graph copy is that state already and only the marks the copy carried are replayed.

A restore copies a backup into an empty store folder (a non-empty one is refused: nothing is
overwritten) and opens it once as its writer, which replays the journal and publishes a first
snapshot; the command then runs the store check.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aggregator.core.errors import StoreError
from aggregator.store.snapshots import SnapshotShelf, generation_of
from aggregator.store.state import read_generation

MANIFEST = "backup.json"
STATE = "state.sqlite3"
GRAPHS = "graphs"


@dataclass(frozen=True, slots=True)
class BackupReport:
    path: str
    generation: int  # the state database's, which a restore brings the graphs to
    snapshot_generation: int  # the graph copy's
    records: int
    bytes: int
    taken: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _empty(folder: Path) -> bool:
    return not folder.exists() or (folder.is_dir() and not any(folder.iterdir()))


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _copy_database(source: Path, target: Path) -> None:
    """An SQLite file of the store that lives beside the state (the scheduler's book), copied
    through the backup API: consistent in itself."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    try:
        src.execute("PRAGMA busy_timeout = 10000")
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def backup_store(store_path: Path, target: Path, databases: Sequence[str] = ()) -> BackupReport:
    """Copy the store at ``store_path`` into the empty folder ``target``, consistently,
    beside whatever writes or reads it. ``databases``: other SQLite files of the store
    folder to copy too (the scheduler's book), each consistent in itself."""
    if not _empty(target):
        raise StoreError(f"{target} is not empty: back up into a new or empty folder")
    source = sqlite3.connect(f"file:{store_path / STATE}?mode=ro", uri=True, isolation_level=None)
    try:
        source.execute("PRAGMA busy_timeout = 10000")

        def begin() -> None:  # the read transaction starts at its first read
            source.execute("BEGIN")
            read_generation(source)

        shelf = SnapshotShelf(store_path / "snapshots")
        with shelf.pinned(begin) as snapshot:
            if snapshot is None:
                source.execute("COMMIT")
                raise StoreError(
                    f"the store at {store_path} has no snapshot of its graph store yet: open it"
                    " once as its writer (`aggregator store upgrade` does) and back up again"
                )
            generation = read_generation(source)
            target.mkdir(parents=True, exist_ok=True)
            copy = sqlite3.connect(target / STATE)
            try:
                source.backup(copy)
                source.execute("COMMIT")
                shutil.copytree(snapshot, target / GRAPHS)
                from_snapshot = generation_of(snapshot.name) or 0
                if from_snapshot != generation:
                    with copy:
                        copy.execute(
                            "INSERT OR REPLACE INTO journal (record_id, generation)"
                            " SELECT id, ? FROM records",
                            (generation,),
                        )
                records = int(copy.execute("SELECT count(*) FROM records").fetchone()[0])
            finally:
                copy.close()
    finally:
        source.close()
    for name in databases:
        if (store_path / name).is_file():
            _copy_database(store_path / name, target / name)
    report = BackupReport(
        str(target),
        generation,
        from_snapshot,
        records,
        _size(target),
        datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    (target / MANIFEST).write_text(json.dumps(report.as_dict(), indent=2), encoding="utf-8")
    return report


def restore_files(backup: Path, store_path: Path, databases: Sequence[str] = ()) -> dict[str, Any]:
    """Copy a backup's files into the empty store folder ``store_path``; returns its
    manifest. The store is consistent once a writer opened it (the journal replay)."""
    manifest_path = backup / MANIFEST
    if not manifest_path.is_file() or not (backup / STATE).is_file():
        raise StoreError(f"{backup} is not a store backup (no {MANIFEST} or {STATE} in it)")
    if not _empty(store_path):
        raise StoreError(
            f"the store folder {store_path} is not empty: restore into an empty folder (set"
            " [store] path to a new one, or move the old store away first)"
        )
    store_path.mkdir(parents=True, exist_ok=True)
    shutil.copy2(backup / STATE, store_path / STATE)
    shutil.copytree(backup / GRAPHS, store_path / GRAPHS)
    for name in databases:
        if (backup / name).is_file():
            shutil.copy2(backup / name, store_path / name)
    manifest: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
    return manifest
