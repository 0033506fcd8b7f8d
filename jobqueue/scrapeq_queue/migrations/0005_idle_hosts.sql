-- 0005: the host state of sites scraped long ago can be deleted (scrapeq_queue.prune_idle_hosts).
--
-- A crawl over millions of sites leaves one scrapeq_hosts row per site and one
-- scrapeq_host_queues row per queue and site. A site with no pending row, nothing in flight,
-- no pause and no claim for a long time (touched_at) can go: its limits come back with the
-- next rows that name them, robots.txt's Crawl-delay with the next fetch of robots.txt.
--
-- A producer must never make rows pending for a site whose state a prune is deleting: its rows
-- would have a head but no host state, and no claim would ever see them. So producers now hold
-- a KEY SHARE lock on each existing host row of their statement until they commit, and the
-- prune deletes only host rows it could lock FOR UPDATE (SKIP LOCKED), checking them again in a
-- second statement, whose snapshot sees every producer that committed before its lock. Claims
-- and retries lock host rows FOR NO KEY UPDATE, which a producer's KEY SHARE lock does not
-- block: a producer's open transaction never holds up the claims of its sites.

-- When a claim last took rows of this host (or when the host was first seen).
ALTER TABLE scrapeq_hosts ADD COLUMN touched_at TIMESTAMPTZ NOT NULL DEFAULT now();

-- As in 0003, with the KEY SHARE lock first: the hosts that exist are locked (waiting for a
-- prune deleting one of them), then the missing ones are created (among them any the prune
-- just deleted).
CREATE OR REPLACE FUNCTION scrapeq_hosts_pending(queues TEXT[], host_keys TEXT[],
                                                 priorities INTEGER[], run_ats TIMESTAMPTZ[],
                                                 ids BIGINT[], limits INTEGER[],
                                                 delays DOUBLE PRECISION[]) RETURNS void
    LANGUAGE sql AS $$
    SELECT FROM scrapeq_hosts AS hosts
    WHERE hosts.host_key = ANY(host_keys)
    ORDER BY hosts.host_key
    FOR KEY SHARE;
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

-- A host's heads by host: the prune deletes them with the host. Same columns as before, so
-- producers' ON CONFLICT (queue, host_key) and claims' lookups use it as they did.
ALTER TABLE scrapeq_host_queues DROP CONSTRAINT scrapeq_host_queues_pkey,
    ADD CONSTRAINT scrapeq_host_queues_pkey PRIMARY KEY (host_key, queue);
