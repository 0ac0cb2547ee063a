"""The record lifecycle rules, applied batch by batch for one job.

Rules (generalised from the UK DMS collection interface, paragraphs 46-50):

- a record whose source metadata date is not newer than the stored one is skipped (unless
  forced), before it is even mapped;
- two records with the same identifier in one harvest: the most recent metadata date wins;
- unchanged content (same canonical hash) is not rewritten;
- a record that fails mapping or validation is rejected: a new one is kept as a ``rejected``
  catalogue record with its payload; an active one keeps its last good version;
- a deleted header withdraws the record; a withdrawn record that comes back is reinstated,
  whatever its date (a withdrawn record is not held, so the date rule does not skip it);
- absent records are withdrawn only by the pipeline, after a complete full listing.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from aggregator.config import SourceConfig
from aggregator.core.models import (
    Finding,
    Outcome,
    RawRecord,
    RecordError,
    Severity,
)
from aggregator.jobs.processing import Checked, Processed, dataset_ntriples
from aggregator.store.journal import JobLog, now_iso
from aggregator.store.records import RecordStore
from aggregator.store.rejections import DeadLetter
from aggregator.store.state import (
    RecordRow,
    RecordWrite,
    read_datestamps,
)
from aggregator.store.versions import read_deleted_versions, read_holders, read_versions
from aggregator.validate.policy import Verdict

log = logging.getLogger(__name__)

BATCH = 500


def iso(dt: datetime | None) -> str | None:
    """UTC ``YYYY-MM-DDThh:mm:ssZ`` (sortable as text); naive datetimes are taken as UTC."""
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _newer(incoming: str | None, stored: str | None) -> bool:
    """True when the incoming record may replace the stored one by date."""
    return incoming is None or stored is None or incoming > stored


def _held(incoming: datetime | None, stored: str | None, status: str) -> bool:
    """The skip-by-date rule: the store holds this record at its source date or a newer one.
    A withdrawn record is not held, whatever its date: if it is listed again, it is back."""
    return status != "withdrawn" and not _newer(iso(incoming), stored)


class UpToDate:
    """:attr:`HarvestRequest.up_to_date` for one source: which listed records the store
    already holds at their datestamp or a newer one, by the rule of the skip-by-date check in
    :meth:`BatchWriter.prefilter`. It reads through a read-only connection of its own, made in
    the listing thread that calls it (SQLite in WAL mode lets it read while the writer
    commits); records written by this run but not committed yet are not seen, so they are
    delivered whole and the prefilter decides."""

    def __init__(self, db_path: Path, source: str) -> None:
        self.db_path = db_path
        self.source = source
        self._conn: sqlite3.Connection | None = None

    def __call__(self, listed: Sequence[tuple[str, datetime | None]]) -> frozenset[str]:
        if not listed:
            return frozenset()
        try:
            stored = read_datestamps(self._connection(), self.source, (lid for lid, _ in listed))
        except sqlite3.Error as err:  # only a shortcut: deliver every payload instead
            log.warning("cannot tell which listed records are up to date (%s)", err)
            return frozenset()
        return frozenset(lid for lid, when in listed if lid in stored and _held(when, *stored[lid]))

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            uri = f"file:{quote(str(self.db_path))}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._conn.execute("PRAGMA busy_timeout = 10000")
        return self._conn

    def versions(self, local_ids: Sequence[str]) -> dict[str, str]:
        """:attr:`HarvestRequest.held_versions`: the version tag held for each listed record
        the store holds (not withdrawn); empty when the store cannot be read (a shortcut only:
        every record is then fetched)."""
        try:
            return read_versions(self._connection(), self.source, local_ids) if local_ids else {}
        except sqlite3.Error as err:
            log.warning("cannot read the held version tags (%s)", err)
            return {}

    def deleted_versions(self, local_ids: Sequence[str]) -> dict[str, str]:
        """:attr:`HarvestRequest.deleted_versions`: the version tag with which the source
        deleted each listed record the store does not hold; empty when the store cannot be
        read (every such record is then fetched)."""
        try:
            if not local_ids:
                return {}
            return read_deleted_versions(self._connection(), self.source, local_ids)
        except sqlite3.Error as err:
            log.warning("cannot read the version tags of deleted records (%s)", err)
            return {}

    def holders(self, local_ids: Sequence[str]) -> dict[str, str]:
        """:attr:`HarvestRequest.held_elsewhere`: local id -> the other source holding an
        active record under it."""
        try:
            return read_holders(self._connection(), self.source, local_ids) if local_ids else {}
        except sqlite3.Error as err:
            log.warning("cannot tell which records other sources hold (%s)", err)
            return {}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _findings_json(findings: Iterable[Finding]) -> str:
    return json.dumps([f.as_dict() for f in findings if f.severity is not Severity.INFO])


@dataclass(frozen=True, slots=True)
class _GraphForms:
    """A record's graph as raw N-Triples or as the worker's prepared forms."""

    ntriples: bytes = b""
    catalog: bytes = b""
    packed_ntriples: bytes = b""
    packed_catalog: bytes = b""
    nquads: bytes = b""
    shared: bytes = b""


class BatchWriter:
    def __init__(
        self,
        store: RecordStore,
        source: SourceConfig,
        job: JobLog,
        force: bool,
        batch_size: int = BATCH,
        on_reject: Callable[[str, Sequence[Finding]], None] | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.on_reject = on_reject  # told of every rejection (the pipeline emits an event)
        self.store = store
        self.source = source
        self.job = job
        self.force = force
        self.unmappable_collections = 0
        self._writes: dict[str, RecordWrite] = {}
        self._seen: set[str] = set()
        self._payloads: dict[str, tuple[bytes, str, bytes]] = {}
        self._dead: list[DeadLetter] = []
        self._versions: dict[str, str] = {}  # version tags to note with the next flush

    # -- helpers ----------------------------------------------------------------------------
    def _state(self, local_ids: Sequence[str]) -> dict[str, RecordRow | RecordWrite]:
        """The newest known state: unflushed writes first, then the store."""
        out: dict[str, RecordRow | RecordWrite] = dict(
            self.store.records(self.source.name, [i for i in local_ids if i not in self._writes])
        )
        out.update({i: self._writes[i] for i in local_ids if i in self._writes})
        return out

    def _keep_payload(self, p: Processed) -> str:
        self._payloads.setdefault(
            p.payload_sha, (p.raw.payload, p.raw.media_type, p.packed_payload)
        )
        return p.payload_sha

    def _dead_letter(
        self, p: Processed, local_id: str, findings: Sequence[Finding], datestamp: str | None
    ) -> None:
        """Keep a record that could not be stored, with its payload and every finding."""
        raw = p.raw
        stage = next(
            (f.step or f.stage.value for f in findings if f.severity is Severity.VIOLATION), "map"
        )
        self._dead.append(
            DeadLetter(
                source=self.source.name,
                local_id=local_id,
                job_id=self.job.id,
                stage=stage,
                payload_sha=self._keep_payload(p),
                media_type=raw.media_type,
                format=raw.format,
                url=raw.url,
                datestamp=datestamp,
                is_collection=raw.is_collection,
                findings=json.dumps([f.as_dict() for f in findings]),
            )
        )
        if self.on_reject is not None:
            self.on_reject(local_id, findings)
        if len(self._dead) >= self.batch_size:  # keep memory flat when everything fails
            self.flush()

    def _errors(self, local_id: str, findings: Iterable[Finding]) -> None:
        for f in findings:
            if f.severity is Severity.VIOLATION:
                self.job.error(RecordError.from_finding(local_id, f))

    def _see(self, local_id: str) -> None:
        """Mark a listed record that needs no write as seen; the marks go to the store a
        batch at a time, so they do not grow in memory with the listing."""
        self._seen.add(local_id)
        if len(self._seen) >= self.batch_size:
            self.store.mark_seen(self.job, self._seen)
            self._seen.clear()

    def _note_version(self, raw: RawRecord, local_id: str, *, alone: bool = False) -> None:
        """The store holds ``local_id`` as the source gave it at ``raw.version``. Noted before
        the record's own write is put, so that both go in one transaction; ``alone``: no
        write comes with it (an unchanged record), so it may flush by itself."""
        if raw.version is not None:
            self._versions[local_id] = raw.version
            if alone and len(self._versions) >= self.batch_size:
                self.flush()

    def _put(self, w: RecordWrite) -> None:
        self._writes[w.local_id] = w
        self._seen.discard(w.local_id)
        if len(self._writes) >= self.batch_size:
            self.flush()

    def _write(
        self,
        raw: RawRecord,
        local_id: str,
        status: str,
        prior: RecordRow | RecordWrite | None,
        checked: Checked | None,
        findings: Sequence[Finding],
        processed: Processed | None = None,
    ) -> RecordWrite:
        """The new state of a record. ``checked`` is the mapped dataset (None when withdrawn
        or rejected); ``processed`` the worker's result (None for a deleted header)."""
        ds = checked.dataset if checked else None
        ts = now_iso()
        content_changed = prior is None or ds is None or prior.content_hash != ds.content_hash
        record_iri = (
            prior.record_iri if prior else self.store.record_iri(self.source.name, local_id)
        )
        flagged = checked is not None and status == "active" and checked.flagged
        # the flag is published on the catalogue record: a change of it is a change to see
        flag_changed = prior is not None and bool(prior.flagged) != flagged
        touched = content_changed or prior is None or prior.status != status or flag_changed
        if processed is None:  # a deleted header: the payload stays the last one received
            payload_sha = prior.payload_sha if prior else None
        else:
            payload_sha = self._keep_payload(processed)
        graph = _GraphForms()
        if checked is not None and status == "active":
            prepared = checked.prepared
            if prepared is not None and prepared.record_iri == record_iri:
                graph = _GraphForms(
                    packed_ntriples=prepared.packed_ntriples,
                    packed_catalog=prepared.packed_catalog,
                    nquads=prepared.nquads,
                    shared=prepared.shared,
                )
            else:  # prepared for another IRI (the base IRI changed): build it here
                nt, cat = dataset_ntriples(checked)
                graph = _GraphForms(ntriples=nt, catalog=cat)
        return RecordWrite(
            source=self.source.name,
            local_id=local_id,
            record_iri=record_iri,
            dataset_iri=ds.dataset_iri if ds else (prior.dataset_iri if prior else None),
            status=status,
            content_hash=ds.content_hash if ds else (prior.content_hash if prior else None),
            first_seen=prior.first_seen if prior else ts,
            modified=ts if touched or prior is None else prior.modified,
            source_datestamp=iso(ds.datestamp if ds else raw.datestamp),
            job_id=self.job.id,
            format=raw.format,
            payload_sha=payload_sha,
            url=raw.url,
            themes=" ".join(ds.themes) if ds else "",
            ntriples=graph.ntriples,
            catalog_ntriples=graph.catalog,
            findings=_findings_json(findings),
            existed=prior is not None,
            modified_at_commit=touched,
            packed_ntriples=graph.packed_ntriples,
            packed_catalog=graph.packed_catalog,
            nquads=graph.nquads,
            shared=graph.shared,
            flagged=flagged,
        )

    # -- stage 1: before mapping ------------------------------------------------------------
    def prefilter(self, chunk: Sequence[RawRecord]) -> list[RawRecord]:
        """Handle deleted headers and not-newer records; return what needs mapping."""
        latest: dict[str, RawRecord] = {}
        todo: list[RawRecord] = []
        for raw in chunk:
            if raw.is_collection:
                todo.append(raw)
                continue
            prev = latest.get(raw.local_id)
            if prev is not None:
                self.job.count(Outcome.SKIPPED)  # the same identifier twice: newest date wins
                if not _newer(iso(raw.datestamp), iso(prev.datestamp)):
                    continue
            latest[raw.local_id] = raw
        deleted = [lid for lid, raw in latest.items() if raw.deleted]
        full = self._state(deleted) if deleted else {}
        # the skip-by-date check needs only (datestamp, status): a light query; an unflushed
        # write of this batch is the newest state of its record
        stamps = self.store.db.datestamps(
            self.source.name, [i for i in latest if i not in self._writes]
        )
        for lid in latest:
            if lid in self._writes:
                w = self._writes[lid]
                stamps[lid] = (w.source_datestamp, w.status)
        versioned = [lid for lid, raw in latest.items() if raw.version is not None]
        held_versions = read_versions(self.store.db.conn, self.source.name, versioned)
        held_versions.update((i, self._versions[i]) for i in versioned if i in self._versions)
        skipped = 0
        for local_id, raw in latest.items():
            if raw.deleted:
                # the tag of the deletion is noted, so that a source that goes on listing the
                # deleted record with that tag need not deliver it again
                prior = full.get(local_id)
                if prior is not None and prior.status == "active":
                    self._note_version(raw, local_id)
                    self._put(self._write(raw, local_id, "withdrawn", prior, None, ()))
                    self.job.count(Outcome.WITHDRAWN)
                else:
                    if prior is None or prior.status == "withdrawn":
                        self._note_version(raw, local_id, alone=True)
                    skipped += 1
                continue
            known = stamps.get(local_id)
            if raw.version is not None:  # a version tag decides, not the dates
                held = (
                    known is not None
                    and known[1] != "withdrawn"
                    and held_versions.get(local_id) == raw.version
                )
            else:
                held = known is not None and _held(raw.datestamp, *known)
            if held and not self.force:
                self._see(local_id)
                skipped += 1
                continue
            if raw.payload_omitted:  # cannot happen (the same rule, on the same or older state)
                log.warning("%s: listed without its payload but not up to date", local_id)
                self._see(local_id)
                skipped += 1
                continue
            todo.append(raw)
        if skipped:
            self.job.count(Outcome.SKIPPED, skipped)
        return todo

    # -- stage 2: after mapping and validation ----------------------------------------------
    def apply(self, processed: Sequence[Processed]) -> None:
        ids: list[str] = []
        for p in processed:
            if p.failure and not p.raw.is_collection:
                ids.append(p.raw.local_id)
            ids.extend(c.dataset.local_id for c in p.checked)
        states = self._state(ids)
        for p in processed:
            if p.failure:
                self._failed(p, states.get(p.raw.local_id))
                continue
            for c in p.checked:
                lid = c.dataset.local_id
                self._decide(p, c, self._writes.get(lid) or states.get(lid))

    def _failed(self, p: Processed, prior: RecordRow | RecordWrite | None) -> None:
        raw = p.raw
        self._dead_letter(p, raw.local_id, p.failure, iso(raw.datestamp))
        if raw.is_collection:
            self.unmappable_collections += 1
            self.job.count(Outcome.ERRORED)
            self._errors(raw.local_id, p.failure)
            return
        self.job.count(Outcome.REJECTED)
        self._errors(raw.local_id, p.failure)
        if prior is None or prior.status == "rejected":
            self._note_version(raw, raw.local_id)
            self._put(self._write(raw, raw.local_id, "rejected", prior, None, p.failure, p))
        else:
            self._see(raw.local_id)  # keeps its last good (or withdrawn) state

    def _decide(self, p: Processed, c: Checked, prior: RecordRow | RecordWrite | None) -> None:
        raw = p.raw
        ds = c.dataset
        local_id = ds.local_id
        if (
            prior is not None
            and not self.force
            and raw.version is None  # versioned records were decided by the prefilter
            and _held(ds.datestamp, prior.source_datestamp, prior.status)
        ):
            self._see(local_id)
            self.job.count(Outcome.SKIPPED)
            return
        if c.verdict is Verdict.REJECT:  # the source's policy on its findings (processing)
            self.job.count(Outcome.REJECTED)
            self._errors(local_id, c.findings)
            self._dead_letter(p, local_id, c.findings, iso(ds.datestamp))
            if prior is None or prior.status == "rejected":
                self._note_version(raw, local_id)
                self._put(self._write(raw, local_id, "rejected", prior, None, c.findings, p))
            else:
                self._see(local_id)
            return
        if c.flagged:
            self.job.count(Outcome.FLAGGED)
            self._errors(local_id, c.findings)  # stored flagged, and the job lists the errors
        if (
            prior is not None
            and prior.status == "active"
            and prior.content_hash == ds.content_hash
            and bool(prior.flagged) == c.flagged  # a flag raised or cleared is written
        ):
            self._see(local_id)
            self.job.count(Outcome.UNCHANGED)
            self._note_version(raw, local_id, alone=True)
            return
        outcome = Outcome.ADDED if prior is None or prior.status == "rejected" else Outcome.UPDATED
        self._note_version(raw, local_id)
        self._put(self._write(raw, local_id, "active", prior, c, c.findings, p))
        self.job.count(outcome)

    # -- withdrawal and flushing ------------------------------------------------------------
    def withdraw(self, local_ids: Sequence[str]) -> None:
        rows = self.store.records(self.source.name, local_ids)
        # absent, not deleted: a version tag held for the record is blanked, so that it is
        # not taken for the tag of a deletion (read_deleted_versions) if the record comes back
        tagged = read_versions(self.store.db.conn, self.source.name, list(rows))
        ts = now_iso()
        for local_id in local_ids:
            row = rows.get(local_id)
            if row is None or row.status != "active":
                continue
            if local_id in tagged:
                self._versions[local_id] = ""
            self._put(
                RecordWrite(
                    source=row.source,
                    local_id=row.local_id,
                    record_iri=row.record_iri,
                    dataset_iri=row.dataset_iri,
                    status="withdrawn",
                    content_hash=row.content_hash,
                    first_seen=row.first_seen,
                    modified=ts,
                    source_datestamp=row.source_datestamp,
                    job_id=self.job.id,
                    format=row.format,
                    payload_sha=row.payload_sha,
                    url=row.url,
                    themes=row.themes,
                    ntriples=b"",
                    catalog_ntriples=b"",
                    findings=row.findings,
                    existed=True,
                    modified_at_commit=True,
                )
            )
            self.job.count(Outcome.WITHDRAWN)

    def flush(self) -> None:
        writes = list(self._writes.values())
        needed = {w.payload_sha for w in writes} | {d.payload_sha for d in self._dead}
        payloads = {k: v for k, v in self._payloads.items() if k in needed}
        self.store.write(
            self.job,
            writes,
            seen=sorted(self._seen),
            payloads=payloads,
            dead_letters=self._dead,
            versions=self._versions,
        )
        self._versions = {}
        self._dead = []
        self._writes.clear()
        self._seen.clear()
        self._payloads.clear()
