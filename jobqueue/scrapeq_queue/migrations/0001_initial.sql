-- 0001: the scraping_jobs queue table (classic columns first), the attempts log, per-queue
-- outcome counters and the statement-level NOTIFY trigger.

CREATE TYPE scraping_job_status AS ENUM ('pending', 'processing', 'completed', 'failed', 'cancelled');

CREATE TABLE scraping_jobs (
    -- The classic columns: an application that knows only these can INSERT and read results.
    id BIGSERIAL PRIMARY KEY,
    url_to_scrape TEXT NOT NULL,
    parser_type VARCHAR(255) NOT NULL,
    payload JSONB DEFAULT '{}'::jsonb,
    status scraping_job_status NOT NULL DEFAULT 'pending',
    result JSONB,
    last_error TEXT,
    retry_count INTEGER NOT NULL DEFAULT 0,
    processed_by VARCHAR(255),
    processing_started_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- What a production queue adds.
    queue TEXT NOT NULL DEFAULT 'default',
    priority INTEGER NOT NULL DEFAULT 0,
    run_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    max_retries INTEGER NOT NULL DEFAULT 3,
    retry_backoff_seconds DOUBLE PRECISION NOT NULL DEFAULT 10,
    attempt INTEGER NOT NULL DEFAULT 0,
    lease_expires_at TIMESTAMPTZ,
    last_error_reason TEXT,
    owner_uid TEXT,
    owner_namespace TEXT,
    owner_name TEXT,
    dedup_key TEXT,
    parent_id BIGINT REFERENCES scraping_jobs (id) ON DELETE SET NULL,
    depth INTEGER NOT NULL DEFAULT 0,
    finished_at TIMESTAMPTZ,
    CONSTRAINT scrapeq_jobs_url_not_blank CHECK (length(btrim(url_to_scrape)) > 0),
    CONSTRAINT scrapeq_jobs_queue_not_blank CHECK (length(queue) BETWEEN 1 AND 100),
    CONSTRAINT scrapeq_jobs_retry_count_valid CHECK (retry_count >= 0),
    CONSTRAINT scrapeq_jobs_max_retries_valid CHECK (max_retries BETWEEN 0 AND 100),
    CONSTRAINT scrapeq_jobs_backoff_valid CHECK (retry_backoff_seconds >= 0),
    CONSTRAINT scrapeq_jobs_attempt_valid CHECK (attempt >= 0),
    CONSTRAINT scrapeq_jobs_depth_valid CHECK (depth >= 0),
    CONSTRAINT scrapeq_jobs_parent_has_depth CHECK (parent_id IS NULL OR depth > 0),
    -- A job being worked on always has a holder, a start and a lease (its attempt in flight is
    -- recorded on the row itself); no other state has a lease.
    CONSTRAINT scrapeq_jobs_processing_has_lease CHECK (
        (status = 'processing') = (lease_expires_at IS NOT NULL)
    ),
    CONSTRAINT scrapeq_jobs_processing_has_holder CHECK (
        status <> 'processing'
        OR (processed_by IS NOT NULL AND processing_started_at IS NOT NULL AND attempt > 0)
    ),
    -- Finished rows, and only those, carry finished_at.
    CONSTRAINT scrapeq_jobs_finished_at_matches_status CHECK (
        (status IN ('completed', 'failed', 'cancelled')) = (finished_at IS NOT NULL)
    ),
    CONSTRAINT scrapeq_jobs_owner_complete CHECK (
        (owner_uid IS NULL AND owner_namespace IS NULL AND owner_name IS NULL)
        OR (owner_uid IS NOT NULL AND owner_namespace IS NOT NULL AND owner_name IS NOT NULL)
    )
);

COMMENT ON TABLE scraping_jobs IS
    'scrapeq queue: one row per URL to scrape; producers INSERT, workers claim with SKIP LOCKED.';

