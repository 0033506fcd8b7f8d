-- How pending rows make their sites known and claimable: scrapeq_heads_pending, and the
-- trigger functions of scraping_jobs that call it (the triggers themselves are made by migration
-- 0016_tenancy). The live definition; a migration applies this file
-- (`\ir ../sql/namespace_heads.sql`); a change to it comes with a new migration that applies it
-- again. scrapeq_hosts is keyed by site (host_key), scrapeq_host_queues by (site, queue, owner
-- namespace): each namespace's rows of a site have a head of their own ('' for rows without an
-- owner), so that namespaces take turns in the claim (docs/queue.md, "Namespace turns").
-- (sql/hosts_pending.sql holds what migrations 0003, 0005 and 0015 applied, a head per site and
-- queue; 0016 replaces it with this file.)

-- Pending rows (parallel arrays, one entry per row: the arguments of a trigger's call) make
-- their hosts known and claimable: locks the hosts that exist FOR KEY SHARE (waiting for a
-- prune deleting one of them), creates the missing ones (a trigger of scrapeq_hosts gives a
-- new site its policy: docs/queue.md, "Site policies"), and moves each (queue, host, namespace)
-- head up to the best of these rows (due rows first). A NULL entry of `owner_namespaces` is ''.
-- A producer's limits are its own rows' business (sql/job_limits.sql), never the site's.
CREATE OR REPLACE FUNCTION scrapeq_heads_pending(queues TEXT[], host_keys TEXT[],
                                                 owner_namespaces TEXT[], priorities INTEGER[],
                                                 run_ats TIMESTAMPTZ[], ids BIGINT[])
RETURNS void
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
    INSERT INTO scrapeq_host_queues AS known (queue, host_key, owner_namespace, head_priority,
                                              head_run_at, head_id)
    SELECT DISTINCT ON (given.queue, given.host_key, given.owner_namespace)
           given.queue, given.host_key, given.owner_namespace, given.priority, given.run_at,
           given.id
    FROM (SELECT listed.queue, listed.host_key, coalesce(listed.owner_namespace, '')
                     AS owner_namespace, listed.priority, listed.run_at, listed.id
          FROM unnest(queues, host_keys, owner_namespaces, priorities, run_ats, ids)
               AS listed(queue, host_key, owner_namespace, priority, run_at, id)) AS given
    ORDER BY given.queue, given.host_key, given.owner_namespace, given.run_at > now(),
             given.priority DESC, given.run_at, given.id
    ON CONFLICT (host_key, queue, owner_namespace) DO UPDATE
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
CREATE OR REPLACE FUNCTION scrapeq_heads_after_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM scrapeq_heads_pending(
        array_agg(queue), array_agg(host_key), array_agg(owner_namespace), array_agg(priority),
        array_agg(run_at), array_agg(id))
    FROM new_rows WHERE status = 'pending';
    RETURN NULL;
END;
$$;

-- A row back to pending (retry, release, rescue, a retried dead job, or an application's own
-- UPDATE), or a pending row made due sooner or more urgent, or given to another namespace, by an
-- UPDATE, moves its head.
-- Claims and completions never fire it (their rows do not become pending), so the claim's path
-- pays only the WHEN test.
CREATE OR REPLACE FUNCTION scrapeq_heads_after_pending() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM scrapeq_heads_pending(ARRAY[NEW.queue], ARRAY[NEW.host_key],
                                  ARRAY[NEW.owner_namespace], ARRAY[NEW.priority],
                                  ARRAY[NEW.run_at], ARRAY[NEW.id]);
    RETURN NULL;
END;
$$;
