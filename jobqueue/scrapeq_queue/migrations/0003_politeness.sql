-- 0003: per-host politeness enforced by the claim for the whole cluster, and the cluster's
-- shared copy of each site's robots.txt. docs/queue.md, "Per-host politeness" and "The claim",
-- explains every object made here; the comments below (COMMENT ON) say what each holds.

ALTER TABLE scraping_jobs ADD COLUMN host_key TEXT;
COMMENT ON COLUMN scraping_jobs.host_key IS
    'scrapeq: the row''s site for per-host politeness: its URL''s registrable domain (Python producers), else its host name (trigger scrapeq_jobs_fill_host_key).';

-- The host name of a URL, lower-cased ('' when it has none): the key of rows whose producer
-- did not give one.
CREATE FUNCTION scrapeq_url_host(url TEXT) RETURNS TEXT
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(lower(substring(btrim(url)
        FROM '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?(\[[^]/?#]*\]|[^:/?#]*)')), '')
$$;

\ir ../sql/payload_limits.sql

CREATE TABLE scrapeq_hosts (
    host_key TEXT PRIMARY KEY,
    max_in_flight INTEGER,
    delay_seconds DOUBLE PRECISION,
    crawl_delay_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
    next_allowed_at TIMESTAMPTZ NOT NULL DEFAULT '1970-01-01 00:00:00+00',
    last_claimed_id BIGINT,
    last_finished_at TIMESTAMPTZ NOT NULL DEFAULT '1970-01-01 00:00:00+00',
    paused_until TIMESTAMPTZ,
    pause_reason TEXT,
    server_errors INTEGER NOT NULL DEFAULT 0,
    last_server_error_at TIMESTAMPTZ,
    touched_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT scrapeq_hosts_max_in_flight_valid CHECK (max_in_flight IS NULL OR max_in_flight > 0),
    CONSTRAINT scrapeq_hosts_delays_valid CHECK (
        (delay_seconds IS NULL OR delay_seconds >= 0) AND crawl_delay_seconds >= 0),
    CONSTRAINT scrapeq_hosts_server_errors_valid CHECK (server_errors >= 0)
);

COMMENT ON TABLE scrapeq_hosts IS
    'scrapeq: each host''s politeness state: limits, next allowed start, pause, a delayed host''s latest attempt. Its slots in use are its rows in flight (scraping_jobs.status = processing), never stored.';
COMMENT ON COLUMN scrapeq_hosts.max_in_flight IS
    'The limit of requests in flight the latest producer that named one gave (payload.politeness.maxConcurrentPerHost); NULL: the claiming pool''s default. See scrapeq_host_limit.';
COMMENT ON COLUMN scrapeq_hosts.delay_seconds IS
    'The delay between requests the latest producer that named one gave (payload.politeness.delaySeconds); NULL: the claiming pool''s default. See scrapeq_host_delay.';
COMMENT ON COLUMN scrapeq_hosts.crawl_delay_seconds IS
    'robots.txt''s Crawl-delay (0: none): a floor under the delay.';
COMMENT ON COLUMN scrapeq_hosts.next_allowed_at IS
    'No claim hands out a row of this host before this time: the delay after a claim, or a pause.';
COMMENT ON COLUMN scrapeq_hosts.last_claimed_id IS
    'A delayed host''s latest attempt (a scraping_jobs id): its delay runs from when that row last changed.';
COMMENT ON COLUMN scrapeq_hosts.last_finished_at IS
    'When a delayed host''s attempt before last_claimed_id ended, as its claim saw it.';
COMMENT ON COLUMN scrapeq_hosts.paused_until IS
    'The latest pause the site asked for (429/503 Retry-After) or earned (repeated server errors).';
COMMENT ON COLUMN scrapeq_hosts.pause_reason IS
    'The retry reason that paused the host (http_429, http_5xx).';
COMMENT ON COLUMN scrapeq_hosts.server_errors IS
    'Server errors (5xx, 429) of this host less than a minute apart, counted by retries.';
COMMENT ON COLUMN scrapeq_hosts.last_server_error_at IS
    'The latest server error of this host.';
COMMENT ON COLUMN scrapeq_hosts.touched_at IS
    'When a claim last took rows of this host (written at most once a minute), or when the host was first seen: prune_idle_hosts deletes hosts idle for days.';

-- Room on each page for HOT updates: claims of a delayed host write its next allowed start,
-- and any claim writes touched_at once a minute; retries write the server-error columns.
ALTER TABLE scrapeq_hosts SET (autovacuum_vacuum_scale_factor = 0.01, fillfactor = 50);

CREATE TABLE scrapeq_host_queues (
    queue TEXT NOT NULL,
    host_key TEXT NOT NULL,
    head_priority INTEGER,
    head_run_at TIMESTAMPTZ,
    head_id BIGINT,
    generation BIGINT NOT NULL DEFAULT 0,
    -- By host first: prune_idle_hosts deletes a host's heads with it.
    PRIMARY KEY (host_key, queue)
);

COMMENT ON TABLE scrapeq_host_queues IS
    'scrapeq: each host''s head per queue (the key of its best pending row), the order in which claims visit hosts.';
COMMENT ON COLUMN scrapeq_host_queues.head_priority IS
    'With head_run_at and head_id: the claim-order key of the host''s best due pending row in this queue, or with none due of its best pending row (NULL: none pending). May be better than the real best row (cancelled, or a claim raced a producer), never worse; the next claim that visits the host corrects it.';
