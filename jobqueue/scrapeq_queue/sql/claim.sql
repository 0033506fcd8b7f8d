-- The claim: scrapeq_claim and what only it uses. The live definition; docs/queue.md, "The
-- claim", explains it once. A migration applies this file (`\ir ../sql/claim.sql`); a change to
-- it comes with a new migration that applies it again.

-- The sequence that holds where a queue's latest claim stopped (the id of the last head it
-- visited): one of 16, by a hash of the queue's name. Queues that share one start from each
-- other's place, which is as good a place as any.
CREATE OR REPLACE FUNCTION scrapeq_claim_turn_slot(queue TEXT) RETURNS REGCLASS
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT format('scrapeq_claim_turn_%s', hashtext(queue) & 15)::regclass
$$;

DROP FUNCTION IF EXISTS scrapeq_claim(TEXT[], INTEGER, TEXT, DOUBLE PRECISION, INTEGER,
                                      DOUBLE PRECISION);
DROP TYPE IF EXISTS scrapeq_claim_visit;

-- One step of a claim's walk: a host it locked, and one of that host's due rows it may take
-- (id NULL: the host had none).
CREATE TYPE scrapeq_claim_visit AS (
    queue TEXT,
    host_key TEXT,
    owner_namespace TEXT,     -- the head's namespace ('' for rows without an owner)
    generation BIGINT,        -- the head's generation when the walk read it
    head_id BIGINT,           -- the head's row: where the next claim of the queue starts
    host_limit INTEGER,       -- scrapeq_host_limit
    free BIGINT,              -- host_limit less the rows in flight the walk saw
    delay DOUBLE PRECISION,   -- scrapeq_host_delay
    touch BOOLEAN,            -- touched_at is over a minute old
    id BIGINT,
    priority INTEGER,
    run_at TIMESTAMPTZ,
    row_namespace TEXT,       -- the row's namespace ('' for none)
    owner_key TEXT            -- the row's owner (owner_uid, or ''), where jobs set own limits
);

-- Claims up to `claim_limit` due pending rows of `wanted_queues` for `claimer`, best first,
-- within every host's limits; `default_max_per_host` and `default_delay_seconds` are the
-- claiming pool's defaults for hosts whose producers named none. Answers the claimed rows; or,
-- when it claimed nothing but walked hosts, one row of NULLs: claim again.
CREATE FUNCTION scrapeq_claim(wanted_queues TEXT[], claim_limit INTEGER, claimer TEXT,
                              lease_seconds DOUBLE PRECISION, default_max_per_host INTEGER,
                              default_delay_seconds DOUBLE PRECISION)
RETURNS TABLE (id BIGINT, attempt INTEGER, url_to_scrape TEXT, parser_type TEXT, payload JSONB,
               queue TEXT, priority INTEGER, retry_count INTEGER, max_retries INTEGER,
               depth INTEGER, parent_id BIGINT, owner_uid TEXT, owner_namespace TEXT,
               owner_name TEXT, run_at TIMESTAMPTZ, processing_started_at TIMESTAMPTZ,
               lease_expires_at TIMESTAMPTZ, host_key TEXT)
LANGUAGE plpgsql
-- Per-call plans would estimate the arguments better, but planning costs about as much as
-- running the statements.
SET plan_cache_mode = force_generic_plan
-- The walk's order is that of its index scans, one after another: no parallel plan.
SET max_parallel_workers_per_gather = 0
AS $claim$
#variable_conflict use_column
DECLARE
    -- The advisory-lock space of host turns: a claim holds (host_turns, hashtext(host_key))
    -- while it counts and takes the host's rows. 'scrq' in ASCII.
    host_turns CONSTANT INTEGER := 1935897201;
    -- The advisory-lock space of capped namespaces' turns: a claim holds (namespace_caps,
    -- hashtext(namespace)) while it counts and takes a capped namespace's rows. 'scrn' in ASCII.
    namespace_caps CONSTANT INTEGER := 1935896174;
    -- How many hosts a claim may pass over (full, paused, inside a delay, held by another
    -- claim) besides those it takes rows from.
    passed_over CONSTANT INTEGER := 5000;
    -- Per wanted queue, the id of the head where the queue's latest claim stopped (NULL: none).
    marks BIGINT[];
    -- The walk, in walk order.
    walk scrapeq_claim_visit[];
    claimed_rows BIGINT;
    -- Whether a site's rows go out in turns of their namespaces (step 5): the setting
    -- scrapeq.namespace_turns, on unless set to off (docs/queue.md, "Namespace turns").
    namespace_turns CONSTANT BOOLEAN :=
        coalesce(nullif(current_setting('scrapeq.namespace_turns', true), ''), 'on')::boolean;
    -- The caps on rows in flight per namespace (scrapeq_namespace_limits): the namespaces with
    -- a cap of their own and their caps, and the cap of every other namespace (`*`).
    capped_namespaces TEXT[];
    capped_limits INTEGER[];
    every_cap INTEGER;
