-- 0009: claimers of a queue take turns together, and the walk locks the rows it takes.
--
-- Until now each connection kept its own place in the walk (the session setting
-- scrapeq.claim_cursor). Claimers going round the same hosts at the same pace bunch up: once
-- one catches up with another, it passes over the other's hosts on every claim and comes out
-- just ahead of it, and the other does the same next time. With 3 claimers over 1,000 sites
-- (2 rows per site per claim) a claim visited 1.3 hosts per row it took; one claimer, 0.53.
--
-- Now a claim also publishes where it stopped, with setval, in one of 16 sequences
-- (scrapeq_claim_turn_0 .. _15, chosen by a hash of the queue's name): a sequence's value is
-- seen by every connection at once, before the claim commits, and writing it never waits. The
-- next claim of the queue, on any connection, starts there. The value is the key of the last
-- head visited, found again through its row (scraping_jobs.id); when that row is gone or
-- belongs to another queue sharing the slot, the claim starts where this connection's previous
-- claim stopped, as before.
--
-- Two smaller changes: the walk locks the rows it takes (FOR UPDATE SKIP LOCKED, as the claim
-- before migration 0003 did), instead of a second look-up of each row by id before the update;
-- the queues' list is deduplicated in the function instead of by scrapeq_claim_queues, a SQL
-- function that PostgreSQL planned again on every call.

-- Any bigint: the value is a row's id, and a plain INSERT may give a row any id (0, negative).
DO $turns$
BEGIN
    FOR slot IN 0..15 LOOP
        EXECUTE format('CREATE SEQUENCE scrapeq_claim_turn_%s AS BIGINT MINVALUE %s', slot,
                       -9223372036854775808);
        EXECUTE format('COMMENT ON SEQUENCE scrapeq_claim_turn_%s IS %L', slot,
                       'scrapeq: the head key where the latest claim of the queues of this slot stopped (a hint; see scrapeq_claim).');
    END LOOP;
END;
$turns$;

-- The sequence that holds a queue's place in the walk.
CREATE FUNCTION scrapeq_claim_turn_slot(queue TEXT) RETURNS REGCLASS
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT format('scrapeq_claim_turn_%s', hashtext(queue) & 15)::regclass
$$;

CREATE OR REPLACE FUNCTION scrapeq_claim(wanted_queues TEXT[], claim_limit INTEGER, claimer TEXT,
                              lease_seconds DOUBLE PRECISION, default_max_per_host INTEGER,
                              default_delay_seconds DOUBLE PRECISION)
RETURNS TABLE (id BIGINT, attempt INTEGER, url_to_scrape TEXT, parser_type TEXT, payload JSONB,
               queue TEXT, priority INTEGER, retry_count INTEGER, max_retries INTEGER,
               depth INTEGER, parent_id BIGINT, owner_uid TEXT, owner_namespace TEXT,
               owner_name TEXT, run_at TIMESTAMPTZ, processing_started_at TIMESTAMPTZ,
               lease_expires_at TIMESTAMPTZ, host_key TEXT)
LANGUAGE plpgsql
-- The two statements take array arguments, which a per-call plan would estimate better but
-- planning costs about as much as running them.
SET plan_cache_mode = force_generic_plan
-- The walk's order is that of its index scans, one after another: no parallel plan.
SET max_parallel_workers_per_gather = 0
AS $claim$
#variable_conflict use_column
DECLARE
    -- The walk, one entry per walked row (a host with no due row: id NULL), in walk order.
    walked_hosts TEXT[];
    walked_queues TEXT[];
    walked_generations BIGINT[];
    walked_limits INTEGER[];
    walked_frees BIGINT[];
    walked_delays DOUBLE PRECISION[];
    walked_touches BOOLEAN[];
    walked_ids BIGINT[];
    walked_priorities INTEGER[];
    walked_run_ats TIMESTAMPTZ[];
    walked_head_priorities INTEGER[];
    walked_head_run_ats TIMESTAMPTZ[];
    walked_head_ids BIGINT[];
    cursors JSONB;
    -- Per wanted queue: the head key where the latest claim of that queue stopped, whichever
    -- connection made it (its slot's sequence; NULL: none yet).
    marks BIGINT[];
    claimed_rows BIGINT;
BEGIN
    IF cardinality(wanted_queues) > 1 THEN
        -- Each queue once: a repeated name would walk (and lock) the same hosts twice.
        wanted_queues := ARRAY(SELECT DISTINCT given.queue
                               FROM unnest(wanted_queues) AS given(queue)
                               WHERE given.queue IS NOT NULL);
    END IF;
    IF coalesce(cardinality(wanted_queues), 0) = 0 OR wanted_queues[1] IS NULL THEN
        RETURN;  -- no queue named
    END IF;
    IF cardinality(wanted_queues) > 1 THEN
        marks := ARRAY(SELECT pg_sequence_last_value(scrapeq_claim_turn_slot(given.queue))
                       FROM unnest(wanted_queues) AS given(queue));
    ELSE
        marks := ARRAY[pg_sequence_last_value(scrapeq_claim_turn_slot(wanted_queues[1]))];
    END IF;
    BEGIN
        cursors := coalesce(nullif(current_setting('scrapeq.claim_cursor', true), '')::jsonb,
                            '{}');
        -- A hint only: a value this function did not write is ignored.
        PERFORM (entry.value->>0)::integer, (entry.value->>1)::timestamptz,
                (entry.value->>2)::bigint
        FROM jsonb_each(cursors) AS entry;
    EXCEPTION WHEN others THEN
        cursors := '{}';
    END;
    SELECT array_agg(visit.host_key), array_agg(visit.queue), array_agg(visit.generation),
           array_agg(visit.host_limit), array_agg(visit.free), array_agg(visit.delay),
           array_agg(visit.touch), array_agg(visit.id),
           array_agg(visit.priority), array_agg(visit.run_at), array_agg(visit.head_priority),
           array_agg(visit.head_run_at), array_agg(visit.head_id)
      INTO walked_hosts, walked_queues, walked_generations, walked_limits, walked_frees,
           walked_delays, walked_touches,
           walked_ids, walked_priorities, walked_run_ats, walked_head_priorities,
           walked_head_run_ats, walked_head_ids
    FROM unnest(wanted_queues, marks) AS wanted(queue, mark)
    -- Where the latest claim of this queue stopped: the key of the head it visited last (the key
    -- of its row: the row still holds it unless retried since, and any key is a place to start);
    -- else, when that row is gone or of another queue sharing the slot, where the previous
    -- claim on this connection stopped; with neither, before the first host of the highest
    -- priority.
    CROSS JOIN LATERAL (
        SELECT coalesce(marked.priority, (given.saved->>0)::integer, 2147483647) AS priority,
               coalesce(marked.run_at, (given.saved->>1)::timestamptz, '-infinity') AS run_at,
               coalesce(marked.id, (given.saved->>2)::bigint, -9223372036854775808) AS id
        FROM (SELECT cursors -> wanted.queue AS saved) AS given
        LEFT JOIN scraping_jobs AS marked
            ON marked.id = wanted.mark AND marked.queue = wanted.queue
    ) AS resume
    CROSS JOIN LATERAL (
        SELECT host.queue, host.host_key, host.generation, host.host_limit,
               host.host_limit - busy.running AS free, host.delay, host.touch,
               host.head_priority, host.head_run_at, host.head_id, next.id, next.priority,
               next.run_at
        FROM (
            SELECT known.queue, known.host_key, known.generation, known.head_priority,
                   known.head_run_at, known.head_id, hosts.last_finished_at,
                   hosts.last_claimed_id, hosts.host_limit, hosts.delay, hosts.touch
            FROM (
                -- Higher priorities than the cursor's, from their best host on.
                (SELECT heads.* FROM scrapeq_host_queues AS heads
                 WHERE heads.queue = wanted.queue AND heads.head_id IS NOT NULL
                   AND heads.head_run_at <= now()
                   AND heads.head_priority > resume.priority
                 ORDER BY heads.head_priority DESC, heads.head_run_at, heads.head_id
                 LIMIT claim_limit + 5000)
                UNION ALL
                -- The cursor's priority: the hosts after the cursor, then those up to it.
                (SELECT heads.* FROM scrapeq_host_queues AS heads
                 WHERE heads.queue = wanted.queue AND heads.head_id IS NOT NULL
                   AND heads.head_run_at <= now() AND heads.head_priority = resume.priority
                   AND (heads.head_run_at, heads.head_id) > (resume.run_at, resume.id)
                 ORDER BY heads.head_priority DESC, heads.head_run_at, heads.head_id
                 LIMIT claim_limit + 5000)
                UNION ALL
                (SELECT heads.* FROM scrapeq_host_queues AS heads
                 WHERE heads.queue = wanted.queue AND heads.head_id IS NOT NULL
                   AND heads.head_run_at <= now() AND heads.head_priority = resume.priority
                   AND (heads.head_run_at, heads.head_id) <= (resume.run_at, resume.id)
                 ORDER BY heads.head_priority DESC, heads.head_run_at, heads.head_id
                 LIMIT claim_limit + 5000)
                UNION ALL
                -- Lower priorities.
                (SELECT heads.* FROM scrapeq_host_queues AS heads
                 WHERE heads.queue = wanted.queue AND heads.head_id IS NOT NULL
                   AND heads.head_run_at <= now()
                   AND heads.head_priority < resume.priority
                 ORDER BY heads.head_priority DESC, heads.head_run_at, heads.head_id
                 LIMIT claim_limit + 5000)
            ) AS known
            -- A nested loop keeps the walk's order (a hash join would not).
            CROSS JOIN LATERAL (
                SELECT state.last_finished_at, state.last_claimed_id,
                       state.touched_at < now() - interval '1 minute' AS touch,
                       CASE WHEN greatest(coalesce(state.delay_seconds, default_delay_seconds),
                                          state.crawl_delay_seconds) > 0 THEN 1
                            ELSE coalesce(state.max_in_flight, default_max_per_host) END
                           AS host_limit,
                       greatest(coalesce(state.delay_seconds, default_delay_seconds),
                                state.crawl_delay_seconds) AS delay
                FROM scrapeq_hosts AS state
                WHERE state.host_key = known.host_key AND state.next_allowed_at <= now()
                LIMIT 1  -- (one row at most; keeps the subquery from being pulled into a join)
            ) AS hosts
            -- A claim passes over at most 5,000 hosts that are full, paused or held.
            LIMIT claim_limit + 5000
        ) AS host
        CROSS JOIN LATERAL (
            SELECT count(*) AS running FROM scraping_jobs AS jobs
            WHERE jobs.host_key = host.host_key AND jobs.status = 'processing'
        ) AS busy
        CROSS JOIN LATERAL (
            SELECT CASE
                WHEN busy.running >= host.host_limit THEN false
                WHEN host.delay > 0 AND greatest(host.last_finished_at,
                        (SELECT jobs.updated_at FROM scraping_jobs AS jobs
                         WHERE jobs.id = host.last_claimed_id))
                        + make_interval(secs => host.delay) > now() THEN false
                ELSE pg_try_advisory_xact_lock(1935897201, hashtext(host.host_key)) END
                AS locked
        ) AS turn
        LEFT JOIN LATERAL (
            SELECT jobs.id, jobs.priority, jobs.run_at
            FROM scraping_jobs AS jobs
            WHERE jobs.status = 'pending' AND jobs.host_key = host.host_key
              AND jobs.queue = host.queue AND jobs.priority >= host.head_priority
              AND jobs.run_at <= now()
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
    IF walked_hosts IS NULL THEN
        RETURN;
    END IF;
    -- The next claim on this connection starts after the last host this one visited (the walk
    -- gives each queue's hosts together, so one queue when its first and last are the same).
    -- Every claimer of the queue starts there next (setval is seen at once, before this claim
    -- commits, so a claim that starts meanwhile passes over fewer of the hosts this one holds).
    IF walked_queues[1] = walked_queues[cardinality(walked_queues)] THEN
        cursors := cursors || jsonb_build_object(walked_queues[1], jsonb_build_array(
            walked_head_priorities[cardinality(walked_queues)],
            walked_head_run_ats[cardinality(walked_queues)],
            walked_head_ids[cardinality(walked_queues)]));
        PERFORM setval(scrapeq_claim_turn_slot(walked_queues[1]),
                       walked_head_ids[cardinality(walked_queues)]);
    ELSE
        cursors := cursors || (
            SELECT jsonb_object_agg(last.queue,
                                    jsonb_build_array(last.priority, last.run_at, last.id))
            FROM (SELECT DISTINCT ON (walk.queue) walk.queue, walk.priority, walk.run_at, walk.id
                  FROM unnest(walked_queues, walked_head_priorities, walked_head_run_ats,
                              walked_head_ids) WITH ORDINALITY
                       AS walk(queue, priority, run_at, id, position)
                  ORDER BY walk.queue, walk.position DESC) AS last);
        PERFORM setval(scrapeq_claim_turn_slot(last.key), (last.value->>2)::bigint)
        FROM jsonb_each(cursors) AS last
        WHERE last.key = ANY (walked_queues);
    END IF;
    PERFORM set_config('scrapeq.claim_cursor', cursors::text, false);

    RETURN QUERY
    WITH walked AS (
        SELECT walk.*
        FROM unnest(walked_hosts, walked_queues, walked_generations, walked_limits,
                    walked_frees, walked_delays, walked_touches, walked_ids, walked_priorities,
                    walked_run_ats)
             AS walk(host_key, queue, generation, host_limit, free, delay, touch, id, priority,
                     run_at)
    ),
    visited AS (
        -- Each locked host once, as it is now: this snapshot is newer than the locks. A delayed
        -- host's state row is read afresh and locked (SKIP LOCKED: a retry pausing the host
        -- holds it, and the host waits for the next claim), so that writing it below never
        -- waits; other hosts' state is as the walk read it a moment ago.
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
    chosen AS (
        SELECT ranked.id
        FROM (
            SELECT walked.id, walked.priority, walked.run_at, visited.free,
                   row_number() OVER (PARTITION BY walked.host_key
                                      ORDER BY walked.priority DESC, walked.run_at, walked.id)
                       AS rank
            FROM walked JOIN visited ON visited.host_key = walked.host_key
            WHERE walked.id IS NOT NULL
        ) AS ranked
        WHERE ranked.rank <= ranked.free
        ORDER BY ranked.priority DESC, ranked.run_at, ranked.id
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
        -- (rows the walk locked)
        WHERE jobs.id = ANY (ARRAY(SELECT chosen.id FROM chosen)) AND jobs.status = 'pending'
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
            SELECT DISTINCT ON (claimed.host_key) claimed.host_key, claimed.id, visited.delay, visited.ended_at
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
    reheaded AS (
        -- A host that gave fewer rows than it had free slots (its due rows of that priority ran
        -- out, were taken or cancelled meanwhile, or the limit came first) gets the key of its
        -- best due pending row, else of its best pending row (NULL: none), leaving out the rows
        -- this claim took (they still look pending to it), unless a producer or retry moved
        -- the head meanwhile (generation) or holds it now (never waited for).
        UPDATE scrapeq_host_queues AS known
        SET head_priority = moved.priority, head_run_at = moved.run_at, head_id = moved.id
        FROM (
            SELECT visits.queue, visits.host_key, visits.generation, best.priority,
                   best.run_at, best.id
            FROM (
                SELECT walked.queue, walked.host_key, walked.generation
                FROM walked
                GROUP BY walked.queue, walked.host_key, walked.generation
                HAVING count(walked.id) < max(walked.free)
            ) AS visits
            LEFT JOIN LATERAL (
                SELECT candidate.priority, candidate.run_at, candidate.id
                FROM (
                    (SELECT jobs.priority, jobs.run_at, jobs.id, 0 AS rank
                     FROM scraping_jobs AS jobs
                     WHERE jobs.status = 'pending' AND jobs.host_key = visits.host_key
                       AND jobs.queue = visits.queue AND jobs.run_at <= now()
                       AND NOT EXISTS (SELECT FROM claimed WHERE claimed.id = jobs.id)
                     ORDER BY jobs.priority DESC, jobs.run_at, jobs.id
                     LIMIT 1)
                    UNION ALL
                    (SELECT jobs.priority, jobs.run_at, jobs.id, 1 AS rank
                     FROM scraping_jobs AS jobs
                     WHERE jobs.status = 'pending' AND jobs.host_key = visits.host_key
                       AND jobs.queue = visits.queue
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
            FOR UPDATE SKIP LOCKED
        ) AS unlocked ON true
        WHERE known.queue = moved.queue AND known.host_key = moved.host_key
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
    -- Claimed nothing, but the walk corrected stale heads or the rows it saw were taken before
    -- its locks: the next walk starts further on.
    IF claimed_rows = 0 THEN
        RETURN NEXT;
    END IF;
END;
$claim$;

DROP FUNCTION scrapeq_claim_queues(TEXT[]);
