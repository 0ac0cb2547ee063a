"""The tables and indexes of the state database (``state.sqlite3``) as the store was before
its schema carried a version: :data:`BASELINE`, version 1 of :mod:`aggregator.store.migrations`.

This text is frozen: it is what ``main`` at commit 9d4bea6 created (every store made until
then has its tables, or older shapes of them that migration 1 brings to it). A change of the
schema is a new migration in :mod:`aggregator.store.migrations`, never an edit here; a new
store is made by running every migration from an empty database, so new and upgraded stores
cannot differ.

What each table is for: :mod:`aggregator.store.state` (records, payloads, the journal),
:mod:`aggregator.store.journal` (jobs, job errors, checkpoints) and
:mod:`aggregator.jobs.deadletter` (rejections). The indexes serve the keyset paging of the
OAI-PMH provider and the catalogue (``records_modified``, ``record_sets_page``, with
``set_counts`` for whole-set sizes), the skip-by-date look-up of a re-harvest
(``records_stamps``, covering) and the journal replay (the ``journal`` table;
``records_journal`` for the marks of stores made before it, dropped by migration 2).
"""

BASELINE = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    local_id TEXT NOT NULL,
    record_iri TEXT NOT NULL UNIQUE,
    dataset_iri TEXT,
    status TEXT NOT NULL,
    content_hash TEXT,
    first_seen TEXT NOT NULL,
    modified TEXT NOT NULL,
    source_datestamp TEXT,
    job_id INTEGER,
    seen_job INTEGER,
    format TEXT,
    payload_sha TEXT,
    url TEXT,
    themes TEXT NOT NULL DEFAULT '',
    ntriples BLOB,
    catalog_ntriples BLOB,
    findings TEXT NOT NULL DEFAULT '[]',
    pending INTEGER NOT NULL DEFAULT 0,
    UNIQUE (source, local_id)
);
CREATE INDEX IF NOT EXISTS records_modified ON records (modified, id);
-- covers the skip-by-date lookup of every harvested record: rows carry ~10 KB graph blobs
CREATE INDEX IF NOT EXISTS records_stamps ON records (source, local_id, source_datestamp, status);
CREATE INDEX IF NOT EXISTS records_source_status ON records (source, status);
-- the journal: record id -> the generation of its write, while the graphs may not hold it yet
-- (a small table of its own: clearing a mark in the records row rewrote the row's graph blobs)
CREATE TABLE IF NOT EXISTS journal (
    record_id INTEGER PRIMARY KEY,
    generation INTEGER NOT NULL
);
-- rows a store made before the journal table marked pending (records.pending = generation)
CREATE INDEX IF NOT EXISTS records_journal ON records (id) WHERE pending != 0;
CREATE INDEX IF NOT EXISTS records_dataset ON records (dataset_iri);
CREATE INDEX IF NOT EXISTS records_iso19139 ON records (modified, id)
    WHERE format = 'iso19139' AND status != 'rejected';
CREATE TABLE IF NOT EXISTS record_sets (
    record_id INTEGER NOT NULL,
    set_spec TEXT NOT NULL,
    modified TEXT NOT NULL,
    PRIMARY KEY (record_id, set_spec)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS record_sets_page ON record_sets (set_spec, modified, record_id);
-- rows of record_sets per set, kept by SetIndex in the same transactions: completeListSize of a
-- whole set without counting it on every first page (docs/benchmarks.md#serving)
CREATE TABLE IF NOT EXISTS set_counts (
    set_spec TEXT PRIMARY KEY,
    n INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rejections (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    local_id TEXT NOT NULL,
    job_id INTEGER NOT NULL,
    stage TEXT NOT NULL,
    payload_sha TEXT NOT NULL,
    media_type TEXT NOT NULL,
    format TEXT NOT NULL,
    url TEXT,
    datestamp TEXT,
    is_collection INTEGER NOT NULL,
    findings TEXT NOT NULL,
    created TEXT NOT NULL,
    superseded_by INTEGER
);
CREATE INDEX IF NOT EXISTS rejections_open ON rejections (source, id) WHERE superseded_by IS NULL;
CREATE INDEX IF NOT EXISTS rejections_job ON rejections (job_id, id);
CREATE TABLE IF NOT EXISTS payloads (
    sha256 TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    started TEXT NOT NULL,
    ended TEXT,
    heartbeat TEXT NOT NULL,
    status TEXT NOT NULL,
    full INTEGER NOT NULL,
    counters TEXT NOT NULL DEFAULT '{}',
    listing TEXT NOT NULL DEFAULT '{}',
    message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_source ON jobs (source, id);
CREATE TABLE IF NOT EXISTS job_errors (
    job_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    local_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    severity TEXT NOT NULL,
    rule TEXT NOT NULL,
    message TEXT NOT NULL,
    location TEXT,
    PRIMARY KEY (job_id, seq)
);
-- the version tag a source gave a record (RawRecord.version; META-SHARE: the LR checksum of
-- the node's inventory), written in the transaction of the batch that decided the record
CREATE TABLE IF NOT EXISTS source_versions (
    source TEXT NOT NULL,
    local_id TEXT NOT NULL,
    version TEXT NOT NULL,
    PRIMARY KEY (source, local_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
    source TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    job_id INTEGER NOT NULL,
    updated TEXT NOT NULL
);
"""
