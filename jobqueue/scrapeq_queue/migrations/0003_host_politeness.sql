-- 0003: per-host politeness, enforced by the claim for the whole cluster.
--
-- Every row carries its host key: the registrable domain that producers in Python compute with
-- the public-suffix list, or, for rows inserted by plain SQL without one (a classic
-- application's INSERT of url_to_scrape and parser_type), their URL's host name.
-- scrapeq_hosts holds each host's state: the attempts in flight, the earliest time the next
-- one may start, a pause (Retry-After, repeated server errors), the limits producers gave and
-- robots.txt's Crawl-delay.
-- scrapeq_host_queues holds, per queue and host, the claim-order key (priority, run_at, id) of
-- the host's best due pending row (or, with none due, of its best pending row), its "head". The claim walks the heads in claim order and takes
-- each ready host's best rows: priority keeps its meaning across hosts, and a host holding
-- most of the rows cannot block the others (no head-of-line blocking). Heads are written once
-- per claim per host, once per producing statement per host, and once per row that goes back
-- to pending; no trigger fires for a claim or a completion.

ALTER TABLE scraping_jobs ADD COLUMN host_key TEXT;

-- The host name of a URL, lower-cased ('' when it has none): the key of rows whose producer
-- did not give one.
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
    -- The attempts the claims of this host handed out that may still be running, as
    -- (slot_ids[i], slot_attempts[i]). Only claims write them: an attempt is over once its row
    -- has moved on (finished, retried, released, rescued, cancelled: status no longer
    -- `processing` at that attempt), and the next claim of the host drops it. So finishing a
    -- row never writes this table, and a claim that read the rows before another claim
    -- committed still counts that claim's attempts (their rows show an older attempt).
    slot_ids BIGINT[] NOT NULL DEFAULT '{}',
    slot_attempts INTEGER[] NOT NULL DEFAULT '{}',
    -- When the latest dropped attempt ended: a host with a delay starts its next request no
    -- sooner than that plus the delay.
    last_finished_at TIMESTAMPTZ NOT NULL DEFAULT '1970-01-01 00:00:00+00',
    -- The limits the latest producer that named them gave (payload.politeness); NULL: the
    -- claiming worker pool's defaults.
    max_in_flight INTEGER,
    delay_seconds DOUBLE PRECISION,
    -- robots.txt's Crawl-delay: a floor under the delay.
    crawl_delay_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
    -- No claim hands out a row of this host before this time (the delay after a claim, a pause).
    next_allowed_at TIMESTAMPTZ NOT NULL DEFAULT '1970-01-01 00:00:00+00',
    -- The latest pause the site asked for (429/503 Retry-After) or earned (repeated 5xx).
    paused_until TIMESTAMPTZ,
    pause_reason TEXT,
    -- Server errors (5xx, 429) of this host less than a minute apart, and the latest one.
    server_errors INTEGER NOT NULL DEFAULT 0,
    last_server_error_at TIMESTAMPTZ,
    CONSTRAINT scrapeq_hosts_slots_valid CHECK (
        cardinality(slot_ids) = cardinality(slot_attempts)),
    CONSTRAINT scrapeq_hosts_max_in_flight_valid CHECK (max_in_flight IS NULL OR max_in_flight > 0),
    CONSTRAINT scrapeq_hosts_delays_valid CHECK (
        (delay_seconds IS NULL OR delay_seconds >= 0) AND crawl_delay_seconds >= 0),
    CONSTRAINT scrapeq_hosts_server_errors_valid CHECK (server_errors >= 0)
);

COMMENT ON TABLE scrapeq_hosts IS
    'scrapeq: per-host politeness state read and written by the claim: in flight, next allowed start, pause.';

-- Room on each page for the claim's in-place (HOT) updates of the slots and next_allowed_at.
ALTER TABLE scrapeq_hosts SET (autovacuum_vacuum_scale_factor = 0.01, fillfactor = 50);

CREATE TABLE scrapeq_host_queues (
    queue TEXT NOT NULL,
    host_key TEXT NOT NULL,
    -- The claim-order key of the host's best due pending row in this queue, or with none due of
    -- its best pending row (NULL: none pending): a row that is not due never hides one that
    -- is. A head
    -- may be stale in one direction only: better than the host's real best row (that row was
    -- cancelled, or a claim raced a producer); the next claim that visits the host corrects it.
    head_priority INTEGER,
    head_run_at TIMESTAMPTZ,
    head_id BIGINT,
    -- Bumped by every statement that moves the head up (a producer, a retry), so that a claim
    -- that read the rows before it does not move the head past a row it could not see.
    generation BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, host_key)
);

COMMENT ON TABLE scrapeq_host_queues IS
    'scrapeq: each host''s best pending row per queue, the order in which claims visit hosts.';

ALTER TABLE scrapeq_host_queues SET (autovacuum_vacuum_scale_factor = 0.01, fillfactor = 70);

CREATE INDEX scrapeq_host_queues_head_idx
    ON scrapeq_host_queues (queue, head_priority DESC, head_run_at, head_id)
    WHERE head_id IS NOT NULL;

-- Claims: one host's pending rows of one queue in claim order.
CREATE INDEX scrapeq_jobs_host_claim_idx
    ON scraping_jobs (host_key, queue, priority DESC, run_at, id)
    WHERE status = 'pending';

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

