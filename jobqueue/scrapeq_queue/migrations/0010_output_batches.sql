-- 0010: object-storage output of ScrapeJobs (docs/scrapejob.md, "spec.output";
-- docs/architecture.md, record 12). One row per ScrapeJob with spec.output holds its settings
-- and progress; its finished rows are assigned to numbered batches here first, the batch is
-- committed, then uploaded under a key made of its number, then marked uploaded together with
-- clearing `undelivered` on its rows. A crash between the steps uploads the same batch to the
-- same key again. Rows of such a job are inserted undelivered (sql/output_rows.sql).

CREATE TABLE scrapeq_outputs (
    owner_uid TEXT PRIMARY KEY,
    owner_namespace TEXT NOT NULL,
    owner_name TEXT NOT NULL,
    format TEXT NOT NULL CHECK (format IN ('jsonl', 'csv')),
    batch_rows INTEGER NOT NULL CHECK (batch_rows BETWEEN 1 AND 100000),
    batch_seconds DOUBLE PRECISION NOT NULL CHECK (batch_seconds > 0 AND batch_seconds <= 3600),
    key_prefix TEXT NOT NULL CHECK (length(key_prefix) <= 1024),
    changes_only BOOLEAN NOT NULL DEFAULT false,
    batches_cut INTEGER NOT NULL DEFAULT 0 CHECK (batches_cut >= 0),
    job_ended_at TIMESTAMPTZ,
    manifest_key TEXT,
    finished_at TIMESTAMPTZ,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    failures INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    last_error TEXT CHECK (length(last_error) <= 1000),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The uploader's round reads only outputs without a manifest yet.
CREATE INDEX scrapeq_outputs_active ON scrapeq_outputs (next_attempt_at)
    WHERE finished_at IS NULL;

CREATE TABLE scrapeq_output_batches (
    owner_uid TEXT NOT NULL REFERENCES scrapeq_outputs (owner_uid) ON DELETE CASCADE,
    sequence INTEGER NOT NULL CHECK (sequence >= 1),
    row_ids BIGINT[] NOT NULL,
    state TEXT NOT NULL DEFAULT 'cut' CHECK (state IN ('cut', 'uploaded')),
    object_key TEXT,
    lines INTEGER CHECK (lines >= 0),
    skipped INTEGER CHECK (skipped >= 0),
    bytes BIGINT CHECK (bytes >= 0),
    sha256 TEXT CHECK (length(sha256) = 64),
    counts JSONB,
    cut_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    uploaded_at TIMESTAMPTZ,
    PRIMARY KEY (owner_uid, sequence),
    CHECK (state = 'cut' OR (object_key IS NOT NULL AND sha256 IS NOT NULL))
);

-- A batch cut but not yet uploaded holds its rows: the next cut skips them.
CREATE INDEX scrapeq_output_batches_open ON scrapeq_output_batches (owner_uid)
    WHERE state = 'cut';

-- The rows an output still waits for, per ScrapeJob.
CREATE INDEX scrapeq_jobs_undelivered_idx ON scraping_jobs (owner_uid, id)
    WHERE undelivered AND owner_uid IS NOT NULL;

COMMENT ON TABLE scrapeq_outputs IS
    'Object-storage output of a ScrapeJob (spec.output): its settings, how many batches were cut, and its manifest once written.';
COMMENT ON COLUMN scrapeq_outputs.key_prefix IS 'Every object key of this output starts with it: <prefix>/<namespace>/<name>/<uid>.';
COMMENT ON COLUMN scrapeq_outputs.changes_only IS 'Rows whose result says "changed": false are counted but not written.';
COMMENT ON COLUMN scrapeq_outputs.batches_cut IS 'The number of the last batch cut; the next one is batches_cut + 1.';
COMMENT ON COLUMN scrapeq_outputs.job_ended_at IS 'When the ScrapeJob ended (Succeeded, Failed, or deleted): the last batch and the manifest follow.';
COMMENT ON COLUMN scrapeq_outputs.finished_at IS 'When the manifest was uploaded; nothing more is written.';
COMMENT ON COLUMN scrapeq_outputs.next_attempt_at IS 'When the uploader looks at this output again after a failed upload.';
COMMENT ON COLUMN scrapeq_outputs.failures IS 'Failed uploads in a row; 0 after a success.';
COMMENT ON TABLE scrapeq_output_batches IS
    'A numbered batch of finished rows of one output: cut (rows assigned) until its object is uploaded.';
COMMENT ON COLUMN scrapeq_output_batches.row_ids IS 'The rows in this batch; each finished row of the output is in exactly one batch.';
COMMENT ON COLUMN scrapeq_output_batches.lines IS 'Rows written to the object (row_ids minus the ones changesOnly skipped).';
COMMENT ON COLUMN scrapeq_output_batches.counts IS 'Rows of the batch by state: {"completed": n, "failed": n, "cancelled": n}.';

\ir ../sql/output_rows.sql