-- Claims: due pending rows of one queue in claim order (priority DESC, run_at, id).
CREATE INDEX scrapeq_jobs_claim_idx ON scraping_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'pending';
-- Rescue of expired leases and in-flight counts per queue/worker. lease_expires_at is left out
-- on purpose so that renewing a lease touches no index (a HOT update).
CREATE INDEX scrapeq_jobs_processing_idx ON scraping_jobs (queue, processed_by)
    WHERE status = 'processing';
-- Progress per ScrapeJob.
CREATE INDEX scrapeq_jobs_owner_idx ON scraping_jobs (owner_uid, status)
    WHERE owner_uid IS NOT NULL;
-- Which owners changed since the last status sweep.
CREATE INDEX scrapeq_jobs_owner_changes_idx ON scraping_jobs (updated_at)
    WHERE owner_uid IS NOT NULL;
-- Retention: finished rows by age.
CREATE INDEX scrapeq_jobs_finished_idx ON scraping_jobs (finished_at)
    WHERE finished_at IS NOT NULL;
-- Latest failures (few rows, so this stays small).
CREATE INDEX scrapeq_jobs_failed_idx ON scraping_jobs (finished_at)
    WHERE status = 'failed';
-- Followed links of one parent.
CREATE INDEX scrapeq_jobs_parent_idx ON scraping_jobs (parent_id)
    WHERE parent_id IS NOT NULL;
-- At most one row per (owner, dedup key); rows without an owner share one dedup space.
CREATE UNIQUE INDEX scrapeq_jobs_dedup_idx ON scraping_jobs (owner_uid, dedup_key)
    NULLS NOT DISTINCT WHERE dedup_key IS NOT NULL;

-- The hot table churns (every claim and completion writes a new row version): vacuum it often.
ALTER TABLE scraping_jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    fillfactor = 90
);

-- One row per finished attempt, written by the statement that finishes it (so a claim writes
-- nothing here). The attempt in flight lives on its job row: attempt, processed_by,
-- processing_started_at.
CREATE TABLE scrapeq_attempts (
    job_id BIGINT NOT NULL REFERENCES scraping_jobs (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    worker_id VARCHAR(255) NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    outcome TEXT NOT NULL,
    reason TEXT,
    error TEXT,
    duration_seconds DOUBLE PRECISION,
    PRIMARY KEY (job_id, attempt),
    CONSTRAINT scrapeq_attempts_attempt_valid CHECK (attempt > 0),
    CONSTRAINT scrapeq_attempts_outcome_valid CHECK (
        outcome IN ('completed', 'retrying', 'failed', 'expired', 'released', 'cancelled')
    ),
    CONSTRAINT scrapeq_attempts_duration_valid CHECK (duration_seconds IS NULL OR duration_seconds >= 0)
);

COMMENT ON TABLE scrapeq_attempts IS
    'scrapeq: one row per finished attempt at a scraping_jobs row: who, when, how long, outcome, error.';

ALTER TABLE scrapeq_attempts SET (autovacuum_vacuum_scale_factor = 0.02);

-- Outcome totals per queue. Each backend writes its own shard so that concurrent completions
-- never wait on one counter row; a reader sums the shards.
CREATE TABLE scrapeq_queue_counters (
    queue TEXT NOT NULL,
    outcome scraping_job_status NOT NULL,
    shard SMALLINT NOT NULL,
    total BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, outcome, shard),
    CONSTRAINT scrapeq_queue_counters_outcome_finished CHECK (
        outcome IN ('completed', 'failed', 'cancelled')
    ),
    CONSTRAINT scrapeq_queue_counters_total_valid CHECK (total >= 0)
);

COMMENT ON TABLE scrapeq_queue_counters IS
    'scrapeq: how many jobs each queue finished per outcome, ever (sum over shards).';

-- One NOTIFY per INSERT statement, whoever runs it (the operator, scrapeq enqueue, or an outside
-- application's plain INSERT), so an idle worker wakes at once and a bulk insert wakes it once.
CREATE FUNCTION scrapeq_notify_jobs() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('scrapeq_jobs', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER scrapeq_jobs_notify_on_insert
    AFTER INSERT ON scraping_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION scrapeq_notify_jobs();