COMMENT ON COLUMN scrapeq_host_queues.head_run_at IS 'The run_at of the head row (see head_priority).';
COMMENT ON COLUMN scrapeq_host_queues.head_id IS
    'The id of the head row (see head_priority); the claim publishes the last one it visited as where the next claim starts (scrapeq_claim_turn_slot).';
COMMENT ON COLUMN scrapeq_host_queues.generation IS
    'Bumped by every statement that moves the head up (a producer, a retry), so that a claim that read the rows before it does not move the head past a row it could not see.';

ALTER TABLE scrapeq_host_queues SET (autovacuum_vacuum_scale_factor = 0.01, fillfactor = 70);

-- The claim's walk: a queue's heads in (priority DESC, run_at, id) order, written all
-- ascending (-priority) so that a stretch of it is one range of row comparisons.
CREATE INDEX scrapeq_host_queues_head_idx
    ON scrapeq_host_queues (queue, (-head_priority::bigint), head_run_at, head_id)
    WHERE head_id IS NOT NULL;

-- Claims: one host's pending rows of one queue in claim order.
CREATE INDEX scrapeq_jobs_host_claim_idx
    ON scraping_jobs (host_key, queue, priority DESC, run_at, id)
    WHERE status = 'pending';

-- Rows in flight by host (the claim counts them per host); the statements that look for them
-- by queue read the few in-flight rows in full.
DROP INDEX scrapeq_jobs_processing_idx;
CREATE INDEX scrapeq_jobs_processing_idx ON scraping_jobs (host_key, queue, processed_by)
    WHERE status = 'processing';

-- Rows whose producer gave no host key get their URL's host name (only such rows pay for it).
CREATE FUNCTION scrapeq_fill_host_key() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.host_key := scrapeq_url_host(NEW.url_to_scrape);
    RETURN NEW;
END;
$$;

CREATE TRIGGER scrapeq_jobs_fill_host_key
    BEFORE INSERT OR UPDATE OF host_key ON scraping_jobs
    FOR EACH ROW WHEN (NEW.host_key IS NULL) EXECUTE FUNCTION scrapeq_fill_host_key();

\ir ../sql/hosts_pending.sql

-- New pending rows make their hosts claimable: one call per INSERT statement, whoever runs it.
CREATE TRIGGER scrapeq_jobs_hosts_on_insert
    AFTER INSERT ON scraping_jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION scrapeq_hosts_after_insert();

-- A row back to pending (retry, release, rescue, a retried dead job, or an application's own
-- UPDATE), or a pending row made due sooner or more urgent by an UPDATE, moves its host's head.
CREATE TRIGGER scrapeq_jobs_hosts_on_pending
    AFTER UPDATE OF status, run_at, priority ON scraping_jobs
    FOR EACH ROW WHEN (NEW.status = 'pending'
                       AND (OLD.status <> 'pending' OR NEW.run_at < OLD.run_at
                            OR NEW.priority > OLD.priority))
    EXECUTE FUNCTION scrapeq_hosts_after_pending();

-- Where each queue's latest claim stopped, shared by every connection (scrapeq_claim_turn_slot
-- picks one by the queue's name). Any bigint: the value is a row's id, and a plain INSERT may
-- give a row any id (0, negative).
DO $turns$
BEGIN
    FOR slot IN 0..15 LOOP
        EXECUTE format('CREATE SEQUENCE scrapeq_claim_turn_%s AS BIGINT MINVALUE %s', slot,
                       -9223372036854775808);
        EXECUTE format('COMMENT ON SEQUENCE scrapeq_claim_turn_%s IS %L', slot,
                       'scrapeq: the id of the head where the latest claim of the queues of this slot stopped: where the next one starts (see scrapeq_claim).');
    END LOOP;
END;
$turns$;

\ir ../sql/host_limits.sql
\ir ../sql/claim.sql

CREATE TABLE scrapeq_robots (
    origin TEXT PRIMARY KEY,
    status INTEGER,
    body TEXT,
    problem TEXT,
    expires_at TIMESTAMPTZ NOT NULL,
    fetching_until TIMESTAMPTZ
);

COMMENT ON TABLE scrapeq_robots IS
    'scrapeq: the cluster''s copy of each origin''s robots.txt, read by every worker.';
COMMENT ON COLUMN scrapeq_robots.origin IS 'scheme://host[:port], lower-cased: robots.txt belongs to an origin.';
COMMENT ON COLUMN scrapeq_robots.status IS 'The HTTP status of the fetch; NULL when none came (timeout, network error): see problem.';
COMMENT ON COLUMN scrapeq_robots.body IS 'The file (up to its first 500 KiB), with a 2xx status.';
COMMENT ON COLUMN scrapeq_robots.problem IS 'Why the file could not be read (a timeout, a network error, a 5xx).';
COMMENT ON COLUMN scrapeq_robots.expires_at IS 'Until when this copy holds (-infinity: never read yet).';
COMMENT ON COLUMN scrapeq_robots.fetching_until IS 'A worker is fetching the file until then; the others wait for its copy.';

-- Rows queued before this migration: give them their host and make their hosts claimable.
UPDATE scraping_jobs SET host_key = scrapeq_url_host(url_to_scrape)
WHERE status IN ('pending', 'processing') AND host_key IS NULL;

SELECT scrapeq_hosts_pending(
    array_agg(queue), array_agg(host_key), array_agg(priority), array_agg(run_at),
    array_agg(id))
FROM scraping_jobs WHERE status = 'pending';
