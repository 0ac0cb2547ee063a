-- A state database as made by commit 8be0926 (2026-11-22), before schema versions (user_version 0):
-- its schema from `git show 8be0926:aggregator/store/schema.py` (pending marks of 1 and the
-- index records_pending; no set_counts, journal or source_versions tables; one open
-- rejection per failure), with a few rows written by hand in the shapes of that time.

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
CREATE INDEX IF NOT EXISTS records_pending ON records (pending) WHERE pending = 1;
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
CREATE TABLE IF NOT EXISTS checkpoints (
    source TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    job_id INTEGER NOT NULL,
    updated TEXT NOT NULL
);
INSERT INTO meta VALUES ('generation', '3');
INSERT INTO meta VALUES ('record_sets', '1');
INSERT INTO jobs VALUES (1, 'portal', '2026-11-20T10:00:00.000000Z', '2026-11-20T10:01:00.000000Z', '2026-11-20T10:01:00.000000Z', 'succeeded', 1, '{"added":2,"rejected":1}', '{}', '');
INSERT INTO jobs VALUES (2, 'portal', '2026-11-21T10:00:00.000000Z', '2026-11-21T10:01:00.000000Z', '2026-11-21T10:01:00.000000Z', 'succeeded', 1, '{"rejected":1,"updated":1}', '{}', '');
INSERT INTO payloads VALUES ('aaaa', 'application/rdf+xml', 3, X'00');
INSERT INTO payloads VALUES ('bbbb', 'application/rdf+xml', 3, X'00');
INSERT INTO payloads VALUES ('cccc', 'application/rdf+xml', 3, X'00');
INSERT INTO payloads VALUES ('dddd', 'application/rdf+xml', 3, X'00');
INSERT INTO records (id, source, local_id, record_iri, dataset_iri, status, content_hash, first_seen, modified, source_datestamp, job_id, seen_job, format, payload_sha, url, themes, findings, pending) VALUES (1, 'portal', 'a', 'http://127.0.0.1:8000/record/portal/a', 'https://data.example.org/a', 'active', 'h1', '2026-11-20T10:00:30.000000Z', '2026-11-21T10:00:30.000000Z', '2024-03-01T00:00:00Z', 2, 2, 'dcat', 'bbbb', NULL, 'http://publications.europa.eu/resource/authority/data-theme/ENVI', '[]', 1);
INSERT INTO records (id, source, local_id, record_iri, dataset_iri, status, content_hash, first_seen, modified, source_datestamp, job_id, seen_job, format, payload_sha, url, themes, findings, pending) VALUES (2, 'portal', 'b', 'http://127.0.0.1:8000/record/portal/b', 'https://data.example.org/b', 'active', 'h2', '2026-11-20T10:00:30.000000Z', '2026-11-20T10:00:30.000000Z', '2024-03-01T00:00:00Z', 1, 1, 'dcat', 'cccc', NULL, '', '[]', 0);
INSERT INTO records (id, source, local_id, record_iri, dataset_iri, status, content_hash, first_seen, modified, source_datestamp, job_id, seen_job, format, payload_sha, url, themes, findings, pending) VALUES (3, 'portal', 'c', 'http://127.0.0.1:8000/record/portal/c', NULL, 'rejected', NULL, '2026-11-20T10:00:30.000000Z', '2026-11-20T10:00:30.000000Z', NULL, 1, 1, 'dcat', 'dddd', NULL, '', '[]', 0);
INSERT INTO record_sets VALUES (1, 'source', '2026-11-21T10:00:30.000000Z');
INSERT INTO record_sets VALUES (1, 'source:portal', '2026-11-21T10:00:30.000000Z');
INSERT INTO record_sets VALUES (1, 'theme', '2026-11-21T10:00:30.000000Z');
INSERT INTO record_sets VALUES (1, 'theme:ENVI', '2026-11-21T10:00:30.000000Z');
INSERT INTO record_sets VALUES (2, 'source', '2026-11-20T10:00:30.000000Z');
INSERT INTO record_sets VALUES (2, 'source:portal', '2026-11-20T10:00:30.000000Z');
INSERT INTO rejections VALUES (1, 'portal', 'c', 1, 'shacl', 'dddd', 'application/rdf+xml', 'dcat', NULL, NULL, 0, '[]', '2026-11-20T10:00:30.000000Z', NULL);
INSERT INTO rejections VALUES (2, 'portal', 'c', 2, 'shacl', 'dddd', 'application/rdf+xml', 'dcat', NULL, NULL, 0, '[]', '2026-11-21T10:00:30.000000Z', NULL);
INSERT INTO job_errors VALUES (1, 1, 'c', 'shacl', 'violation', 'r', 'm', NULL);
INSERT INTO job_errors VALUES (2, 1, 'c', 'shacl', 'violation', 'r', 'm', NULL);
