-- 0003: per-host politeness, enforced by the claim for the whole cluster.
--
-- Every row carries its host key (the registrable domain that producers in Python compute with
-- the public-suffix list; rows inserted by plain SQL without one get their URL's host name).
-- scrapeq_hosts holds each host's state: requests in flight, the earliest time the next one
-- may start, a pause (Retry-After, repeated server errors) and robots.txt's Crawl-delay.
-- scrapeq_host_queues says, per queue, which hosts may have due pending rows and since when:
-- the claim walks it instead of the whole backlog, so one host holding most of the rows cannot
-- block the others (no head-of-line blocking).

ALTER TABLE scraping_jobs ADD COLUMN host_key TEXT;

-- The host name of a URL, lower-cased ('' when it has none): the key of rows whose producer
-- did not give one (a classic application's plain INSERT).
CREATE FUNCTION scrapeq_url_host(url TEXT) RETURNS TEXT
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(lower(substring(btrim(url)
        FROM '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?(\[[^]/?#]*\]|[^:/?#]*)')), '')
$$;

-- A row's politeness limits from its payload, never failing: a value of the wrong type counts
-- as absent (validate_payload fails such rows anyway), one out of range is clamped.
CREATE FUNCTION scrapeq_payload_max_per_host(payload JSONB) RETURNS INTEGER
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(payload->'politeness'->'maxConcurrentPerHost') = 'number'
        THEN least(greatest((payload->'politeness'->>'maxConcurrentPerHost')::numeric, 1),
                   1000)::integer END
$$;

CREATE FUNCTION scrapeq_payload_delay_seconds(payload JSONB) RETURNS DOUBLE PRECISION
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(payload->'politeness'->'delaySeconds') = 'number'
        THEN least(greatest((payload->'politeness'->>'delaySeconds')::numeric, 0),
                   3600)::double precision END
$$;

CREATE TABLE scrapeq_hosts (
    host_key TEXT PRIMARY KEY,
    -- Claimed rows of this host not finished yet (every statement that finishes one gives its
    -- slot back in the same statement).
    in_flight INTEGER NOT NULL DEFAULT 0,
    -- The concurrency limit and delay of the latest claim (the row's politeness or the pool's
    -- default): the claim reads them before it sees the host's next row.
    max_in_flight INTEGER,
    delay_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
    -- robots.txt's Crawl-delay, raises the delay of every claim.
    crawl_delay_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
    -- No claim hands out a row of this host before this time (delay, pause).
    next_allowed_at TIMESTAMPTZ NOT NULL DEFAULT '1970-01-01 00:00:00+00',
    -- The latest pause the site asked for (429/503 Retry-After) or earned (repeated 5xx).
    paused_until TIMESTAMPTZ,
    pause_reason TEXT,
    -- Server errors (5xx, 429) in a row; a completion resets it.
    server_errors INTEGER NOT NULL DEFAULT 0,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT scrapeq_hosts_in_flight_valid CHECK (in_flight >= 0),
    CONSTRAINT scrapeq_hosts_max_in_flight_valid CHECK (max_in_flight IS NULL OR max_in_flight > 0),
    CONSTRAINT scrapeq_hosts_delays_valid CHECK (delay_seconds >= 0 AND crawl_delay_seconds >= 0),
    CONSTRAINT scrapeq_hosts_server_errors_valid CHECK (server_errors >= 0)
);

COMMENT ON TABLE scrapeq_hosts IS
    'scrapeq: per-host politeness state read and written by the claim: in flight, next allowed start, pause.';

ALTER TABLE scrapeq_hosts SET (autovacuum_vacuum_scale_factor = 0.01, fillfactor = 70);

CREATE TABLE scrapeq_host_queues (
    queue TEXT NOT NULL,
    host_key TEXT NOT NULL,
    -- From when this host may have due pending rows in this queue; NULL: none pending.
    -- Claims serve the hosts in work_at order (a host just served goes to the back).
    work_at TIMESTAMPTZ,
    -- Bumped by every producer or retry that adds pending rows, so that a claim that found
    -- nothing due does not clear work_at over rows it could not see yet.
    generation BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, host_key)
);

COMMENT ON TABLE scrapeq_host_queues IS
    'scrapeq: which hosts may have due pending rows in each queue, in the order claims serve them.';

ALTER TABLE scrapeq_host_queues SET (autovacuum_vacuum_scale_factor = 0.01, fillfactor = 70);

CREATE INDEX scrapeq_host_queues_ready_idx ON scrapeq_host_queues (queue, work_at)
    WHERE work_at IS NOT NULL;

-- Claims: one host's due pending rows of one queue in claim order.
CREATE INDEX scrapeq_jobs_host_claim_idx ON scraping_jobs (host_key, queue, priority DESC, run_at, id)
    WHERE status = 'pending';

-- Rows whose producer gave no host key get their URL's host name.
CREATE FUNCTION scrapeq_fill_host_key() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.host_key := scrapeq_url_host(NEW.url_to_scrape);
    RETURN NEW;
END;
$$;

CREATE TRIGGER scrapeq_jobs_fill_host_key
    BEFORE INSERT OR UPDATE OF status ON scraping_jobs
    FOR EACH ROW WHEN (NEW.host_key IS NULL) EXECUTE FUNCTION scrapeq_fill_host_key();

-- Makes hosts claimable in queues from a given time (parallel arrays, one entry per row): creates
-- their scrapeq_hosts rows, takes a producer's maxConcurrentPerHost (`limits`, NULL: none) as the
-- host's limit before its first claim, and moves work_at back to the earliest run_at, bumping
-- the generation so that a claim running at the same time cannot clear it (JOB_CLAIM).
CREATE FUNCTION scrapeq_hosts_ready(queues TEXT[], host_keys TEXT[], work_ats TIMESTAMPTZ[],
                                    limits INTEGER[]) RETURNS void
    LANGUAGE sql AS $$
    INSERT INTO scrapeq_hosts AS hosts (host_key, max_in_flight)
    SELECT given.host_key, max(given.max_in_flight)
    FROM unnest(host_keys, limits) AS given(host_key, max_in_flight)
    GROUP BY given.host_key ORDER BY given.host_key
    ON CONFLICT (host_key) DO UPDATE SET max_in_flight = excluded.max_in_flight
        WHERE excluded.max_in_flight IS NOT NULL
          AND hosts.max_in_flight IS DISTINCT FROM excluded.max_in_flight;
    INSERT INTO scrapeq_host_queues AS known (queue, host_key, work_at)
    SELECT given.queue, given.host_key, min(given.work_at)
    FROM unnest(queues, host_keys, work_ats) AS given(queue, host_key, work_at)
    GROUP BY given.queue, given.host_key ORDER BY given.queue, given.host_key
    ON CONFLICT (queue, host_key) DO UPDATE
        SET work_at = least(known.work_at, excluded.work_at), generation = known.generation + 1;
$$;

-- New pending rows make their hosts claimable: one call per INSERT statement, whoever runs it.
CREATE FUNCTION scrapeq_hosts_after_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM scrapeq_hosts_ready(array_agg(queue), array_agg(host_key), array_agg(run_at),
                                array_agg(scrapeq_payload_max_per_host(payload)))
    FROM new_rows WHERE status = 'pending';
    RETURN NULL;
END;
$$;

CREATE TRIGGER scrapeq_jobs_hosts_on_insert
    AFTER INSERT ON scraping_jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION scrapeq_hosts_after_insert();

-- A row back to pending (retry, release, rescue, a retried dead job, or an application's own
-- UPDATE) makes its host claimable again. A claim (pending -> processing) does not fire it.
CREATE FUNCTION scrapeq_hosts_after_pending() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM scrapeq_hosts_ready(ARRAY[NEW.queue], ARRAY[NEW.host_key], ARRAY[NEW.run_at],
                                ARRAY[NULL::integer]);
    RETURN NULL;
END;
$$;

CREATE TRIGGER scrapeq_jobs_hosts_on_pending
    AFTER UPDATE OF status ON scraping_jobs
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status <> 'pending')
    EXECUTE FUNCTION scrapeq_hosts_after_pending();

-- Rows queued before this migration: give them their host and make their hosts claimable.
UPDATE scraping_jobs SET host_key = scrapeq_url_host(url_to_scrape)
WHERE status IN ('pending', 'processing') AND host_key IS NULL;

SELECT scrapeq_hosts_ready(array_agg(queue), array_agg(host_key), array_agg(run_at),
                           array_agg(NULL::integer))
FROM scraping_jobs WHERE status IN ('pending', 'processing') AND host_key IS NOT NULL;
