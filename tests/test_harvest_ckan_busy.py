"""A large CKAN portal that keeps changing while it is listed (issue 28): packages edited (they
move to the end of the ``metadata_modified`` order), created and deleted between the pages of
one listing, harvested through the whole pipeline into an on-disk store."""

from __future__ import annotations

import random
import threading
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from aggregator.config import HarvestSettings, HttpSettings, Settings, SourceConfig
from aggregator.core.models import JobStatus
from aggregator.demo.peers.ckan import CkanPeer, MemoryCatalogue
from aggregator.demo.peers.ckan_data import small_package
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.checkpoints import Checkpoint
from aggregator.harvest.ckan import parse_datestamp
from aggregator.jobs.lifecycle import iso
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

PACKAGES = 20_000
ROWS = 100
BULK = range(5_000, 5_350)  # a bulk import: 350 packages in one millisecond (> ROWS)


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f")


def initial_stamp(index: int) -> str:
    """Three packages a second, the three of a second within one millisecond (their
    microseconds differ; their random ids order them otherwise): ties across page ends."""
    if index in BULK:
        return stamp(datetime(2024, 1, 1, 0, 0, 0) + timedelta(seconds=BULK[0] // 3))
    return stamp(datetime(2024, 1, 1) + timedelta(seconds=index // 3, microseconds=index % 3 * 100))


class BusyPortal:
    """Between two pages (from the second request on): edits two packages anywhere in the
    catalogue (read already or not) within one millisecond, creates one and deletes one.
    Each round of edits is a second after the one before (the store keeps source datestamps
    to the second, so a package edited twice within a second could not show its last
    version: that is the store's precision, not the listing's)."""

    def __init__(self, catalogue: MemoryCatalogue, ids: list[str]) -> None:
        self.catalogue = catalogue
        self.rng = random.Random(28)
        self.lock = threading.Lock()
        self.live = list(ids)
        self.existed_throughout = set(ids)
        self.created: set[str] = set()
        self.edits = 0
        self.rounds = 0

    def __call__(self, number: int, params: dict[str, str]) -> None:
        if number < 2:
            return
        with self.lock:
            self.rounds += 1
            now = datetime(2025, 1, 1) + timedelta(seconds=self.rounds)
            for tick, victim in enumerate(self.rng.sample(self.live, 2)):
                self.catalogue.touch(victim, stamp(now + timedelta(microseconds=tick)))
            new = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
            self.catalogue.put(small_package(new, stamp(now + timedelta(milliseconds=500))))
            self.live.append(new)
            self.created.add(new)
            gone = self.live.pop(self.rng.randrange(len(self.live)))
            self.catalogue.delete(gone)
            self.existed_throughout.discard(gone)
            self.edits += 4


def test_a_busy_portal_is_listed_whole_and_its_checkpoint_saved(tmp_path: Path) -> None:
    rng = random.Random(2028)
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(PACKAGES)]
    catalogue = MemoryCatalogue(small_package(pid, initial_stamp(i)) for i, pid in enumerate(ids))
    busy = BusyPortal(catalogue, ids)
    peer = CkanPeer(catalogue)
    peer.on_request = busy
    with PeerServer(peer) as server:
        source = SourceConfig(
            name="portal",
            type="ckan",
            url=server.url,
            format="ckan",
            validation=(),  # the listing is under test, not SHACL: keep the run short
            options={"rows": ROWS},
        )
        settings = Settings(
            config_path=None,
            store_path=tmp_path / "store",
            base_iri="http://127.0.0.1:8000/",
            http=HttpSettings(allow_private=True, retries=1, backoff=0.01, timeout=60.0),
            harvest=HarvestSettings(workers=0),
            sources={"portal": source},
        )
        started = time.monotonic()
        with RecordStore(settings.store_path, settings.base_iri) as store:
            job = run_source(
                settings, store, "portal", RunOptions(), http=HttpClient(settings.http)
            )
            seconds = time.monotonic() - started
            stored = {row.local_id: row for row in store.db.iter_records("portal", status="active")}
            saved = Checkpoint.read(store.checkpoint("portal"))

    assert job.status == JobStatus.SUCCEEDED.value, job.message
    assert job.listing["complete"], job.listing
    assert busy.edits >= 400, busy.edits  # hundreds of edits during the one listing
    assert len(peer.requests) > PACKAGES // ROWS
    # every package that existed throughout the listing is stored ...
    missing = busy.existed_throughout - stored.keys()
    assert not missing, f"{len(missing)} packages never harvested, e.g. {sorted(missing)[:3]}"
    # ... and so is every package of the portal as the listing ended, at its last version
    final = dict(catalogue.packages)
    assert final.keys() <= stored.keys()
    stale = [
        pid
        for pid, package in final.items()
        if stored[pid].source_datestamp != iso(parse_datestamp(package["metadata_modified"]))
    ]
    assert not stale, f"{len(stale)} packages stored at an older version, e.g. {stale[:3]}"
    # nothing is stored that the portal never had; packages deleted after they were read stay
    # until the next full run withdraws them
    assert stored.keys() <= set(ids) | busy.created
    # the checkpoint is saved: the newest metadata_modified the portal holds
    newest = max(p["metadata_modified"] for p in final.values())
    assert saved is not None and saved.since == newest and saved.full_at is not None
    print(f"{len(peer.requests)} pages, {busy.edits} edits, {seconds:.1f} s")