-- Pending rows (parallel arrays, one entry per row) make their hosts known and claimable:
-- creates the hosts' state, takes the limits of rows that name them (the last such row of the
-- call wins), and moves each (queue, host) head up to the best of these rows (due rows first).
CREATE FUNCTION scrapeq_hosts_pending(queues TEXT[], host_keys TEXT[], priorities INTEGER[],
                                      run_ats TIMESTAMPTZ[], ids BIGINT[], limits INTEGER[],
                                      delays DOUBLE PRECISION[]) RETURNS void
    LANGUAGE sql AS $$
    INSERT INTO scrapeq_hosts (host_key)
    SELECT DISTINCT given.host_key FROM unnest(host_keys) AS given(host_key)
    ORDER BY given.host_key
    ON CONFLICT (host_key) DO NOTHING;
    UPDATE scrapeq_hosts AS hosts
    SET max_in_flight = coalesce(named.max_in_flight, hosts.max_in_flight),
        delay_seconds = coalesce(named.delay_seconds, hosts.delay_seconds)
    FROM (
        SELECT given.host_key,
               (array_agg(given.max_in_flight ORDER BY given.id DESC)
                   FILTER (WHERE given.max_in_flight IS NOT NULL))[1] AS max_in_flight,
               (array_agg(given.delay_seconds ORDER BY given.id DESC)
                   FILTER (WHERE given.delay_seconds IS NOT NULL))[1] AS delay_seconds
        FROM unnest(host_keys, ids, limits, delays)
             AS given(host_key, id, max_in_flight, delay_seconds)
        WHERE given.max_in_flight IS NOT NULL OR given.delay_seconds IS NOT NULL
        GROUP BY given.host_key
    ) AS named
    WHERE hosts.host_key = named.host_key
      AND (hosts.max_in_flight IS DISTINCT FROM coalesce(named.max_in_flight, hosts.max_in_flight)
           OR hosts.delay_seconds IS DISTINCT FROM coalesce(named.delay_seconds,
                                                             hosts.delay_seconds));
    INSERT INTO scrapeq_host_queues AS known (queue, host_key, head_priority, head_run_at,
                                              head_id)
    SELECT DISTINCT ON (given.queue, given.host_key)
           given.queue, given.host_key, given.priority, given.run_at, given.id
    FROM unnest(queues, host_keys, priorities, run_ats, ids)
         AS given(queue, host_key, priority, run_at, id)
    ORDER BY given.queue, given.host_key, given.run_at > now(), given.priority DESC,
             given.run_at, given.id
    ON CONFLICT (queue, host_key) DO UPDATE
    -- The better of the two heads: due before not due, then the claim order.
    SET (head_priority, head_run_at, head_id) = (
            SELECT head.priority, head.run_at, head.id
            FROM (VALUES (known.head_priority, known.head_run_at, known.head_id),
                         (excluded.head_priority, excluded.head_run_at, excluded.head_id))
                 AS head(priority, run_at, id)
            ORDER BY head.id IS NULL, head.run_at > now(), head.priority DESC, head.run_at,
                     head.id
            LIMIT 1),
        generation = known.generation + 1;
$$;

-- New pending rows make their hosts claimable: one call per INSERT statement, whoever runs it.
CREATE FUNCTION scrapeq_hosts_after_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM scrapeq_hosts_pending(
        array_agg(queue), array_agg(host_key), array_agg(priority), array_agg(run_at),
        array_agg(id), array_agg(scrapeq_payload_max_per_host(payload)),
        array_agg(scrapeq_payload_delay_seconds(payload)))
    FROM new_rows WHERE status = 'pending';
    RETURN NULL;
END;
$$;

CREATE TRIGGER scrapeq_jobs_hosts_on_insert
    AFTER INSERT ON scraping_jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION scrapeq_hosts_after_insert();

-- A row back to pending (retry, release, rescue, a retried dead job, or an application's own
-- UPDATE) makes its host claimable again. Claims and completions never fire it (their rows do
-- not become pending), so the claim's path pays only the WHEN test.
CREATE FUNCTION scrapeq_hosts_after_pending() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM scrapeq_hosts_pending(ARRAY[NEW.queue], ARRAY[NEW.host_key], ARRAY[NEW.priority],
                                  ARRAY[NEW.run_at], ARRAY[NEW.id], ARRAY[NULL::integer],
                                  ARRAY[NULL::double precision]);
    RETURN NULL;
END;
$$;

CREATE TRIGGER scrapeq_jobs_hosts_on_pending
    AFTER UPDATE OF status ON scraping_jobs
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status <> 'pending')
    EXECUTE FUNCTION scrapeq_hosts_after_pending();

-- Rows queued before this migration: give them their host and make their hosts claimable,
-- counting the attempts in flight.
UPDATE scraping_jobs SET host_key = scrapeq_url_host(url_to_scrape)
WHERE status IN ('pending', 'processing') AND host_key IS NULL;

SELECT scrapeq_hosts_pending(
    array_agg(queue), array_agg(host_key), array_agg(priority), array_agg(run_at),
    array_agg(id), array_agg(NULL::integer), array_agg(NULL::double precision))
FROM scraping_jobs WHERE status = 'pending';

INSERT INTO scrapeq_hosts AS hosts (host_key, slot_ids, slot_attempts)
SELECT host_key, array_agg(id ORDER BY id), array_agg(attempt ORDER BY id)
FROM scraping_jobs WHERE status = 'processing'
GROUP BY host_key ORDER BY host_key
ON CONFLICT (host_key) DO UPDATE
SET slot_ids = excluded.slot_ids, slot_attempts = excluded.slot_attempts;