BEGIN
    -- 1. The queues, each once (a repeated name would walk and lock the same hosts twice).
    IF cardinality(wanted_queues) > 1 THEN
        wanted_queues := ARRAY(SELECT DISTINCT given.queue
                               FROM unnest(wanted_queues) AS given(queue)
                               WHERE given.queue IS NOT NULL);
    END IF;
    IF coalesce(cardinality(wanted_queues), 0) = 0 OR wanted_queues[1] IS NULL THEN
        RETURN;  -- no queue named
    END IF;

    -- 2. Where each queue's walk starts: read before the walk, so that the walk's plan sees a
    -- value (a sequence read is volatile, and would keep the look-up below off the index).
    marks := ARRAY(SELECT pg_sequence_last_value(scrapeq_claim_turn_slot(given.queue))
                   FROM unnest(wanted_queues) AS given(queue));
    SELECT array_agg(caps.owner_namespace) FILTER (WHERE caps.owner_namespace <> '*'),
           array_agg(caps.max_in_flight) FILTER (WHERE caps.owner_namespace <> '*'),
           min(caps.max_in_flight) FILTER (WHERE caps.owner_namespace = '*')
    INTO capped_namespaces, capped_limits, every_cap
    FROM scrapeq_namespace_limits AS caps;

    -- 3. The walk. Each queue's heads in walk order; a host that looks free is locked (never
    -- waiting) with its due rows up to its free slots (SKIP LOCKED).
    IF namespace_turns THEN
        -- Each head gives its own namespace's rows of the host
        -- (scrapeq_jobs_namespace_claim_idx).
        SELECT array_agg(visit.step) INTO walk
        FROM unnest(wanted_queues, marks) AS wanted(queue, mark)
        -- The start: the key of the marked head's row (the row keeps that key unless it was
        -- retried since; any key is a place to start), as (-priority, run_at, id), the head
        -- index's order. With no such row, before the first host of the highest priority.
        CROSS JOIN LATERAL (
            SELECT coalesce(-marked.priority::bigint, -2147483647) AS rank,
                   coalesce(marked.run_at, '-infinity') AS run_at,
                   coalesce(marked.id, -9223372036854775808) AS id
            FROM (SELECT) AS one
            LEFT JOIN scraping_jobs AS marked ON marked.id = wanted.mark
        ) AS start
        CROSS JOIN LATERAL (
            SELECT ROW(host.queue, host.host_key, host.owner_namespace, host.generation,
                       host.head_id, host.host_limit, host.host_limit - busy.running,
                       host.delay, host.touch, next.id, next.priority, next.run_at,
                       next.row_namespace, next.owner_key)::scrapeq_claim_visit AS step
            FROM (
                SELECT heads.queue, heads.host_key, heads.owner_namespace, heads.generation,
                       CASE WHEN heads.owner_namespace <> '' THEN coalesce(
                           capped_limits[array_position(capped_namespaces,
                                                        heads.owner_namespace)],
                           every_cap) END AS namespace_cap,
                       heads.head_priority, heads.head_id, state.last_finished_at,
                       state.last_claimed_id, state.host_limit, state.delay, state.touch,
                       state.job_limits
                -- The head order cut into four stretches, walked in this order: higher
                -- priorities than the start's; the start's priority after the start; the same
                -- priority up to the start (hosts of equal priority take turns); lower
                -- priorities. Each stretch is a range (after, upto] of the head index.
                FROM (VALUES
                        (1, -9223372036854775808, '-infinity'::timestamptz, -9223372036854775808,
                            start.rank, '-infinity'::timestamptz, -9223372036854775808),
                        (2, start.rank, start.run_at, start.id,
                            start.rank, 'infinity', 9223372036854775807),
                        (3, start.rank, '-infinity', -9223372036854775808,
                            start.rank, start.run_at, start.id),
                        (4, start.rank, 'infinity', 9223372036854775807,
                            9223372036854775807, 'infinity', 9223372036854775807)
                     ) AS stretch(position, after_rank, after_run_at, after_id, upto_rank,
                                  upto_run_at, upto_id)
                CROSS JOIN LATERAL (
                    SELECT heads.* FROM scrapeq_host_queues AS heads
                    WHERE heads.queue = wanted.queue AND heads.head_id IS NOT NULL
                      AND (-heads.head_priority::bigint, heads.head_run_at, heads.head_id)
                          > (stretch.after_rank, stretch.after_run_at, stretch.after_id)
                      AND (-heads.head_priority::bigint, heads.head_run_at, heads.head_id)
                          <= (stretch.upto_rank, stretch.upto_run_at, stretch.upto_id)
                      AND heads.head_run_at <= now()
                    ORDER BY -heads.head_priority::bigint, heads.head_run_at, heads.head_id
                    LIMIT claim_limit + passed_over
                ) AS heads
                -- A nested loop keeps the walk's order (a hash join would not). A host inside
                -- its delay or pause is passed over here.
                CROSS JOIN LATERAL (
                    SELECT hosts.last_finished_at, hosts.last_claimed_id, hosts.job_limits,
                           hosts.touched_at < now() - interval '1 minute' AS touch,
                           scrapeq_host_limit(hosts.max_in_flight, hosts.delay_seconds,
                                              hosts.crawl_delay_seconds, hosts.breaker_trips,
                                              default_max_per_host, default_delay_seconds)
                               AS host_limit,
                           scrapeq_host_delay(hosts.delay_seconds, hosts.crawl_delay_seconds,
                                              default_delay_seconds) AS delay
                    FROM scrapeq_hosts AS hosts
                    WHERE hosts.host_key = heads.host_key AND hosts.next_allowed_at <= now()
                    -- (one row at most; keeps the subquery from being pulled into a join)
                    LIMIT 1
                ) AS state
                LIMIT claim_limit + passed_over
            ) AS host
            -- Its rows in flight, as this statement's snapshot sees them (step 5 counts again).
            CROSS JOIN LATERAL (
                SELECT count(*) AS running FROM scraping_jobs AS jobs
                WHERE jobs.host_key = host.host_key AND jobs.status = 'processing'
            ) AS busy
            -- Where jobs set their own limits on the host: the owners whose rows are at their
            -- job's limit or inside its delay (scrapeq_site_job_limits; NULL: no job set any).
            CROSS JOIN LATERAL (
                SELECT CASE WHEN host.job_limits THEN ARRAY(
                    SELECT own.owner_key FROM scrapeq_site_job_limits AS own
                    LEFT JOIN scraping_jobs AS last ON last.id = own.last_claimed_id
                    WHERE own.host_key = host.host_key
                      AND (scrapeq_job_limit(own.max_in_flight, own.delay_seconds)
                           <= (SELECT count(*) FROM scraping_jobs AS jobs
                               WHERE jobs.host_key = own.host_key
                                 AND jobs.status = 'processing'
                                 AND coalesce(jobs.owner_uid, '') = own.owner_key)
                           OR last.updated_at + make_interval(secs => own.delay_seconds)
                              > now())
                ) END AS full
            ) AS own
            -- The host's turn: only a host with a free slot and past its delay is locked.
            CROSS JOIN LATERAL (
                SELECT CASE
                    WHEN busy.running >= host.host_limit THEN false
                    -- A capped namespace at its cap, or whose rows another claim is taking.
                    WHEN host.namespace_cap IS NOT NULL
                         AND ((SELECT count(*) FROM scraping_jobs AS jobs
                               WHERE jobs.owner_namespace = host.owner_namespace
                                 AND jobs.status = 'processing') >= host.namespace_cap
                              OR NOT pg_try_advisory_xact_lock(namespace_caps,
                                                               hashtext(host.owner_namespace)))
                        THEN false
                    WHEN host.delay > 0 AND greatest(host.last_finished_at,
                            (SELECT jobs.updated_at FROM scraping_jobs AS jobs
                             WHERE jobs.id = host.last_claimed_id))
                            + make_interval(secs => host.delay) > now() THEN false
                    ELSE pg_try_advisory_xact_lock(host_turns, hashtext(host.host_key))
                    END AS locked
            ) AS turn
            LEFT JOIN LATERAL (
                SELECT jobs.id, jobs.priority, jobs.run_at,
                       coalesce(jobs.owner_namespace, '') AS row_namespace,
                       CASE WHEN own.full IS NOT NULL THEN coalesce(jobs.owner_uid, '') END
                           AS owner_key
                FROM scraping_jobs AS jobs
                WHERE jobs.status = 'pending' AND jobs.host_key = host.host_key
                  AND jobs.queue = host.queue
                  AND coalesce(jobs.owner_namespace, '') = host.owner_namespace
                  AND jobs.priority >= host.head_priority
                  AND jobs.run_at <= now()
                  AND (own.full IS NULL OR coalesce(jobs.owner_uid, '') <> ALL (own.full))
                ORDER BY jobs.priority DESC, jobs.run_at, jobs.id
                LIMIT host.host_limit - busy.running
                -- Only the holder of a host's lock claims its rows, but another statement (a
                -- cancel, an application's UPDATE) may hold one: such a row is left, never waited
                -- for. A row updated since the walk's snapshot is read as it is now.
                FOR UPDATE SKIP LOCKED
            ) AS next ON true
            WHERE turn.locked
            LIMIT claim_limit
        ) AS visit;
    ELSE
        -- Namespace turns off: the same walk, each head giving the host's best rows of any
        -- namespace (a host visited through two heads offers its rows twice; step 5 counts
        -- each row once within the host's free slots). Only the namespace condition of
        -- `next` differs from the statement above: change both together.
        SELECT array_agg(visit.step) INTO walk
        FROM unnest(wanted_queues, marks) AS wanted(queue, mark)
        -- The start: the key of the marked head's row (the row keeps that key unless it was
        -- retried since; any key is a place to start), as (-priority, run_at, id), the head
        -- index's order. With no such row, before the first host of the highest priority.
        CROSS JOIN LATERAL (
            SELECT coalesce(-marked.priority::bigint, -2147483647) AS rank,
                   coalesce(marked.run_at, '-infinity') AS run_at,
                   coalesce(marked.id, -9223372036854775808) AS id
            FROM (SELECT) AS one
            LEFT JOIN scraping_jobs AS marked ON marked.id = wanted.mark
        ) AS start
        CROSS JOIN LATERAL (
            SELECT ROW(host.queue, host.host_key, host.owner_namespace, host.generation,
                       host.head_id, host.host_limit, host.host_limit - busy.running,
                       host.delay, host.touch, next.id, next.priority, next.run_at,
                       next.row_namespace, next.owner_key)::scrapeq_claim_visit AS step
            FROM (
                SELECT heads.queue, heads.host_key, heads.owner_namespace, heads.generation,
                       CASE WHEN heads.owner_namespace <> '' THEN coalesce(
                           capped_limits[array_position(capped_namespaces,
                                                        heads.owner_namespace)],
                           every_cap) END AS namespace_cap,
                       heads.head_priority, heads.head_id, state.last_finished_at,
                       state.last_claimed_id, state.host_limit, state.delay, state.touch,
                       state.job_limits
                -- The head order cut into four stretches, walked in this order: higher
                -- priorities than the start's; the start's priority after the start; the same
                -- priority up to the start (hosts of equal priority take turns); lower
                -- priorities. Each stretch is a range (after, upto] of the head index.
                FROM (VALUES
                        (1, -9223372036854775808, '-infinity'::timestamptz, -9223372036854775808,
                            start.rank, '-infinity'::timestamptz, -9223372036854775808),
                        (2, start.rank, start.run_at, start.id,
                            start.rank, 'infinity', 9223372036854775807),
                        (3, start.rank, '-infinity', -9223372036854775808,
                            start.rank, start.run_at, start.id),
                        (4, start.rank, 'infinity', 9223372036854775807,
                            9223372036854775807, 'infinity', 9223372036854775807)
                     ) AS stretch(position, after_rank, after_run_at, after_id, upto_rank,
                                  upto_run_at, upto_id)
                CROSS JOIN LATERAL (
                    SELECT heads.* FROM scrapeq_host_queues AS heads
                    WHERE heads.queue = wanted.queue AND heads.head_id IS NOT NULL
                      AND (-heads.head_priority::bigint, heads.head_run_at, heads.head_id)
                          > (stretch.after_rank, stretch.after_run_at, stretch.after_id)
                      AND (-heads.head_priority::bigint, heads.head_run_at, heads.head_id)
                          <= (stretch.upto_rank, stretch.upto_run_at, stretch.upto_id)
                      AND heads.head_run_at <= now()
                    ORDER BY -heads.head_priority::bigint, heads.head_run_at, heads.head_id
                    LIMIT claim_limit + passed_over
                ) AS heads
                -- A nested loop keeps the walk's order (a hash join would not). A host inside
                -- its delay or pause is passed over here.
                CROSS JOIN LATERAL (
                    SELECT hosts.last_finished_at, hosts.last_claimed_id, hosts.job_limits,
                           hosts.touched_at < now() - interval '1 minute' AS touch,
                           scrapeq_host_limit(hosts.max_in_flight, hosts.delay_seconds,
                                              hosts.crawl_delay_seconds, hosts.breaker_trips,
                                              default_max_per_host, default_delay_seconds)
                               AS host_limit,
                           scrapeq_host_delay(hosts.delay_seconds, hosts.crawl_delay_seconds,
                                              default_delay_seconds) AS delay
                    FROM scrapeq_hosts AS hosts
                    WHERE hosts.host_key = heads.host_key AND hosts.next_allowed_at <= now()
                    -- (one row at most; keeps the subquery from being pulled into a join)
                    LIMIT 1
                ) AS state
                LIMIT claim_limit + passed_over
            ) AS host
            -- Its rows in flight, as this statement's snapshot sees them (step 5 counts again).
            CROSS JOIN LATERAL (
                SELECT count(*) AS running FROM scraping_jobs AS jobs
                WHERE jobs.host_key = host.host_key AND jobs.status = 'processing'
            ) AS busy
            -- Where jobs set their own limits on the host: the owners whose rows are at their
            -- job's limit or inside its delay (scrapeq_site_job_limits; NULL: no job set any).
            CROSS JOIN LATERAL (
                SELECT CASE WHEN host.job_limits THEN ARRAY(
                    SELECT own.owner_key FROM scrapeq_site_job_limits AS own
                    LEFT JOIN scraping_jobs AS last ON last.id = own.last_claimed_id
                    WHERE own.host_key = host.host_key
                      AND (scrapeq_job_limit(own.max_in_flight, own.delay_seconds)
                           <= (SELECT count(*) FROM scraping_jobs AS jobs
                               WHERE jobs.host_key = own.host_key
                                 AND jobs.status = 'processing'
                                 AND coalesce(jobs.owner_uid, '') = own.owner_key)
                           OR last.updated_at + make_interval(secs => own.delay_seconds)
                              > now())
                ) END AS full
            ) AS own
            -- The host's turn: only a host with a free slot and past its delay is locked.
            CROSS JOIN LATERAL (
                SELECT CASE
                    WHEN busy.running >= host.host_limit THEN false
                    -- A capped namespace at its cap, or whose rows another claim is taking.
                    WHEN host.namespace_cap IS NOT NULL
                         AND ((SELECT count(*) FROM scraping_jobs AS jobs
                               WHERE jobs.owner_namespace = host.owner_namespace
                                 AND jobs.status = 'processing') >= host.namespace_cap
                              OR NOT pg_try_advisory_xact_lock(namespace_caps,
                                                               hashtext(host.owner_namespace)))
                        THEN false
                    WHEN host.delay > 0 AND greatest(host.last_finished_at,
                            (SELECT jobs.updated_at FROM scraping_jobs AS jobs
                             WHERE jobs.id = host.last_claimed_id))
                            + make_interval(secs => host.delay) > now() THEN false
                    ELSE pg_try_advisory_xact_lock(host_turns, hashtext(host.host_key))
                    END AS locked
            ) AS turn
            LEFT JOIN LATERAL (
                SELECT jobs.id, jobs.priority, jobs.run_at,
                       coalesce(jobs.owner_namespace, '') AS row_namespace,
                       CASE WHEN own.full IS NOT NULL THEN coalesce(jobs.owner_uid, '') END
                           AS owner_key
                FROM scraping_jobs AS jobs
                WHERE jobs.status = 'pending' AND jobs.host_key = host.host_key
                  AND jobs.queue = host.queue
                  AND jobs.priority >= host.head_priority
                  AND jobs.run_at <= now()
                  AND (own.full IS NULL OR coalesce(jobs.owner_uid, '') <> ALL (own.full))
                ORDER BY jobs.priority DESC, jobs.run_at, jobs.id
                LIMIT host.host_limit - busy.running
                -- Only the holder of a host's lock claims its rows, but another statement (a
                -- cancel, an application's UPDATE) may hold one: such a row is left, never waited
                -- for. A row updated since the walk's snapshot is read as it is now.
                FOR UPDATE SKIP LOCKED
            ) AS next ON true
            WHERE turn.locked
            LIMIT claim_limit
        ) AS visit;
    END IF;
    IF walk IS NULL THEN
        RETURN;
    END IF;

    -- 4. Publish where each queue's walk stopped: the next claim of the queue, on any
    -- connection, starts there. setval is seen at once, before this claim commits, and never
    -- waits. (The walk gives each queue's hosts together: one queue when the first and the
    -- last visit are of the same queue.)
    IF (walk[1]).queue = (walk[cardinality(walk)]).queue THEN
        PERFORM setval(scrapeq_claim_turn_slot((walk[1]).queue),
                       (walk[cardinality(walk)]).head_id);
    ELSE
        PERFORM setval(scrapeq_claim_turn_slot(last.queue), last.head_id)
        FROM (SELECT DISTINCT ON (visit.queue) visit.queue, visit.head_id
              FROM unnest(walk) WITH ORDINALITY AS visit
              ORDER BY visit.queue, visit.ordinality DESC) AS last;
    END IF;

    -- 5. The claim, in a snapshot newer than the walk's locks: every claim that held one of
    -- these hosts before has committed, and none can take their rows until this one commits.
    RETURN QUERY
    WITH walked AS (
        SELECT visit.* FROM unnest(walk) AS visit
    ),
    visited AS (
        -- Each locked host once, its rows in flight counted afresh. A delayed host's state row
        -- is read afresh and locked (SKIP LOCKED: a retry pausing the host holds it, and the
        -- host waits for the next claim), so that writing it below never waits; other hosts'
        -- state is as the walk read it a moment ago.
        SELECT host.host_key, host.delay, host.touch, busy.running,
               CASE WHEN host.delay = 0 THEN greatest(host.host_limit - busy.running, 0)
                    WHEN state.host_key IS NULL OR state.next_allowed_at > now()
                         OR greatest(state.last_finished_at, last.updated_at)
                            + make_interval(secs => host.delay) > now() THEN 0
                    ELSE greatest(host.host_limit - busy.running, 0) END AS free,
               greatest(state.last_finished_at, last.updated_at) AS ended_at
        FROM (SELECT DISTINCT walked.host_key, walked.host_limit, walked.delay, walked.touch
              FROM walked) AS host
        CROSS JOIN LATERAL (
            SELECT count(*) AS running FROM scraping_jobs AS jobs
            WHERE jobs.host_key = host.host_key AND jobs.status = 'processing'
        ) AS busy
        LEFT JOIN LATERAL (
            SELECT state.host_key, state.next_allowed_at, state.last_finished_at,
                   state.last_claimed_id
            FROM scrapeq_hosts AS state
            WHERE host.delay > 0 AND state.host_key = host.host_key
            FOR NO KEY UPDATE SKIP LOCKED
        ) AS state ON true
        LEFT JOIN scraping_jobs AS last ON last.id = state.last_claimed_id
    ),
    rooms AS (
        -- Each capped namespace among the walked rows: its cap less its rows in flight, counted
        -- afresh (the walk holds its lock, so no other claim takes its rows meanwhile).
        SELECT capped.row_namespace, greatest(capped.cap - busy.running, 0) AS room
        FROM (
            SELECT DISTINCT walked.row_namespace,
                   coalesce(capped_limits[array_position(capped_namespaces,
                                                         walked.row_namespace)],
                            every_cap) AS cap
            FROM walked
            WHERE walked.row_namespace <> ''
        ) AS capped
        CROSS JOIN LATERAL (
            SELECT count(*) AS running FROM scraping_jobs AS jobs
            WHERE jobs.owner_namespace = capped.row_namespace AND jobs.status = 'processing'
        ) AS busy
        WHERE capped.cap IS NOT NULL
    ),
    own_visited AS (
        -- Each job with limits of its own among the walked rows, its rows in flight on the
        -- host counted afresh (the host's lock keeps other claims off them).
        SELECT own.host_key, own.owner_key, own.delay_seconds,
               CASE WHEN last.updated_at + make_interval(secs => own.delay_seconds) > now()
                    THEN 0
                    -- (NULL: the job named only a delay of 0, and has no limit of its own)
                    ELSE scrapeq_job_limit(own.max_in_flight, own.delay_seconds)
                         - busy.running END AS free
        FROM (SELECT DISTINCT walked.host_key, walked.owner_key FROM walked
              WHERE walked.owner_key IS NOT NULL AND walked.id IS NOT NULL) AS owner
        JOIN scrapeq_site_job_limits AS own
            ON own.host_key = owner.host_key AND own.owner_key = owner.owner_key
        CROSS JOIN LATERAL (
            SELECT count(*) AS running FROM scraping_jobs AS jobs
            WHERE jobs.host_key = own.host_key AND jobs.status = 'processing'
              AND coalesce(jobs.owner_uid, '') = own.owner_key
        ) AS busy
        LEFT JOIN scraping_jobs AS last ON last.id = own.last_claimed_id
    ),
    chosen AS (
        -- The best `claim_limit` walked rows within their jobs' own free slots, then their
        -- hosts' free slots, then their namespaces' caps. A host's slots go by priority, then
        -- in turns of its namespaces (each namespace's first row, then each one's second, ...;
        -- with scrapeq.namespace_turns off, oldest first).
        SELECT capped.id
        FROM (
            SELECT ranked.id, ranked.priority, ranked.run_at, rooms.room,
                   row_number() OVER (PARTITION BY ranked.row_namespace
                                      ORDER BY ranked.priority DESC, ranked.run_at, ranked.id)
                       AS namespace_rank
            FROM (
                SELECT turned.id, turned.priority, turned.run_at, turned.row_namespace,
                       visited.free,
                       row_number() OVER (PARTITION BY turned.host_key
                                          ORDER BY turned.priority DESC,
                                                   CASE WHEN namespace_turns
                                                        THEN turned.namespace_turn ELSE 0 END,
                                                   turned.run_at, turned.id)
                           AS rank
                FROM (
                    SELECT mine.id, mine.host_key, mine.priority, mine.run_at,
                           mine.row_namespace,
                           row_number() OVER (PARTITION BY mine.host_key, mine.owner_namespace,
                                                           mine.priority
                                              ORDER BY mine.run_at, mine.id)
                               AS namespace_turn
                    FROM (
                        SELECT walked.id, walked.host_key, walked.owner_namespace,
                               walked.priority, walked.run_at, walked.row_namespace,
                               own_visited.free AS own_free,
                               row_number() OVER (PARTITION BY walked.host_key, walked.owner_key
                                                  ORDER BY walked.priority DESC, walked.run_at,
                                                           walked.id) AS own_rank
                        -- (each row once: with namespace turns off, two heads of a host offer
                        -- the same)
                        FROM (SELECT DISTINCT ON (offered.id) offered.*
                              FROM walked AS offered WHERE offered.id IS NOT NULL
                              ORDER BY offered.id) AS walked
                        LEFT JOIN own_visited ON own_visited.host_key = walked.host_key
                                             AND own_visited.owner_key = walked.owner_key
                    ) AS mine
                    WHERE mine.own_free IS NULL OR mine.own_rank <= mine.own_free
                ) AS turned
                JOIN visited ON visited.host_key = turned.host_key
            ) AS ranked
            LEFT JOIN rooms ON rooms.row_namespace = ranked.row_namespace
            WHERE ranked.rank <= ranked.free
        ) AS capped
        WHERE capped.room IS NULL OR capped.namespace_rank <= capped.room
        ORDER BY capped.priority DESC, capped.run_at, capped.id
        LIMIT claim_limit
    ),
    claimed AS (
        UPDATE scraping_jobs AS jobs
        SET status = 'processing',
            attempt = jobs.attempt + 1,
            processed_by = claimer,
            processing_started_at = now(),
            lease_expires_at = now() + make_interval(secs => lease_seconds),
            updated_at = now()
        -- Rows the walk locked while pending, found by primary key (`= ANY(ARRAY(...))`). The
        -- status is compared as text so that no partial index of pending rows can serve the
        -- look-up: statistics that say nearly no row is pending (a burst queued since the last
        -- ANALYZE) would have the plan walk every pending row's entry of such an index.
        WHERE jobs.id = ANY (ARRAY(SELECT chosen.id FROM chosen))
          AND jobs.status::text = 'pending'
        RETURNING jobs.id, jobs.attempt, jobs.url_to_scrape, jobs.parser_type::text,
                  jobs.payload, jobs.queue, jobs.priority, jobs.retry_count, jobs.max_retries,
                  jobs.depth, jobs.parent_id, jobs.owner_uid, jobs.owner_namespace,
                  jobs.owner_name, jobs.run_at, jobs.processing_started_at,
                  jobs.lease_expires_at, jobs.host_key
    ),
    taken AS (
        -- A delayed host (limit 1: one row) records its attempt and its next allowed start;
        -- any host its touched_at, at most once a minute.
        UPDATE scrapeq_hosts AS hosts
        SET last_claimed_id = CASE WHEN given.delay > 0 THEN given.id
                                   ELSE hosts.last_claimed_id END,
            last_finished_at = CASE WHEN given.delay > 0
                THEN coalesce(given.ended_at, hosts.last_finished_at)
                ELSE hosts.last_finished_at END,
            next_allowed_at = CASE WHEN given.delay > 0
                THEN greatest(hosts.next_allowed_at,
                              now() + make_interval(secs => given.delay))
                ELSE hosts.next_allowed_at END,
            touched_at = now()
        FROM (
            SELECT DISTINCT ON (claimed.host_key) claimed.host_key, claimed.id, visited.delay,
                   visited.ended_at
            FROM claimed JOIN visited ON visited.host_key = claimed.host_key
            WHERE visited.delay > 0 OR visited.touch
            ORDER BY claimed.host_key, claimed.id DESC
        ) AS given
        JOIN LATERAL (
            SELECT FROM scrapeq_hosts AS state
            WHERE state.host_key = given.host_key
            FOR NO KEY UPDATE SKIP LOCKED
        ) AS unlocked ON true
        WHERE hosts.host_key = given.host_key
    ),
    own_taken AS (
        -- A job with a delay of its own on a host (one row at a time) records its attempt.
        UPDATE scrapeq_site_job_limits AS own
        SET last_claimed_id = given.id
        FROM (
            SELECT DISTINCT ON (claimed.host_key, own_visited.owner_key) claimed.host_key,
                   own_visited.owner_key, claimed.id
            FROM claimed
            JOIN own_visited ON own_visited.host_key = claimed.host_key
                            AND own_visited.owner_key = coalesce(claimed.owner_uid, '')
            WHERE own_visited.delay_seconds > 0
            ORDER BY claimed.host_key, own_visited.owner_key, claimed.id DESC
        ) AS given
        JOIN LATERAL (
            SELECT FROM scrapeq_site_job_limits AS free
            WHERE free.host_key = given.host_key AND free.owner_key = given.owner_key
            FOR NO KEY UPDATE SKIP LOCKED
        ) AS unlocked ON true
        WHERE own.host_key = given.host_key AND own.owner_key = given.owner_key
    ),
    reheaded AS (
        -- A host that gave fewer rows than it had free slots (its due rows of that priority ran
        -- out, were taken or cancelled meanwhile, or the limit came first) gets the key of its
        -- best due pending row, else of its best pending row (NULL: none), leaving out the rows
        -- this claim took (they still look pending to it), unless a producer or retry moved
        -- the head meanwhile (generation) or holds it now (never waited for).
        UPDATE scrapeq_host_queues AS known
        SET head_priority = moved.priority, head_run_at = moved.run_at, head_id = moved.id
        FROM (
            SELECT short.queue, short.host_key, short.owner_namespace, short.generation,
                   best.priority, best.run_at, best.id
            FROM (
                SELECT walked.queue, walked.host_key, walked.owner_namespace, walked.generation
                FROM walked
                GROUP BY walked.queue, walked.host_key, walked.owner_namespace, walked.generation
                HAVING count(walked.id) < max(walked.free)
            ) AS short
            LEFT JOIN LATERAL (
                SELECT candidate.priority, candidate.run_at, candidate.id
                FROM (
                    (SELECT jobs.priority, jobs.run_at, jobs.id, 0 AS rank
                     FROM scraping_jobs AS jobs
                     WHERE jobs.status = 'pending' AND jobs.host_key = short.host_key
                       AND jobs.queue = short.queue
                       AND coalesce(jobs.owner_namespace, '') = short.owner_namespace
                       AND jobs.run_at <= now()
                       AND NOT EXISTS (SELECT FROM claimed WHERE claimed.id = jobs.id)
                     ORDER BY jobs.priority DESC, jobs.run_at, jobs.id
                     LIMIT 1)
                    UNION ALL
                    (SELECT jobs.priority, jobs.run_at, jobs.id, 1 AS rank
                     FROM scraping_jobs AS jobs
                     WHERE jobs.status = 'pending' AND jobs.host_key = short.host_key
                       AND jobs.queue = short.queue
                       AND coalesce(jobs.owner_namespace, '') = short.owner_namespace
                       AND NOT EXISTS (SELECT FROM claimed WHERE claimed.id = jobs.id)
                     ORDER BY jobs.priority DESC, jobs.run_at, jobs.id
                     LIMIT 1)
                ) AS candidate
                ORDER BY candidate.rank
                LIMIT 1
            ) AS best ON true
        ) AS moved
        JOIN LATERAL (
            SELECT FROM scrapeq_host_queues AS free
            WHERE free.queue = moved.queue AND free.host_key = moved.host_key
              AND free.owner_namespace = moved.owner_namespace
            FOR UPDATE SKIP LOCKED
        ) AS unlocked ON true
        WHERE known.queue = moved.queue AND known.host_key = moved.host_key
          AND known.owner_namespace = moved.owner_namespace
          AND known.generation = moved.generation
    )
    SELECT claimed.id, claimed.attempt, claimed.url_to_scrape, claimed.parser_type,
           claimed.payload, claimed.queue, claimed.priority, claimed.retry_count,
           claimed.max_retries, claimed.depth, claimed.parent_id, claimed.owner_uid,
           claimed.owner_namespace, claimed.owner_name, claimed.run_at,
           claimed.processing_started_at, claimed.lease_expires_at, claimed.host_key
    FROM claimed
    ORDER BY claimed.priority DESC, claimed.run_at, claimed.id;
    GET DIAGNOSTICS claimed_rows = ROW_COUNT;

    -- 6. Claimed nothing, but walked hosts (their heads were stale and are corrected now, or
    -- another claim took their rows between the walk's snapshot and its locks): a row of NULLs
    -- tells the caller to claim again; the next walk starts further on.
    IF claimed_rows = 0 THEN
        RETURN NEXT;
    END IF;
END;
$claim$;

COMMENT ON FUNCTION scrapeq_claim(TEXT[], INTEGER, TEXT, DOUBLE PRECISION, INTEGER,
                                  DOUBLE PRECISION) IS
    'scrapeq: the claim (jobqueue/scrapeq_queue/sql/claim.sql; docs/queue.md, "The claim").';
