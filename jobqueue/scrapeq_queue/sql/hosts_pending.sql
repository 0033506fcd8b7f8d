-- How pending rows made their sites known and claimable before heads were kept per namespace:
-- scrapeq_hosts_pending, and the trigger functions of scraping_jobs that call it (the triggers
-- themselves are made by migration 0003_politeness). Migrations 0003 and 0005 apply this file
-- (`\ir ../sql/hosts_pending.sql`); 0016_tenancy drops these functions for those of
-- sql/namespace_heads.sql, the live definition. scrapeq_hosts and scrapeq_host_queues were
-- keyed by site (host_key).

-- Pending rows (parallel arrays, one entry per row: the arguments of a trigger's call) make
-- their hosts known and claimable: locks the hosts that exist FOR KEY SHARE (waiting for a
-- prune deleting one of them), creates the missing ones (a trigger of scrapeq_hosts gives a
-- new site its policy: docs/queue.md, "Site policies"), and moves each (queue, host) head up
-- to the best of these rows (due rows first). A producer's limits are its own rows' business
-- (sql/job_limits.sql), never the site's.
DROP FUNCTION IF EXISTS scrapeq_hosts_pending(TEXT[], TEXT[], INTEGER[], TIMESTAMPTZ[], BIGINT[],
                                              INTEGER[], DOUBLE PRECISION[]);
CREATE OR REPLACE FUNCTION scrapeq_hosts_pending(queues TEXT[], host_keys TEXT[],
                                                 priorities INTEGER[], run_ats TIMESTAMPTZ[],
                                                 ids BIGINT[]) RETURNS void
    LANGUAGE sql AS $$
    SELECT FROM scrapeq_hosts AS hosts
    WHERE hosts.host_key = ANY(host_keys)
    ORDER BY hosts.host_key
    FOR KEY SHARE;
    INSERT INTO scrapeq_hosts (host_key)
    SELECT DISTINCT given.host_key FROM unnest(host_keys) AS given(host_key)
    -- (the sites known already are left out here, so that only new ones reach the trigger)
    WHERE NOT EXISTS (SELECT FROM scrapeq_hosts AS hosts WHERE hosts.host_key = given.host_key)
    ORDER BY given.host_key
    ON CONFLICT (host_key) DO NOTHING;
    INSERT INTO scrapeq_host_queues AS known (queue, host_key, head_priority, head_run_at,
                                              head_id)
    SELECT DISTINCT ON (given.queue, given.host_key)
           given.queue, given.host_key, given.priority, given.run_at, given.id
    FROM unnest(queues, host_keys, priorities, run_ats, ids)
         AS given(queue, host_key, priority, run_at, id)
    ORDER BY given.queue, given.host_key, given.run_at > now(), given.priority DESC,
             given.run_at, given.id
    ON CONFLICT (host_key, queue) DO UPDATE
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
CREATE OR REPLACE FUNCTION scrapeq_hosts_after_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM scrapeq_hosts_pending(
        array_agg(queue), array_agg(host_key), array_agg(priority), array_agg(run_at),
        array_agg(id))
    FROM new_rows WHERE status = 'pending';
    RETURN NULL;
END;
$$;

-- A row back to pending (retry, release, rescue, a retried dead job, or an application's own
-- UPDATE), or a pending row made due sooner or more urgent by an UPDATE, moves its host's head.
-- Claims and completions never fire it (their rows do not become pending), so the claim's path
-- pays only the WHEN test.
CREATE OR REPLACE FUNCTION scrapeq_hosts_after_pending() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM scrapeq_hosts_pending(ARRAY[NEW.queue], ARRAY[NEW.host_key], ARRAY[NEW.priority],
                                  ARRAY[NEW.run_at], ARRAY[NEW.id]);
    RETURN NULL;
END;
$$;
