"""Every SQL statement the queue runs, named, with what each one guarantees.

Values are always bound (`%(name)s`); nothing here is built from input. Statements that finish
an attempt also log it (scrapeq_attempts) and bump the outcome counters (scrapeq_queue_counters)
in the same statement, so the three can never disagree. A claim writes only the job row: the
attempt in flight is its attempt, processed_by and processing_started_at.
"""

from __future__ import annotations

from typing import Final

# --- migrations ---------------------------------------------------------------------------------

# A fixed advisory-lock key: every `scrapeq migrate` serialises on it (transaction scoped).
MIGRATION_LOCK_KEY: Final = 0x7363_7261_7065_7100  # "scrapeq\0" as a bigint

MIGRATION_LOCK: Final = "SELECT pg_advisory_xact_lock(%(key)s)"

# Creates the bookkeeping table on first run; a no-op afterwards.
MIGRATIONS_TABLE_CREATE: Final = """
CREATE TABLE IF NOT EXISTS scrapeq_schema_migrations (
    version TEXT PRIMARY KEY,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""

MIGRATIONS_APPLIED: Final = "SELECT version FROM scrapeq_schema_migrations ORDER BY version"

MIGRATION_RECORD: Final = "INSERT INTO scrapeq_schema_migrations (version) VALUES (%(version)s)"

# NULL when the bookkeeping table does not exist yet (an empty database).
MIGRATIONS_TABLE_EXISTS: Final = "SELECT to_regclass('scrapeq_schema_migrations') IS NOT NULL"

# --- claims (workers) ---------------------------------------------------------------------------

# Claims up to `limit` due pending rows of the given queues, best first, within every host's
# limits, whichever worker of whichever pool asks: the function scrapeq_claim (sql/claim.sql;
# docs/queue.md, "The claim"). `max_per_site` and `delay_seconds` are the claiming pool's
# defaults for hosts whose producers named none. Answers one row of NULLs when it walked hosts
# but took no row: claim again. With each row whose payload names a `crawlKey` (a string), what
# that crawl remembers of the row's URL (CRAWL_MEMORY_READ's columns; NULLs when it never
# fetched it): one primary-key look-up per such row, none for the others. A short call, which
# psycopg keeps parsed.
JOB_CLAIM: Final = """
SELECT claim.id, claim.attempt, claim.url_to_scrape, claim.parser_type, claim.payload,
       claim.queue, claim.priority, claim.retry_count, claim.max_retries, claim.depth,
       claim.parent_id, claim.owner_uid, claim.owner_namespace, claim.owner_name, claim.run_at,
       claim.processing_started_at, claim.lease_expires_at, claim.host_key,
       memory.etag, memory.last_modified, memory.content_hash, memory.result_hash,
       memory.fetched_at, memory.changed_at,
       extract(epoch FROM now() - memory.fetched_at)::double precision
FROM scrapeq_claim(%(queues)s::text[], %(limit)s::integer, %(worker_id)s::text,
                   %(lease_seconds)s::double precision, %(max_per_site)s::integer,
                   %(delay_seconds)s::double precision) WITH ORDINALITY AS claim
LEFT JOIN LATERAL (
    SELECT remembered.* FROM scrapeq_crawl_memory AS remembered
    WHERE jsonb_typeof(claim.payload -> 'crawlKey') = 'string'
      AND remembered.crawl_key = claim.payload ->> 'crawlKey'
      AND remembered.url_hash = sha256(convert_to(claim.url_to_scrape, 'UTF8'))
    -- (one row at most; keeps the look-up a nested loop on the primary key: pulled into a
    -- join, it could hash the whole memory table for each claim)
    LIMIT 1
) AS memory ON true
ORDER BY claim.ordinality
"""

# Records robots.txt's Crawl-delay of a host (0: none), creating its state if need be.
HOST_SET_CRAWL_DELAY: Final = """
INSERT INTO scrapeq_hosts AS hosts (host_key, crawl_delay_seconds)
VALUES (%(host_key)s, %(crawl_delay_seconds)s)
ON CONFLICT (host_key) DO UPDATE SET crawl_delay_seconds = excluded.crawl_delay_seconds
    WHERE hosts.crawl_delay_seconds IS DISTINCT FROM excluded.crawl_delay_seconds
"""

# The cluster's copy of an origin's robots.txt while it holds (NULLs when there is none), and
# whether this call took the lease to fetch it: it does when no copy holds and no other worker
# holds a lease (`leased` false with no copy: another worker is fetching; ask again soon).
ROBOTS_COPY: Final = """
WITH held AS (
    SELECT robots.status, robots.body, robots.problem,
           extract(epoch FROM robots.expires_at - now())::double precision AS seconds_left
    FROM scrapeq_robots AS robots
    WHERE robots.origin = %(origin)s AND robots.expires_at > now()
),
leased AS (
    INSERT INTO scrapeq_robots AS robots (origin, expires_at, fetching_until)
    SELECT %(origin)s, '-infinity', now() + make_interval(secs => %(lease_seconds)s)
    WHERE NOT EXISTS (SELECT FROM held)
    ON CONFLICT (origin) DO UPDATE SET fetching_until = excluded.fetching_until
    WHERE robots.expires_at <= now()
      AND (robots.fetching_until IS NULL OR robots.fetching_until <= now())
    RETURNING robots.origin
)
SELECT held.status, held.body, held.problem, held.seconds_left,
       EXISTS (SELECT FROM leased) AS leased
FROM (SELECT) AS one LEFT JOIN held ON true
"""

# Stores what a fetch of an origin's robots.txt gave, for `ttl_seconds`, and ends the lease.
ROBOTS_STORE: Final = """
INSERT INTO scrapeq_robots AS robots (origin, status, body, problem, expires_at)
VALUES (%(origin)s, %(status)s, %(body)s, %(problem)s,
        now() + make_interval(secs => %(ttl_seconds)s))
ON CONFLICT (origin) DO UPDATE
SET status = excluded.status, body = excluded.body, problem = excluded.problem,
    expires_at = excluded.expires_at, fetching_until = NULL
"""

# --- site policies (docs/queue.md, "Site policies") ---------------------------------------------

# Removes what one site policy said.
SITE_POLICY_DELETE: Final = """
DELETE FROM scrapeq_site_policies WHERE policy = %(policy)s
"""

# Removes the policies the cluster no longer has: not among `names` (the cluster's listing)
# and not written since `listed_at` (a policy created during the listing is kept).
SITE_POLICIES_RETAIN: Final = """
DELETE FROM scrapeq_site_policies
WHERE policy <> ALL(%(names)s::text[]) AND updated_at < %(listed_at)s
RETURNING policy
"""

# Records one site policy: a row per pattern, each with the policy's settings.
SITE_POLICY_INSERT: Final = """
INSERT INTO scrapeq_site_policies (policy, pattern, max_in_flight, delay_seconds,
                                   respect_robots_txt, user_agent, contact, allowed_namespaces,
                                   denied_namespaces, adaptive)
SELECT %(policy)s, given.pattern, %(max_in_flight)s, %(delay_seconds)s, %(respect_robots_txt)s,
       %(user_agent)s, %(contact)s, %(allowed_namespaces)s::text[], %(denied_namespaces)s::text[],
       %(adaptive)s
FROM unnest(%(patterns)s::text[]) AS given(pattern)
"""

# Resolves every known site's policy again; answers how many sites changed.
SITE_POLICIES_RESOLVE: Final = """
SELECT scrapeq_site_policies_resolve()
"""

# What the policies say about each given site (known or not): the most specific pattern that
# matches it and the policies' settings for it.
SITE_RULES: Final = """
SELECT given.host_key, rules.pattern, rules.policies, rules.max_in_flight, rules.delay_seconds,
       rules.respect_robots_txt, rules.user_agent, rules.contact,
       (SELECT jsonb_agg(jsonb_build_object('policy', policies.policy,
                                            'allow', policies.allowed_namespaces,
                                            'deny', policies.denied_namespaces)
                         ORDER BY policies.policy)
        FROM scrapeq_site_policies AS policies
        WHERE policies.pattern = rules.pattern
          AND (policies.allowed_namespaces IS NOT NULL
               OR cardinality(policies.denied_namespaces) > 0)) AS namespace_rules
FROM unnest(%(host_keys)s::text[]) AS given(host_key)
LEFT JOIN scrapeq_site_rules AS rules
    ON rules.pattern = scrapeq_site_policy_pattern(given.host_key)
"""

# The given sites whose policy refuses a namespace, with the first policy (by name) refusing it.
SITE_REFUSALS: Final = """
SELECT refused.host_key, refused.policy
FROM (SELECT given.host_key,
             scrapeq_site_refusing_policy(scrapeq_site_policy_pattern(given.host_key),
                                          %(namespace)s) AS policy
      FROM unnest(%(host_keys)s::text[]) AS given(host_key)) AS refused
WHERE refused.policy IS NOT NULL
"""

# The politeness state of the given hosts, with the attempts each has running.
HOST_STATES: Final = """
SELECT hosts.host_key,
       (SELECT count(*) FROM scraping_jobs AS jobs
        WHERE jobs.host_key = hosts.host_key AND jobs.status = 'processing') AS in_flight,
       hosts.max_in_flight, hosts.delay_seconds, hosts.crawl_delay_seconds,
       hosts.next_allowed_at, hosts.paused_until, hosts.pause_reason,
       CASE WHEN hosts.recent_responses_at > now() - make_interval(
                     secs => %(window_max_age_seconds)s::double precision)
            THEN bit_count(hosts.recent_responses::bit(64)) ELSE 0 END,
       hosts.breaker_trips, hosts.adaptive_ceiling, hosts.adaptive_limit, hosts.latency_seconds
FROM scrapeq_hosts AS hosts
WHERE hosts.host_key = ANY(%(host_keys)s::text[])
"""

# Extends the leases of the (id, attempt) pairs this worker still holds; returns their ids.
# A pair whose attempt moved on (rescued and re-claimed) or that was cancelled is not renewed.
# Touches no indexed column, so the update stays HOT.
JOB_RENEW_LEASES: Final = """
UPDATE scraping_jobs AS jobs
SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS held(id, attempt)
WHERE jobs.id = held.id AND jobs.attempt = held.attempt
  AND jobs.status = 'processing' AND jobs.processed_by = %(worker_id)s
RETURNING jobs.id
"""

# Completes the given attempts that are still current (fenced by id + attempt + processing);
# stores each result, logs the attempts and counts them. Returns the ids that completed.
# The results arrive as one JSON array (element i belongs to ids[i]): one document to encode
# instead of one per job.
_JOB_COMPLETE_MANY_CTES: Final = """
WITH done AS (
    UPDATE scraping_jobs AS jobs
    SET status = 'completed', result = outcome.result, finished_at = now(), updated_at = now(),
        lease_expires_at = NULL, crawl_flags = scrapeq_crawl_flags(outcome.result)
    FROM (
        SELECT given.id, given.attempt, result.value AS result, given.duration
        FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[],
                    %(durations)s::double precision[]) WITH ORDINALITY
                 AS given(id, attempt, duration, position)
        JOIN jsonb_array_elements(%(results)s::jsonb) WITH ORDINALITY AS result(value, position)
            USING (position)
    ) AS outcome
    WHERE jobs.id = outcome.id AND jobs.attempt = outcome.attempt AND jobs.status = 'processing'
    RETURNING jobs.id, jobs.attempt, jobs.queue, jobs.processed_by,
              jobs.processing_started_at, outcome.duration, jobs.host_key, jobs.crawl_flags
),
logged AS (
    INSERT INTO scrapeq_attempts (job_id, attempt, worker_id, started_at, outcome,
                                  duration_seconds)
    SELECT id, attempt, processed_by, processing_started_at, 'completed', duration FROM done
),
-- The sites of these rows whose window holds a server error, whose breaker is tripped or
-- whose limit adapts. A clean, closed site is not written: a success shifted into a window of
-- successes changes nothing; the look-up goes through scrapeq_hosts_troubled_idx, the partial
-- index of such sites, so the completions of healthy sites read no state row. A site whose
-- state a retry holds at this instant is passed over (SKIP LOCKED): a completion never waits
-- for a site's lock (the retry holds it while it waits for its own row, which a cancel may
-- hold while it waits for one of these rows), and the next completion records its success.
-- The latency of a site's completions here is their mean duration, rows that made no request
-- (skipped by the crawl memory, crawl flag 8) left out.
site_locked AS (
    SELECT hosts.host_key, site.responses, site.latency, hosts.adaptive_ceiling,
           hosts.adaptive_limit, hosts.latency_seconds, hosts.latency_floor_seconds,
           hosts.adaptive_lowered_at
    FROM (SELECT done.host_key, count(*) AS responses,
                 avg(done.duration) FILTER (WHERE done.duration > 0
                                              AND coalesce(done.crawl_flags & 8, 0) = 0)
                     AS latency
          FROM done GROUP BY done.host_key) AS site
    JOIN scrapeq_hosts AS hosts ON hosts.host_key = site.host_key
    WHERE hosts.recent_responses <> 0 OR hosts.breaker_trips > 0
       OR hosts.adaptive_ceiling IS NOT NULL
    FOR NO KEY UPDATE OF hosts SKIP LOCKED
),
-- An adaptive site's new latency, floor and limit (docs/queue.md, "Adaptive concurrency"):
-- the limit grows by one per round of completions while the latency stays within the
-- tolerance of the floor, and falls by the backoff when it does not; it moves neither way
-- within a latency of its last fall.
adapted AS (
    SELECT locked.host_key, averaged.latency, floored.floor,
           CASE WHEN NOT settled.since_lowered THEN locked.adaptive_limit
                WHEN NOT within.tolerated
                    THEN greatest(1, locked.adaptive_limit * %(latency_backoff)s::double precision)
                ELSE least(locked.adaptive_ceiling,
                           locked.adaptive_limit + locked.responses / locked.adaptive_limit)
           END AS adaptive_limit,
           settled.since_lowered AND NOT within.tolerated AS lowered
    FROM site_locked AS locked
    CROSS JOIN LATERAL (
        SELECT coalesce(locked.latency_seconds
                        + %(latency_weight)s::double precision
                          * (locked.latency - locked.latency_seconds),
                        locked.latency) AS latency
    ) AS averaged
    CROSS JOIN LATERAL (
        SELECT least(locked.latency,
                     coalesce(locked.latency_floor_seconds
                              + %(floor_drift)s::double precision
                                * (averaged.latency - locked.latency_floor_seconds),
                              locked.latency)) AS floor
    ) AS floored
    CROSS JOIN LATERAL (
        SELECT averaged.latency
               <= %(latency_tolerance)s::double precision * floored.floor AS tolerated
    ) AS within
    -- Within a latency of its last fall, the responses of requests sent before it neither
    -- lower the limit again nor raise it.
    CROSS JOIN LATERAL (
        SELECT coalesce(locked.adaptive_lowered_at, '-infinity')
               <= now() - make_interval(secs => averaged.latency) AS since_lowered
    ) AS settled
    WHERE locked.adaptive_ceiling IS NOT NULL AND locked.latency IS NOT NULL
),
-- Each completion is a success in its site's window; one after the site's pause (the probe,
-- or a row that was in flight) closes a tripped breaker and empties the window.
site_recovered AS (
    UPDATE scrapeq_hosts AS hosts
    SET recent_responses = CASE
            WHEN hosts.breaker_trips > 0
                 AND coalesce(hosts.paused_until, '-infinity') <= now() THEN 0
            WHEN site_locked.responses >= %(window)s::integer THEN 0
            ELSE (hosts.recent_responses << site_locked.responses::integer)
                 & ((1::bigint << %(window)s::integer) - 1) END,
        recent_responses_at = now(),
        breaker_trips = CASE
            WHEN coalesce(hosts.paused_until, '-infinity') <= now() THEN 0
            ELSE hosts.breaker_trips END,
        latency_seconds = coalesce(adapted.latency, hosts.latency_seconds),
        latency_floor_seconds = coalesce(adapted.floor, hosts.latency_floor_seconds),
        adaptive_limit = coalesce(adapted.adaptive_limit, hosts.adaptive_limit),
        max_in_flight = coalesce(floor(adapted.adaptive_limit)::integer, hosts.max_in_flight),
        adaptive_lowered_at = CASE WHEN adapted.lowered THEN now()
                                   ELSE hosts.adaptive_lowered_at END
    FROM site_locked
    LEFT JOIN adapted ON adapted.host_key = site_locked.host_key
    WHERE hosts.host_key = site_locked.host_key
),
counted AS (
    INSERT INTO scrapeq_queue_counters AS counters (queue, outcome, shard, total)
    SELECT queue, 'completed', pg_backend_pid() %% 16, count(*) FROM done
    GROUP BY queue ORDER BY queue
    ON CONFLICT (queue, outcome, shard) DO UPDATE SET total = counters.total + excluded.total
)"""
JOB_COMPLETE_MANY: Final = (
    _JOB_COMPLETE_MANY_CTES
    + """
SELECT id FROM done
"""
)

# Serialises the followed-link inserts of one owner for the rest of the transaction, so that
# the count below and the insert after it see every other parent's children (maxPages per job
# holds under concurrent completions). Nothing is locked for rows without an owner.
JOB_FOLLOW_LOCK: Final = """
SELECT pg_advisory_xact_lock(hashtextextended('scrapeq-follow:' || owner_uid, 0))
FROM scraping_jobs
WHERE id = %(parent_id)s AND owner_uid IS NOT NULL
"""

# How many followed rows (depth > 0) the parent's owner already has; 0 without an owner.
JOB_FOLLOWED_COUNT: Final = """
SELECT count(followed.id)
FROM scraping_jobs AS parent
JOIN scraping_jobs AS followed
  ON followed.owner_uid = parent.owner_uid AND followed.depth > 0
WHERE parent.id = %(parent_id)s AND parent.owner_uid IS NOT NULL
"""

# Inserts followed links as children of a job that just completed in this transaction:
# same queue/priority/retries/owner, the same retain_for, undelivered and notify_finished (the
# child is part of the same work), depth + %(depth_step)s (1 for followed links, 0 for the
# next page of a pagination chain; the table keeps parent_id for rows deeper than 0 only, so
# a chain of depth-0 pages has none), deduplicated per owner by normalised URL
# (rows without an owner are deduplicated only within one call), at most %(limit)s new rows
# in the order given (links already queued for the owner do not use up the limit; NULL: no
# limit). Returns the new ids. The children's host keys come from the caller (registrable
# domains). A child starts on its parent's session (sticky: a crawl's follow-ups keep the
# proxy and cookies that reached them).
JOB_INSERT_CHILDREN: Final = """
INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload, queue, priority, max_retries,
                           retry_backoff_seconds, owner_uid, owner_namespace, owner_name,
                           dedup_key, parent_id, depth, host_key, retain_for, undelivered,
                           notify_finished, session_id)
SELECT child.url, coalesce(child.parser_type, parent.parser_type),
       coalesce(child.payload, parent.payload), parent.queue, parent.priority,
       parent.max_retries, parent.retry_backoff_seconds, parent.owner_uid,
       parent.owner_namespace, parent.owner_name,
       CASE WHEN parent.owner_uid IS NULL THEN NULL ELSE child.dedup_key END,
       CASE WHEN parent.depth + %(depth_step)s > 0 THEN parent.id END,
       parent.depth + %(depth_step)s, child.host_key, parent.retain_for, parent.undelivered,
       parent.notify_finished, parent.session_id
FROM scraping_jobs AS parent,
     unnest(%(urls)s::text[], %(parser_types)s::text[], %(payloads)s::jsonb[],
            %(dedup_keys)s::text[], %(host_keys)s::text[])
         WITH ORDINALITY AS child(url, parser_type, payload, dedup_key, host_key, position)
WHERE parent.id = %(parent_id)s
  AND NOT EXISTS (
      SELECT 1 FROM scraping_jobs AS queued
      WHERE parent.owner_uid IS NOT NULL
        AND queued.owner_uid = parent.owner_uid AND queued.dedup_key = child.dedup_key)
ORDER BY child.position
LIMIT %(limit)s
ON CONFLICT (owner_uid, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
RETURNING id
"""

# After JOB_INSERT_CHILDREN stopped at the owner's maxPages: the offered links that are still
# not queued for the owner were dropped by the cap; their number goes into the parent's result
# (follow_dropped.max_pages), in the transaction that completed it.
JOB_FOLLOW_DROPPED: Final = """
WITH dropped AS (
    SELECT count(*) AS links
    FROM scraping_jobs AS parent, unnest(%(dedup_keys)s::text[]) AS offered(dedup_key)
    WHERE parent.id = %(parent_id)s AND parent.owner_uid IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM scraping_jobs AS queued
          WHERE queued.owner_uid = parent.owner_uid AND queued.dedup_key = offered.dedup_key)
)
UPDATE scraping_jobs AS jobs
SET result = coalesce(jobs.result, '{}'::jsonb) || jsonb_build_object(
        'follow_dropped',
        coalesce(jobs.result -> 'follow_dropped', '{}'::jsonb)
            || jsonb_build_object('max_pages', dropped.links))
FROM dropped
WHERE jobs.id = %(parent_id)s AND dropped.links > 0 AND jsonb_typeof(jobs.result) = 'object'
"""

# --- source rows (docs/queue.md, "Source rows") --------------------------------------------------

# How far a source row's expansion got, read by the attempt that holds it (fenced): NULL when
# nothing was recorded yet, no row when the attempt is no longer current.
JOB_SOURCE_PROGRESS: Final = """
SELECT source_progress FROM scraping_jobs
WHERE id = %(id)s AND attempt = %(attempt)s AND status = 'processing'
"""

# One batch of a source row's expansion, fenced by the source's id + attempt + processing (a
# cancelled or rescued source inserts nothing and returns no row). Each entry becomes a page row
# (%(is_source)s false: the source's payload without `source`) or a sitemap row (true: the
# source's payload with source.kind = sitemap), with the source's queue, priority, retries,
# owner, retention and delivery flags, at depth 0, deduplicated per owner by the given keys
# (ON CONFLICT on the dedup index: an entry already queued, by this attempt or an earlier one,
# inserts nothing). The source's progress becomes %(entries)s entries handled, and its counts
# grow by what this batch inserted and %(skipped)s. Returns (pages inserted, sitemaps inserted).
# The caller holds the owner's lock (JOB_FOLLOW_LOCK) in the same transaction.
JOB_INSERT_EXPANDED: Final = """
WITH source AS (
    SELECT id, parser_type, payload - 'source' AS page_payload,
           jsonb_set(payload, '{source,kind}', '"sitemap"') AS sitemap_payload, queue,
           priority, max_retries, retry_backoff_seconds, owner_uid, owner_namespace, owner_name,
           retain_for, undelivered, notify_finished,
           coalesce(source_progress, '{}'::jsonb) AS progress
    FROM scraping_jobs
    WHERE id = %(id)s AND attempt = %(attempt)s AND status = 'processing'
    FOR UPDATE
),
inserted AS (
    INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload, queue, priority, max_retries,
                               retry_backoff_seconds, owner_uid, owner_namespace, owner_name,
                               dedup_key, depth, host_key, retain_for, undelivered,
                               notify_finished)
    SELECT entry.url, source.parser_type,
           CASE WHEN entry.is_source THEN source.sitemap_payload ELSE source.page_payload END,
           source.queue, source.priority, source.max_retries, source.retry_backoff_seconds,
           source.owner_uid, source.owner_namespace, source.owner_name,
           CASE WHEN source.owner_uid IS NULL THEN NULL ELSE entry.dedup_key END,
           0, entry.host_key, source.retain_for, source.undelivered, source.notify_finished
    FROM source,
         unnest(%(urls)s::text[], %(is_source)s::boolean[], %(dedup_keys)s::text[],
                %(host_keys)s::text[]) AS entry(url, is_source, dedup_key, host_key)
    ON CONFLICT (owner_uid, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING payload ? 'source' AS is_source
),
counted AS (
    SELECT count(*) FILTER (WHERE NOT is_source) AS pages,
           count(*) FILTER (WHERE is_source) AS sitemaps
    FROM inserted
),
progressed AS (
    UPDATE scraping_jobs AS jobs
    SET source_progress = jsonb_build_object(
            'entries', greatest(%(entries)s::bigint,
                                coalesce((source.progress ->> 'entries')::bigint, 0)),
            'enqueued', coalesce((source.progress ->> 'enqueued')::bigint, 0) + counted.pages,
            'sitemaps', coalesce((source.progress ->> 'sitemaps')::bigint, 0) + counted.sitemaps,
            'skipped', coalesce((source.progress ->> 'skipped')::bigint, 0) + %(skipped)s::bigint)
    FROM source, counted
    WHERE jobs.id = source.id
    RETURNING counted.pages, counted.sitemaps
)
SELECT pages, sitemaps FROM progressed
"""

# Records a failed attempt that may be retried: if retries remain the row goes back to pending
# with run_at = now + delay, where delay = Retry-After when given, else
# retry_backoff_seconds * 2^retry_count * jitter, both capped; otherwise it fails for good.
# Fenced by id + attempt + processing. Returns the new status (no row: fenced).
# A server error (%(server_error)s: a 5xx or 429) speaks for the whole host: the site's
# Retry-After (%(host_pause_seconds)s, with a 429 or 503, a server error or not) pauses it for
# every worker that long, and a server error goes into the site's window of recent responses
# (docs/queue.md, "Server errors"). %(trip_errors)s server errors among its last %(window)s
# responses trip the site's breaker: a pause of %(pause_seconds)s; a server error once a pause
# is over (the probe, or a row that was in flight) trips it again, for twice the last pause
# (up to %(max_pause_seconds)s) when all %(window)s responses failed and the row was on its
# first attempt, else for the same pause.
# Errors that arrive during a pause only fill the window. Every bound value comes from one
# RetryPolicy (row_lifecycle.py).
JOB_RETRY: Final = """
WITH paused AS (
    SELECT hosts.host_key, seen.responses, tripped.trips, lowered.adaptive_limit,
           lowered.adaptive_limit IS DISTINCT FROM hosts.adaptive_limit AS lowered,
           CASE
               WHEN %(host_pause_seconds)s::double precision IS NOT NULL
                   THEN %(host_pause_seconds)s::double precision
               WHEN tripped.trips > hosts.breaker_trips OR tripped.probe_failed
                   THEN least(%(max_pause_seconds)s::double precision,
                              %(pause_seconds)s::double precision
                              * power(2, least(tripped.trips - 1, 30)))
           END AS pause
    FROM scrapeq_hosts AS hosts
    -- The window with this error as its newest response; a window whose newest response is
    -- older than %(window_max_age_seconds)s starts again empty.
    CROSS JOIN LATERAL (
        SELECT CASE WHEN NOT %(server_error)s THEN hosts.recent_responses
                    ELSE (((CASE WHEN hosts.recent_responses_at > now() - make_interval(
                                         secs => %(window_max_age_seconds)s::double precision)
                                 THEN hosts.recent_responses ELSE 0 END) << 1) | 1)
                         & ((1::bigint << %(window)s::integer) - 1) END AS responses
    ) AS seen
    CROSS JOIN LATERAL (
        SELECT CASE
            -- Not a server error (a block's Retry-After alone): the breaker stays as it is.
            WHEN NOT %(server_error)s THEN hosts.breaker_trips
            -- Closed: trips when the window holds enough errors.
            WHEN hosts.breaker_trips = 0
                THEN CASE WHEN bit_count(seen.responses::bit(64)) >= %(trip_errors)s::integer
                          THEN 1 ELSE 0 END
            -- Tripped and its pause over: the probe (or a row in flight) failed. The pause
            -- grows only while every response of the window failed and the failed row was on
            -- its first attempt (the site looks down: pages never tried fail too); a site
            -- that still answers some pages, or a row failing again (which speaks for that
            -- row), keeps the pause as it is.
            WHEN coalesce(hosts.paused_until, '-infinity') <= now()
                THEN CASE WHEN bit_count(seen.responses::bit(64)) >= %(window)s::integer
                               AND (SELECT first.retry_count = 0 FROM scraping_jobs AS first
                                    WHERE first.id = %(id)s)
                          THEN hosts.breaker_trips + 1 ELSE hosts.breaker_trips END
            ELSE hosts.breaker_trips END AS trips,
            %(server_error)s AND hosts.breaker_trips > 0
                AND coalesce(hosts.paused_until, '-infinity') <= now() AS probe_failed
    ) AS tripped
    -- An adaptive site's limit falls by the error backoff on a server error, at most once per
    -- latency (docs/queue.md, "Adaptive concurrency").
    CROSS JOIN LATERAL (
        SELECT CASE WHEN %(server_error)s AND hosts.adaptive_ceiling IS NOT NULL
                         AND coalesce(hosts.adaptive_lowered_at, '-infinity')
                             <= now() - make_interval(secs => coalesce(hosts.latency_seconds, 0))
                    THEN greatest(1, hosts.adaptive_limit
                                     * %(error_backoff)s::double precision)
                    ELSE hosts.adaptive_limit END AS adaptive_limit
    ) AS lowered
    WHERE (%(server_error)s OR %(host_pause_seconds)s::double precision IS NOT NULL)
      AND hosts.host_key = %(host_key)s
    FOR NO KEY UPDATE OF hosts
),
decided AS (
    UPDATE scraping_jobs AS jobs
    SET status = CASE WHEN jobs.retry_count < jobs.max_retries
                      THEN 'pending' ELSE 'failed' END::scraping_job_status,
        run_at = CASE WHEN jobs.retry_count < jobs.max_retries
                      THEN now() + make_interval(secs => least(
                          %(cap_seconds)s::double precision,
                          coalesce(%(retry_after_seconds)s::double precision,
                                   least(%(cap_seconds)s::double precision,
                                         jobs.retry_backoff_seconds * power(2, jobs.retry_count))
                                   * %(jitter)s::double precision)))
                      ELSE jobs.run_at END,
        finished_at = CASE WHEN jobs.retry_count < jobs.max_retries THEN NULL ELSE now() END,
        retry_count = CASE WHEN jobs.retry_count < jobs.max_retries
                           THEN jobs.retry_count + 1 ELSE jobs.retry_count END,
        lease_expires_at = NULL,
        last_error = %(error)s,
        last_error_reason = %(reason)s,
        updated_at = now()
    WHERE jobs.id = %(id)s AND jobs.attempt = %(attempt)s AND jobs.status = 'processing'
      -- The host's lock first (the InitPlan runs before the row is locked): a claim holding
      -- the host may be waiting for this row.
      AND (SELECT count(*) FROM paused) >= 0
    RETURNING jobs.id, jobs.attempt, jobs.queue, jobs.status, jobs.processed_by,
              jobs.processing_started_at
),
host_paused AS (
    UPDATE scrapeq_hosts AS hosts
    SET recent_responses = paused.responses,
        recent_responses_at = CASE WHEN %(server_error)s THEN now()
                                   ELSE hosts.recent_responses_at END,
        breaker_trips = paused.trips,
        next_allowed_at = CASE WHEN paused.pause IS NULL THEN hosts.next_allowed_at
            ELSE greatest(hosts.next_allowed_at, now() + make_interval(secs => paused.pause)) END,
        paused_until = CASE WHEN paused.pause IS NULL THEN hosts.paused_until
            ELSE now() + make_interval(secs => paused.pause) END,
        pause_reason = CASE WHEN paused.pause IS NULL THEN hosts.pause_reason
            ELSE %(reason)s END,
        adaptive_limit = paused.adaptive_limit,
        max_in_flight = CASE WHEN paused.lowered THEN floor(paused.adaptive_limit)::integer
                             ELSE hosts.max_in_flight END,
        adaptive_lowered_at = CASE WHEN paused.lowered THEN now()
                                   ELSE hosts.adaptive_lowered_at END
    FROM paused
    WHERE hosts.host_key = paused.host_key
),
logged AS (
    INSERT INTO scrapeq_attempts (job_id, attempt, worker_id, started_at, outcome, reason, error,
                                  duration_seconds)
    SELECT id, attempt, processed_by, processing_started_at,
           CASE WHEN status = 'failed' THEN 'failed' ELSE 'retrying' END,
           %(reason)s, %(error)s, %(duration_seconds)s
    FROM decided
),
counted AS (
    INSERT INTO scrapeq_queue_counters AS counters (queue, outcome, shard, total)
    SELECT queue, 'failed', pg_backend_pid() %% 16, count(*) FROM decided
    WHERE status = 'failed'
    GROUP BY queue
    ON CONFLICT (queue, outcome, shard) DO UPDATE SET total = counters.total + excluded.total
)
SELECT status::text FROM decided
"""

# Fails the attempt and the job for good (no retry), fenced by id + attempt + processing.
JOB_FAIL: Final = """
WITH failed AS (
    UPDATE scraping_jobs AS jobs
    SET status = 'failed', finished_at = now(), lease_expires_at = NULL,
        last_error = %(error)s, last_error_reason = %(reason)s, updated_at = now()
    WHERE jobs.id = %(id)s AND jobs.attempt = %(attempt)s AND jobs.status = 'processing'
    RETURNING jobs.id, jobs.attempt, jobs.queue, jobs.processed_by, jobs.processing_started_at
),
logged AS (
    INSERT INTO scrapeq_attempts (job_id, attempt, worker_id, started_at, outcome, reason, error,
                                  duration_seconds)
    SELECT id, attempt, processed_by, processing_started_at, 'failed', %(reason)s, %(error)s,
           %(duration_seconds)s
    FROM failed
),
counted AS (
    INSERT INTO scrapeq_queue_counters AS counters (queue, outcome, shard, total)
    SELECT queue, 'failed', pg_backend_pid() %% 16, count(*) FROM failed GROUP BY queue
    ON CONFLICT (queue, outcome, shard) DO UPDATE SET total = counters.total + excluded.total
)
SELECT id FROM failed
"""

# Gives held jobs back untouched (graceful drain): pending and due now, retry_count unchanged,
# the attempt logged as released, and one NOTIFY so another worker picks them up at once.
JOB_RELEASE: Final = """
WITH released AS (
    UPDATE scraping_jobs AS jobs
    SET status = 'pending', run_at = now(), lease_expires_at = NULL, updated_at = now()
    FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS held(id, attempt)
    WHERE jobs.id = held.id AND jobs.attempt = held.attempt
      AND jobs.status = 'processing' AND jobs.processed_by = %(worker_id)s
    RETURNING jobs.id, jobs.attempt, jobs.processed_by, jobs.processing_started_at
),
logged AS (
    INSERT INTO scrapeq_attempts (job_id, attempt, worker_id, started_at, outcome,
                                  duration_seconds)
    SELECT id, attempt, processed_by, processing_started_at, 'released',
           extract(epoch FROM now() - processing_started_at)
    FROM released
),
notified AS (
    SELECT pg_notify('scrapeq_jobs', '') WHERE EXISTS (SELECT FROM released)
)
SELECT (SELECT count(*) FROM released) AS released, (SELECT count(*) FROM notified) AS notified
"""

# Returns rows whose lease expired (their worker died or hung) to pending, due now, counting
# the lost attempt as a retry; rows out of retries fail with reason lease_expired. Rows being
# rescued by another rescuer at the same moment are skipped (SKIP LOCKED).
JOB_RESCUE_EXPIRED: Final = """
WITH expired AS (
    SELECT id FROM scraping_jobs
    WHERE status = 'processing' AND lease_expires_at < now()
    FOR UPDATE SKIP LOCKED
),
rescued AS (
    UPDATE scraping_jobs AS jobs
    SET status = CASE WHEN jobs.retry_count < jobs.max_retries
                      THEN 'pending' ELSE 'failed' END::scraping_job_status,
        finished_at = CASE WHEN jobs.retry_count < jobs.max_retries THEN NULL ELSE now() END,
        retry_count = CASE WHEN jobs.retry_count < jobs.max_retries
                           THEN jobs.retry_count + 1 ELSE jobs.retry_count END,
        run_at = now(),
        lease_expires_at = NULL,
        last_error = format('lease expired: worker %%s stopped renewing attempt %%s',
                            jobs.processed_by, jobs.attempt),
        last_error_reason = 'lease_expired',
        updated_at = now()
    FROM expired
    WHERE jobs.id = expired.id
    RETURNING jobs.id, jobs.attempt, jobs.queue, jobs.status, jobs.processed_by,
              jobs.processing_started_at
),
logged AS (
    INSERT INTO scrapeq_attempts (job_id, attempt, worker_id, started_at, outcome, reason, error,
                                  duration_seconds)
    SELECT id, attempt, processed_by, processing_started_at, 'expired', 'lease_expired',
           'lease expired before the worker finished',
           extract(epoch FROM now() - processing_started_at)
    FROM rescued
),
counted AS (
    INSERT INTO scrapeq_queue_counters AS counters (queue, outcome, shard, total)
    SELECT queue, 'failed', pg_backend_pid() %% 16, count(*) FROM rescued
    WHERE status = 'failed'
    GROUP BY queue ORDER BY queue
    ON CONFLICT (queue, outcome, shard) DO UPDATE SET total = counters.total + excluded.total
),
notified AS (
    SELECT pg_notify('scrapeq_jobs', '') WHERE EXISTS (SELECT FROM rescued WHERE status = 'pending')
)
SELECT (SELECT count(*) FROM rescued) AS rescued, (SELECT count(*) FROM notified) AS notified
"""

# --- producers ----------------------------------------------------------------------------------

# Inserts rows from parallel arrays (one statement, so the trigger sends one NOTIFY); a row
# whose (owner_uid, dedup_key) already exists is skipped. Returns the new ids. The rows of an
# owner with an output are inserted undelivered (one look-up per statement; sql/output_rows.sql
# marks what an insert leaves unmarked, at the cost of an update).
JOB_INSERT_MANY: Final = """
INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload, queue, priority, max_retries,
                           retry_backoff_seconds, run_at, owner_uid, owner_namespace,
                           owner_name, dedup_key, host_key, retain_for, notify_finished,
                           undelivered)
SELECT new.url, new.parser_type, coalesce(new.payload, %(payload)s::jsonb), %(queue)s,
       new.priority, %(max_retries)s,
       %(backoff_seconds)s, coalesce(%(run_at)s::timestamptz, now()), %(owner_uid)s,
       %(owner_namespace)s, %(owner_name)s, new.dedup_key, new.host_key,
       %(retain_for)s::interval, %(notify_finished)s,
       EXISTS (SELECT FROM scrapeq_outputs WHERE owner_uid = %(owner_uid)s)
FROM unnest(%(urls)s::text[], %(parser_types)s::text[], %(payloads)s::jsonb[],
            %(priorities)s::integer[], %(dedup_keys)s::text[], %(host_keys)s::text[])
     AS new(url, parser_type, payload, priority, dedup_key, host_key)
ON CONFLICT (owner_uid, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
RETURNING id
"""

# The owner's rows lock of JOB_FOLLOW_LOCK, by owner: a cancel takes it before it reads the
# owner's rows, so that no batch of followed links or of a source's expansion commits between
# the cancel's snapshot and its end (such rows would stay pending).
OWNER_ROWS_LOCK: Final = """
SELECT pg_advisory_xact_lock(hashtextextended('scrapeq-follow:' || %(owner_uid)s, 0))
"""

# Cancels every pending or in-flight row of an owner; an in-flight worker's later write is
# fenced out because the row is no longer `processing`. Returns how many rows were cancelled.
# Rows are locked in id order, the order every multi-row write of this package uses, so a
# cancel and a worker's batched completion can never deadlock.
OWNER_CANCEL: Final = """
WITH targets AS (
    SELECT id, status FROM scraping_jobs AS jobs
    WHERE jobs.owner_uid = %(owner_uid)s AND jobs.status IN ('pending', 'processing')
    ORDER BY id
    FOR UPDATE
),
cancelled AS (
    UPDATE scraping_jobs AS jobs
    SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL, updated_at = now()
    FROM targets
    WHERE jobs.id = targets.id AND jobs.status IN ('pending', 'processing')
    RETURNING jobs.id, jobs.attempt, jobs.queue, jobs.processed_by, jobs.processing_started_at,
              targets.status AS previous_status
),
logged AS (
    INSERT INTO scrapeq_attempts (job_id, attempt, worker_id, started_at, outcome,
                                  duration_seconds)
    SELECT id, attempt, processed_by, processing_started_at, 'cancelled',
           extract(epoch FROM now() - processing_started_at)
    FROM cancelled
    WHERE previous_status = 'processing'
),
counted AS (
    INSERT INTO scrapeq_queue_counters AS counters (queue, outcome, shard, total)
    SELECT queue, 'cancelled', pg_backend_pid() %% 16, count(*) FROM cancelled
    GROUP BY queue ORDER BY queue
    ON CONFLICT (queue, outcome, shard) DO UPDATE SET total = counters.total + excluded.total
)
SELECT count(*) FROM cancelled
"""

# The same as OWNER_CANCEL for explicit job ids.
JOBS_CANCEL: Final = OWNER_CANCEL.replace(
    "jobs.owner_uid = %(owner_uid)s", "jobs.id = ANY(%(ids)s::bigint[])"
)

# --- inspection ---------------------------------------------------------------------------------

# Row counts per state for the given owners (index scan on owner_uid), and the pages the site
# blocked on a session (each recorded in its row's tried_sessions).
OWNER_PROGRESS_COUNTS: Final = """
SELECT owner_uid,
       count(*) AS total,
       count(*) FILTER (WHERE status = 'pending' AND retry_count = 0) AS pending,
       count(*) FILTER (WHERE status = 'pending' AND retry_count > 0) AS retrying,
       count(*) FILTER (WHERE status = 'processing') AS processing,
       count(*) FILTER (WHERE status = 'completed') AS succeeded,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       min(processing_started_at) AS first_started_at,
       max(finished_at) AS last_finished_at,
       -- Rows with a crawl key, from the flags their completion kept (scrapeq_crawl_flags):
       -- the results themselves are not read.
       count(*) FILTER (WHERE status = 'completed' AND crawl_flags & 1 <> 0) AS changed,
       count(*) FILTER (WHERE status = 'completed' AND crawl_flags & 2 <> 0) AS unchanged,
       count(*) FILTER (WHERE status = 'completed' AND crawl_flags & 4 <> 0)
           AS without_validators,
       count(*) FILTER (WHERE status = 'completed' AND crawl_flags & 8 <> 0) AS skipped,
       coalesce(sum(cardinality(tried_sessions)), 0) AS blocked,
       -- Source rows not finished yet: their expansion may still add rows (docs/queue.md,
       -- "Source rows"), so the total is not known until this is 0.
       count(*) FILTER (WHERE finished_at IS NULL AND payload ? 'source') AS expanding
FROM scraping_jobs
WHERE owner_uid = ANY(%(owner_uids)s::text[])
GROUP BY owner_uid
"""

# The most recent error of each given owner.
OWNER_LAST_ERRORS: Final = """
SELECT DISTINCT ON (owner_uid) owner_uid, last_error, url_to_scrape
FROM scraping_jobs
WHERE owner_uid = ANY(%(owner_uids)s::text[]) AND last_error IS NOT NULL
ORDER BY owner_uid, updated_at DESC, id DESC
"""

# The `limit` most recent results of each given owner.
OWNER_RESULT_PREVIEWS: Final = """
SELECT owner_uid, id, url_to_scrape, result, finished_at
FROM (
    SELECT owner_uid, id, url_to_scrape, result, finished_at,
           row_number() OVER (PARTITION BY owner_uid ORDER BY finished_at DESC, id DESC) AS rank
    FROM scraping_jobs
    WHERE owner_uid = ANY(%(owner_uids)s::text[]) AND status = 'completed'
) AS ranked
WHERE rank <= %(limit)s
ORDER BY owner_uid, rank
"""

# Owners with a row changed after `since` (partial index on updated_at).
OWNERS_CHANGED_SINCE: Final = """
SELECT DISTINCT owner_uid, owner_namespace, owner_name
FROM scraping_jobs
WHERE owner_uid IS NOT NULL AND updated_at > %(since)s
"""

# Makes the current transaction see one snapshot for all its statements (consistent reports).
REPEATABLE_READ: Final = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"

# The database's clock (for owners_changed_since bookkeeping).
DATABASE_NOW: Final = "SELECT now()"

# Backlog of the given queues from the partial indexes on pending and processing rows.
QUEUE_BACKLOG: Final = """
SELECT wanted.queue,
       (SELECT count(*) FROM scraping_jobs AS jobs
        WHERE jobs.status = 'pending' AND jobs.queue = wanted.queue AND jobs.run_at <= now())
           AS due_pending,
       (SELECT count(*) FROM scraping_jobs AS jobs
        WHERE jobs.status = 'pending' AND jobs.queue = wanted.queue AND jobs.run_at > now())
           AS delayed_pending,
       (SELECT count(*) FROM scraping_jobs AS jobs
        WHERE jobs.status = 'processing' AND jobs.queue = wanted.queue) AS processing,
       (SELECT extract(epoch FROM now() - min(jobs.run_at)) FROM scraping_jobs AS jobs
        WHERE jobs.status = 'pending' AND jobs.queue = wanted.queue AND jobs.run_at <= now())
           AS oldest_due_age_seconds
FROM unnest(%(queues)s::text[]) AS wanted(queue)
"""

# In-flight rows of one queue per worker id (processed_by).
QUEUE_BUSY_WORKERS: Final = """
SELECT processed_by, count(*) FROM scraping_jobs
WHERE status = 'processing' AND queue = %(queue)s
GROUP BY processed_by
"""

# Pending rows per queue (partial index; bounded by the live backlog, not the history).
QUEUE_PENDING_STATS: Final = """
SELECT queue,
       count(*) FILTER (WHERE run_at <= now()) AS due_pending,
       count(*) FILTER (WHERE run_at > now()) AS delayed_pending,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())) AS oldest_due_age
FROM scraping_jobs
WHERE status = 'pending'
GROUP BY queue
"""

# Due rows per queue that per-site politeness and the namespace caps let start now: per
# (queue, host) at most the host's limit (scrapeq_host_limit, the claim's own rule, with the pool
# defaults given) less the host's rows in flight, and none of a paused host; where a job set
# limits of its own on the host (scrapeq_site_job_limits), its rows count only up to its own
# limit less its rows in flight (scrapeq_job_limit, the claim's rule too), and none inside its
# own delay. A capped namespace's rows (scrapeq_namespace_limits: its own cap, else `*`'s; rows
# without an owner have none) count, over the queue's hosts (each host's rows of the namespace
# up to the host's free slots), only up to its cap less its rows in flight; the queue's count
# is the lower of the sum over hosts and the sum over namespaces. (A namespace whose rows wait
# in two queues counts its headroom in each.) Every count goes through the partial indexes on
# pending and processing rows, the pending rows read once. A host inside its delay counts as
# startable: it is, within that delay.
QUEUE_STARTABLE_DUE: Final = """
WITH mine AS MATERIALIZED (
    SELECT queue, host_key, coalesce(owner_uid, '') AS owner_key,
           coalesce(owner_namespace, '') AS namespace, count(*) AS rows
    FROM scraping_jobs
    WHERE status = 'pending' AND run_at <= now()
    GROUP BY queue, host_key, owner_key, namespace
),
-- Per queue, host and namespace: the rows the jobs' own limits let start.
owned AS (
    SELECT mine.queue, mine.host_key, mine.namespace,
           sum(CASE WHEN own.host_key IS NULL THEN mine.rows
                    WHEN last.updated_at + make_interval(secs => own.delay_seconds) > now()
                        THEN 0
                    WHEN scrapeq_job_limit(own.max_in_flight, own.delay_seconds) IS NULL
                        THEN mine.rows
                    ELSE least(mine.rows, greatest(0,
                        scrapeq_job_limit(own.max_in_flight, own.delay_seconds)
                        - coalesce(own_busy.rows, 0))) END) AS rows
    FROM mine
    LEFT JOIN scrapeq_site_job_limits AS own
        ON own.host_key = mine.host_key AND own.owner_key = mine.owner_key
    LEFT JOIN scraping_jobs AS last ON last.id = own.last_claimed_id
    LEFT JOIN (SELECT host_key, coalesce(owner_uid, '') AS owner_key, count(*) AS rows
               FROM scraping_jobs WHERE status = 'processing'
               GROUP BY host_key, owner_key) AS own_busy
        ON own_busy.host_key = mine.host_key AND own_busy.owner_key = mine.owner_key
    GROUP BY mine.queue, mine.host_key, mine.namespace
),
-- Per host not paused: its free slots.
open_hosts AS (
    SELECT due.host_key,
           scrapeq_host_limit(hosts.max_in_flight, hosts.delay_seconds,
                              hosts.crawl_delay_seconds, hosts.breaker_trips,
                              %(default_limit)s::integer,
                              %(default_delay_seconds)s::double precision)
           - coalesce(busy.rows, 0) AS free
    FROM (SELECT DISTINCT host_key FROM mine) AS due
    LEFT JOIN scrapeq_hosts AS hosts ON hosts.host_key = due.host_key
    LEFT JOIN (SELECT host_key, count(*) AS rows FROM scraping_jobs
               WHERE status = 'processing'
               GROUP BY host_key) AS busy ON busy.host_key = due.host_key
    WHERE hosts.paused_until IS NULL OR hosts.paused_until <= now()
),
by_sites AS (
    SELECT per_host.queue, sum(greatest(0, least(per_host.rows, open_hosts.free)))::bigint AS rows
    FROM (SELECT queue, host_key, sum(rows) AS rows FROM owned GROUP BY queue, host_key)
         AS per_host
    JOIN open_hosts ON open_hosts.host_key = per_host.host_key
    GROUP BY per_host.queue
),
by_namespaces AS (
    SELECT due.queue,
           sum(CASE WHEN capped.cap IS NULL THEN due.rows
                    ELSE least(due.rows, greatest(0, capped.cap - coalesce(busy.rows, 0)))
               END)::bigint AS rows
    FROM (SELECT owned.queue, owned.namespace,
                 sum(greatest(0, least(owned.rows, open_hosts.free))) AS rows
          FROM owned JOIN open_hosts ON open_hosts.host_key = owned.host_key
          GROUP BY owned.queue, owned.namespace) AS due
    CROSS JOIN LATERAL (
        SELECT CASE WHEN due.namespace = '' THEN NULL ELSE coalesce(
            (SELECT caps.max_in_flight FROM scrapeq_namespace_limits AS caps
             WHERE caps.owner_namespace = due.namespace),
            (SELECT caps.max_in_flight FROM scrapeq_namespace_limits AS caps
             WHERE caps.owner_namespace = '*')) END AS cap
    ) AS capped
    LEFT JOIN LATERAL (
        SELECT count(*) AS rows FROM scraping_jobs AS jobs
        WHERE jobs.owner_namespace = due.namespace AND jobs.status = 'processing'
    ) AS busy ON capped.cap IS NOT NULL
    GROUP BY due.queue
)
SELECT by_sites.queue, least(by_sites.rows, by_namespaces.rows)
FROM by_sites JOIN by_namespaces ON by_namespaces.queue = by_sites.queue
"""

# In-flight rows per queue (partial index).
QUEUE_PROCESSING_STATS: Final = """
SELECT queue, count(*) FROM scraping_jobs WHERE status = 'processing' GROUP BY queue
"""

# Finished totals per queue and outcome, summed over the counter shards.
QUEUE_FINISHED_TOTALS: Final = """
SELECT queue, outcome::text, sum(total)::bigint FROM scrapeq_queue_counters GROUP BY queue, outcome
"""

# The most recent permanent failures (partial index on failed rows).
JOBS_LATEST_FAILURES: Final = """
SELECT id, queue, url_to_scrape, retry_count, last_error_reason, last_error, finished_at
FROM scraping_jobs
WHERE status = 'failed'
ORDER BY finished_at DESC, id DESC
LIMIT %(limit)s
"""

# Every attempt of one job, oldest first: "what happened to this URL". The finished ones come
# from scrapeq_attempts; the one in flight (if any) from the job row, as outcome `running`.
JOB_ATTEMPTS: Final = """
SELECT job_id, attempt, worker_id, started_at, finished_at, outcome, reason, error,
       duration_seconds
FROM scrapeq_attempts WHERE job_id = %(id)s
UNION ALL
SELECT id, attempt, processed_by, processing_started_at, NULL, 'running', NULL, NULL, NULL
FROM scraping_jobs WHERE id = %(id)s AND status = 'processing'
ORDER BY attempt
"""

# --- maintenance --------------------------------------------------------------------------------

# Deletes up to `batch` finished rows past their retention (attempts go with them by cascade).
# The one rule (docs/queue.md, "Retention"): a row a sink still waits for (`undelivered`) is
# never deleted; a row with its own `retain_for` goes that long after it finished, whatever its
# final state; otherwise only a ScrapeJob's row (an owner) goes: completed and cancelled ones
# finished before `completed_before`, failed ones before `failed_before` when given. A row
# without an owner and without `retain_for` is a SQL producer's and stays. Batched so no single
# transaction grows large.
JOBS_PRUNE_BATCH: Final = """
WITH doomed AS (
    SELECT id FROM scraping_jobs
    WHERE finished_at IS NOT NULL
      AND NOT undelivered
      AND ((retain_for IS NOT NULL AND finished_at < %(now)s::timestamptz - retain_for)
           OR (retain_for IS NULL AND owner_uid IS NOT NULL
               AND ((status IN ('completed', 'cancelled') AND finished_at < %(completed_before)s)
                    OR (status = 'failed' AND finished_at < %(failed_before)s::timestamptz))))
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM scraping_jobs AS jobs USING doomed WHERE jobs.id = doomed.id RETURNING jobs.id
)
SELECT count(*) FROM deleted
"""

# Dead-letter retention, step 1: per queue with failed rows of ScrapeJobs that follow the
# operator's retention (an owner, no `retain_for`), the (finished_at, id) of the newest such row
# beyond the `keep` newest ones. Every such failed row of that queue at or before it is past the
# limit; a queue with at most `keep` of them is not listed. Computed once per prune so each
# delete batch below is an index range, not a ranking of every failed row.
JOBS_FAILED_RETENTION_CUTOFFS: Final = """
SELECT queues.queue, cutoff.finished_at, cutoff.id
FROM (SELECT DISTINCT queue FROM scraping_jobs
      WHERE status = 'failed' AND owner_uid IS NOT NULL AND retain_for IS NULL) AS queues
CROSS JOIN LATERAL (
    SELECT jobs.finished_at, jobs.id FROM scraping_jobs AS jobs
    WHERE jobs.status = 'failed' AND jobs.queue = queues.queue
      AND jobs.owner_uid IS NOT NULL AND jobs.retain_for IS NULL
    ORDER BY jobs.finished_at DESC, jobs.id DESC
    OFFSET %(keep)s LIMIT 1
) AS cutoff
"""

# Dead-letter retention, step 2: deletes up to `batch` of those failed rows at or before their
# queue's cutoff (parallel arrays from step 1), attempts by cascade; never an `undelivered` one.
# A row that failed after the cutoffs were computed is newer than its cutoff and stays, so at
# least `keep` rows per queue remain.
JOBS_PRUNE_FAILED_BEYOND_BATCH: Final = """
WITH doomed AS (
    SELECT jobs.id
    FROM scraping_jobs AS jobs
    JOIN unnest(%(queues)s::text[], %(finished_ats)s::timestamptz[], %(ids)s::bigint[])
         AS cutoff(queue, finished_at, id) ON jobs.queue = cutoff.queue
    WHERE jobs.status = 'failed' AND (jobs.finished_at, jobs.id) <= (cutoff.finished_at, cutoff.id)
      AND jobs.owner_uid IS NOT NULL AND jobs.retain_for IS NULL AND NOT jobs.undelivered
    LIMIT %(batch)s
    FOR UPDATE OF jobs SKIP LOCKED
),
deleted AS (
    DELETE FROM scraping_jobs AS jobs USING doomed WHERE jobs.id = doomed.id RETURNING jobs.id
)
SELECT count(*) FROM deleted
"""

# Idle hosts, step 1 (in a transaction with step 2): locks up to `batch` host rows from
# `from_host` on (host-key order, so a prune walks the table once; `from_host` itself only when
# `first`: the previous batch ended there) that look idle: no claim
# since `idle_before`, no delay or pause still running. SKIP LOCKED passes over hosts a claim,
# a retry or a producer holds (a producer holds KEY SHARE until it commits, and waits for these
# locks): while locked here, no statement can make rows of these hosts pending.
HOSTS_IDLE_LOCK: Final = """
SELECT hosts.host_key FROM scrapeq_hosts AS hosts
WHERE hosts.host_key >= %(from_host)s AND (hosts.host_key > %(from_host)s OR %(first)s)
  AND hosts.touched_at < %(idle_before)s
  AND hosts.next_allowed_at <= now()
  AND (hosts.paused_until IS NULL OR hosts.paused_until <= now())
ORDER BY hosts.host_key
LIMIT %(batch)s
FOR UPDATE OF hosts SKIP LOCKED
"""

# Idle hosts, step 2: of the hosts step 1 locked, deletes those still idle, with their heads.
# Its snapshot is newer than step 1's locks, so it sees every producer that committed before
# them: a host with a pending row (due or not; the rows, not the heads, which may be stale), or
# a row in flight, stays.
HOSTS_IDLE_DELETE: Final = """
WITH idle AS (
    SELECT hosts.host_key FROM scrapeq_hosts AS hosts
    WHERE hosts.host_key = ANY(%(host_keys)s::text[])
      AND hosts.touched_at < %(idle_before)s AND hosts.next_allowed_at <= now()
      AND (hosts.paused_until IS NULL OR hosts.paused_until <= now())
      AND NOT EXISTS (SELECT FROM scraping_jobs AS jobs
                      WHERE jobs.host_key = hosts.host_key AND jobs.status = 'pending')
      AND NOT EXISTS (SELECT FROM scraping_jobs AS jobs
                      WHERE jobs.host_key = hosts.host_key AND jobs.status = 'processing')
),
heads AS (
    DELETE FROM scrapeq_host_queues AS known USING idle WHERE known.host_key = idle.host_key
),
deleted AS (
    DELETE FROM scrapeq_hosts AS hosts USING idle WHERE hosts.host_key = idle.host_key
    RETURNING hosts.host_key
)
SELECT count(*) FROM deleted
"""

# Deletes up to `batch` copies of robots.txt expired before `expired_before` whose origin no
# worker is fetching.
ROBOTS_PRUNE_BATCH: Final = """
WITH doomed AS (
    SELECT robots.origin FROM scrapeq_robots AS robots
    WHERE robots.expires_at < %(expired_before)s
      AND (robots.fetching_until IS NULL OR robots.fetching_until <= now())
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM scrapeq_robots AS robots USING doomed WHERE robots.origin = doomed.origin
    RETURNING robots.origin
)
SELECT count(*) FROM deleted
"""

# --- crawl memory (decision record 14) ----------------------------------------------------------

# What crawls remember of a list of URLs, with each memory's age by the database's clock: one
# primary-key look-up per (crawl key, URL hash); a URL never fetched gives no row. `position` is
# the pair's place in the lists, from 1.
CRAWL_MEMORY_READ: Final = """
SELECT asked.position, memory.etag, memory.last_modified, memory.content_hash,
       memory.result_hash, memory.fetched_at, memory.changed_at,
       extract(epoch FROM now() - memory.fetched_at)::double precision
FROM unnest(%(crawl_keys)s::text[], %(url_hashes)s::bytea[])
         WITH ORDINALITY AS asked(crawl_key, url_hash, position)
JOIN scrapeq_crawl_memory AS memory
    ON memory.crawl_key = asked.crawl_key AND memory.url_hash = asked.url_hash
"""

# Records fetches of URLs, one row each (the caller passes each (crawl key, URL) once): one
# upsert, atomic per URL (a concurrent writer of the same URL waits for its row and then applies
# its own whole). A fetch older than the remembered one changes nothing (no row returned). A 304
# (a NULL result_hash) keeps the remembered hashes and any validator it did not send again;
# otherwise changed_at moves when the result's hash differs.
# How a fetch updates what the crawl remembers of its URL (the conflict clause of both memory
# writes below).
_CRAWL_MEMORY_UPDATE: Final = """
ON CONFLICT (crawl_key, url_hash) DO UPDATE SET
    etag = CASE WHEN excluded.result_hash IS NULL THEN coalesce(excluded.etag, memory.etag)
                ELSE excluded.etag END,
    last_modified = CASE WHEN excluded.result_hash IS NULL
                         THEN coalesce(excluded.last_modified, memory.last_modified)
                         ELSE excluded.last_modified END,
    content_hash = CASE WHEN excluded.result_hash IS NULL THEN memory.content_hash
                        ELSE excluded.content_hash END,
    result_hash = coalesce(excluded.result_hash, memory.result_hash),
    fetched_at = excluded.fetched_at,
    changed_at = CASE WHEN excluded.result_hash IS NOT NULL
                           AND excluded.result_hash IS DISTINCT FROM memory.result_hash
                      THEN excluded.fetched_at ELSE memory.changed_at END
    WHERE memory.fetched_at <= excluded.fetched_at"""

CRAWL_MEMORY_WRITE: Final = (
    """
INSERT INTO scrapeq_crawl_memory AS memory
    (crawl_key, url_hash, url, etag, last_modified, content_hash, result_hash, fetched_at,
     changed_at)
SELECT page.crawl_key, page.url_hash, page.url, page.etag, page.last_modified,
       page.content_hash, page.result_hash, coalesce(%(fetched_at)s::timestamptz, now()),
       coalesce(%(fetched_at)s::timestamptz, now())
FROM unnest(%(crawl_keys)s::text[], %(url_hashes)s::bytea[], %(urls)s::text[],
            %(etags)s::text[], %(last_modifieds)s::text[], %(content_hashes)s::bytea[],
            %(result_hashes)s::bytea[])
     AS page (crawl_key, url_hash, url, etag, last_modified, content_hash, result_hash)
"""
    + _CRAWL_MEMORY_UPDATE
    + """
RETURNING 1
"""
)

# JOB_COMPLETE_MANY that also records the fetches of its completions in the crawl memory, in
# the same statement (one commit, no memory of a fetch whose result was not stored): each
# memory entry names its row (%(memory_ids)s), and only the entries of rows that completed are
# written; of two entries of one (crawl key, URL hash) the later given wins. Key order is the
# lock order of every memory write.
JOB_COMPLETE_MANY_REMEMBERING: Final = (
    _JOB_COMPLETE_MANY_CTES
    + """,
remembered AS (
    INSERT INTO scrapeq_crawl_memory AS memory
        (crawl_key, url_hash, url, etag, last_modified, content_hash, result_hash, fetched_at,
         changed_at)
    SELECT DISTINCT ON (page.crawl_key, page.url_hash)
           page.crawl_key, page.url_hash, page.url, page.etag, page.last_modified,
           page.content_hash, page.result_hash, now(), now()
    FROM unnest(%(memory_ids)s::bigint[], %(crawl_keys)s::text[], %(url_hashes)s::bytea[],
                %(urls)s::text[], %(etags)s::text[], %(last_modifieds)s::text[],
                %(content_hashes)s::bytea[], %(result_hashes)s::bytea[]) WITH ORDINALITY
         AS page (job_id, crawl_key, url_hash, url, etag, last_modified, content_hash,
                  result_hash, position)
    WHERE page.job_id IN (SELECT id FROM done)
    ORDER BY page.crawl_key, page.url_hash, page.position DESC
"""
    + _CRAWL_MEMORY_UPDATE
    + """
)
SELECT id FROM done
"""
)

# Deletes up to `batch` URLs of one crawl (its schedule was deleted).
CRAWL_MEMORY_FORGET_BATCH: Final = """
WITH deleted AS (
    DELETE FROM scrapeq_crawl_memory AS memory
    WHERE (memory.crawl_key, memory.url_hash) IN (
        SELECT crawl_key, url_hash FROM scrapeq_crawl_memory
        WHERE crawl_key = %(crawl_key)s LIMIT %(batch)s
    )
    RETURNING 1
)
SELECT count(*) FROM deleted
"""

# Deletes up to `batch` URLs fetched before `fetched_before`, oldest first (the age bound).
CRAWL_MEMORY_PRUNE_BATCH: Final = """
WITH deleted AS (
    DELETE FROM scrapeq_crawl_memory AS memory
    WHERE (memory.crawl_key, memory.url_hash) IN (
        SELECT crawl_key, url_hash FROM scrapeq_crawl_memory
        WHERE fetched_at < %(fetched_before)s ORDER BY fetched_at LIMIT %(batch)s
    )
    RETURNING 1
)
SELECT count(*) FROM deleted
"""

# --- dead jobs and export -----------------------------------------------------------------------

# Failed rows, newest first, optionally narrowed to a queue and/or an owner (namespace, name);
# a NULL filter matches everything. Uses the (finished_at) WHERE status = 'failed' index.
JOBS_FAILED: Final = """
SELECT id, queue, url_to_scrape, retry_count, last_error_reason, last_error, finished_at
FROM scraping_jobs
WHERE status = 'failed'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(owner_namespace)s::text IS NULL OR owner_namespace = %(owner_namespace)s::text)
  AND (%(owner_name)s::text IS NULL OR owner_name = %(owner_name)s::text)
ORDER BY finished_at DESC, id DESC
LIMIT %(limit)s
"""

# Puts failed rows matching every given filter (NULL = not filtered) back to pending, due now,
# with a fresh retry budget; finished_at and the lease are cleared (the CHECKs require it),
# last_error and the attempts history are kept. One NOTIFY wakes the workers when any row moved.
# `error_pattern` is an ILIKE pattern the caller has already escaped and wrapped in %.
JOBS_RETRY_FAILED: Final = """
WITH retried AS (
    UPDATE scraping_jobs AS jobs
    SET status = 'pending', run_at = now(), retry_count = 0, finished_at = NULL,
        lease_expires_at = NULL, updated_at = now()
    WHERE jobs.status = 'failed'
      AND (%(ids)s::bigint[] IS NULL OR jobs.id = ANY (%(ids)s::bigint[]))
      AND (%(queue)s::text IS NULL OR jobs.queue = %(queue)s::text)
      AND (%(owner_namespace)s::text IS NULL OR jobs.owner_namespace = %(owner_namespace)s::text)
      AND (%(owner_name)s::text IS NULL OR jobs.owner_name = %(owner_name)s::text)
      AND (%(owner_uid)s::text IS NULL OR jobs.owner_uid = %(owner_uid)s::text)
      AND (%(error_pattern)s::text IS NULL OR jobs.last_error ILIKE %(error_pattern)s::text)
    RETURNING jobs.id
),
notified AS (
    SELECT pg_notify('scrapeq_jobs', '') WHERE EXISTS (SELECT FROM retried)
)
SELECT (SELECT count(*) FROM retried) AS retried, (SELECT count(*) FROM notified) AS notified
"""

# Completed rows of one owner (namespace, name), optionally one queue, in id order, for
# `scrapeq export`; read through a server-side cursor so the client holds one batch at a time.
JOBS_EXPORT_COMPLETED: Final = """
SELECT url_to_scrape, status::text, finished_at, result
FROM scraping_jobs
WHERE status = 'completed'
  AND owner_namespace = %(owner_namespace)s::text AND owner_name = %(owner_name)s::text
  AND (%(owner_uid)s::text IS NULL OR owner_uid = %(owner_uid)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY id
"""

# Every ScrapeJob (uid) that ever had rows under one namespace/name, the most recently created
# first (by its oldest row): a name can be reused after a delete, and `scrapeq export NAME`
# means the latest one.
OWNERS_BY_NAME: Final = """
SELECT owner_uid, min(created_at) AS first_row_at, count(*) FILTER (WHERE status = 'completed')
FROM scraping_jobs
WHERE owner_namespace = %(owner_namespace)s::text AND owner_name = %(owner_name)s::text
GROUP BY owner_uid
ORDER BY first_row_at DESC, owner_uid
"""

# The namespaces in which a ScrapeJob of this name ever had rows: `scrapeq export NAME` without
# a namespace takes the only one (run inside the operator's pod, no kubectl context says which).
OWNER_NAMESPACES_BY_NAME: Final = """
SELECT DISTINCT owner_namespace FROM scraping_jobs
WHERE owner_name = %(owner_name)s::text AND owner_namespace IS NOT NULL
ORDER BY owner_namespace
"""

# The values of one result field across an owner's completed rows, in row order: an extracted
# field (result.fields.<name>) or, failing that, a top-level key such as "links"; a list is
# unnested, anything else taken as one value. With the page's URL, to resolve relative links.
OWNER_RESULT_FIELD_VALUES: Final = """
SELECT coalesce(jobs.result->>'final_url', jobs.url_to_scrape) AS page_url, item.value
FROM scraping_jobs AS jobs,
     LATERAL (SELECT coalesce(jobs.result->'fields'->%(field)s, jobs.result->%(field)s)
              AS found) AS source,
     LATERAL jsonb_array_elements_text(
         CASE jsonb_typeof(source.found) WHEN 'array' THEN source.found
              ELSE jsonb_build_array(source.found) END) WITH ORDINALITY AS item(value, position)
WHERE jobs.owner_uid = %(owner_uid)s AND jobs.status = 'completed'
  AND source.found IS NOT NULL AND jsonb_typeof(source.found) <> 'null'
ORDER BY jobs.id, item.position
LIMIT %(limit)s
"""


# --- published parsers (docs/parsers.md, "Publication") ------------------------------------------

# Records the parsers a worker loaded for each queue it serves (one row per queue, replaced),
# and deletes every worker's rows not refreshed for `keep_seconds`.
PARSERS_PUBLISH: Final = """
WITH published AS (
    INSERT INTO scrapeq_worker_parsers AS published_row (queue, worker_id, parsers, published_at)
    SELECT queue, %(worker_id)s, %(parsers)s::text[], now()
    FROM unnest(%(queues)s::text[]) AS queue
    ON CONFLICT (queue, worker_id)
        DO UPDATE SET parsers = excluded.parsers, published_at = excluded.published_at
    RETURNING 1
)
DELETE FROM scrapeq_worker_parsers
WHERE published_at < now() - make_interval(secs => %(keep_seconds)s)
  -- The publisher's own rows are the CTE's: one statement must not touch a row twice.
  AND worker_id <> %(worker_id)s
"""

# How many workers ever published for the queue (within the kept week), and the union of
# their parsers.
PARSERS_OF_QUEUE: Final = """
SELECT count(DISTINCT worker.worker_id),
       coalesce(array_agg(DISTINCT name) FILTER (WHERE name IS NOT NULL), '{}')
FROM scrapeq_worker_parsers AS worker
LEFT JOIN LATERAL unnest(worker.parsers) AS name ON true
WHERE worker.queue = %(queue)s
"""

# --- webhook outbox (operator) ------------------------------------------------------------------

# Records one event per (owner, event type, endpoint) from parallel arrays; an event already
# recorded is left as it is (its id, its delivery state), so recording again after a restart
# neither doubles nor resets one. Returns how many events are new.
WEBHOOK_EVENTS_RECORD: Final = """
WITH inserted AS (
    INSERT INTO scrapeq_webhook_events
        (event_id, owner_uid, owner_namespace, owner_name, event_type, url, secret_name,
         secret_key, data)
    SELECT event_id, %(owner_uid)s, %(owner_namespace)s, %(owner_name)s, %(event_type)s, url,
           secret_name, secret_key, %(data)s::jsonb
    FROM unnest(%(event_ids)s::uuid[], %(urls)s::text[], %(secret_names)s::text[],
                %(secret_keys)s::text[]) AS event(event_id, url, secret_name, secret_key)
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM inserted
"""

# Records the Batch event of one uploaded output batch for each endpoint that asked for it; an
# event already recorded (the batch marked again after a crash) stays as it is.
WEBHOOK_BATCH_EVENTS_RECORD: Final = """
WITH inserted AS (
    INSERT INTO scrapeq_webhook_events
        (event_id, owner_uid, owner_namespace, owner_name, event_type, url, secret_name,
         secret_key, data, batch_sequence)
    SELECT event_id, %(owner_uid)s, %(owner_namespace)s, %(owner_name)s, 'Batch', url,
           secret_name, secret_key, %(data)s::jsonb, %(sequence)s
    FROM unnest(%(event_ids)s::uuid[], %(urls)s::text[], %(secret_names)s::text[],
                %(secret_keys)s::text[]) AS event(event_id, url, secret_name, secret_key)
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM inserted
"""

# Claims up to `limit` due pending events, oldest due first, and leases each for
# `lease_seconds` (next_attempt_at moves past the delivery's end), counting the attempt. Events
# another operator is claiming at the same moment are skipped (SKIP LOCKED), and one it leased
# is not due: two operators never send one event at once. Returns the events with the
# database's clock.
WEBHOOK_EVENTS_CLAIM: Final = """
UPDATE scrapeq_webhook_events AS events
SET attempts = events.attempts + 1,
    next_attempt_at = now() + make_interval(secs => %(lease_seconds)s)
FROM (
    SELECT id FROM scrapeq_webhook_events
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS due
WHERE events.id = due.id
RETURNING events.id, events.event_id, events.owner_uid, events.owner_namespace,
          events.owner_name, events.event_type, events.url, events.secret_name,
          events.secret_key, events.data, events.attempts, events.created_at, now()
"""

# Ends a claimed attempt: `status` delivered or dead (finished now), or pending again and due
# after `delay_seconds`. Fenced by id + attempts + pending, so an attempt whose lease ran out
# and was claimed again cannot overwrite the newer one. Returns the id (no row: fenced).
WEBHOOK_EVENT_FINISH_ATTEMPT: Final = """
UPDATE scrapeq_webhook_events
SET status = %(status)s,
    next_attempt_at = now() + make_interval(secs => %(delay_seconds)s),
    finished_at = CASE WHEN %(status)s = 'pending' THEN NULL ELSE now() END,
    last_error = left(%(error)s, 1000)
WHERE id = %(id)s AND attempts = %(attempt)s AND status = 'pending'
RETURNING id
"""

# The outbox's events of one owner (tests, `kubectl describe`-like inspection).
WEBHOOK_EVENTS_OF_OWNER: Final = """
SELECT event_id, event_type, url, status, attempts, last_error
FROM scrapeq_webhook_events
WHERE owner_uid = %(owner_uid)s
ORDER BY id
"""

# --- object-storage output (docs/architecture.md, record 12; output_batches.py) ---------------

# Registers a ScrapeJob's output before its first row is inserted (rows inserted afterwards are
# undelivered, sql/output_rows.sql); a second registration keeps the first's settings.
OUTPUT_REGISTER: Final = """
INSERT INTO scrapeq_outputs (owner_uid, owner_namespace, owner_name, format, batch_rows,
                             batch_seconds, key_prefix, changes_only, batch_webhooks)
VALUES (%(owner_uid)s, %(owner_namespace)s, %(owner_name)s, %(format)s, %(batch_rows)s,
        %(batch_seconds)s, %(key_prefix)s, %(changes_only)s, %(batch_webhooks)s::jsonb)
ON CONFLICT (owner_uid) DO NOTHING
"""

# The ScrapeJob ended (a terminal phase, or deleted): the uploader writes the last batch and the
# manifest. The first end counts.
OUTPUT_MARK_ENDED: Final = """
UPDATE scrapeq_outputs SET job_ended_at = coalesce(job_ended_at, now())
WHERE owner_uid = %(owner_uid)s
RETURNING owner_uid
"""

# Outputs with work for the uploader: no manifest yet and not waiting after a failure, the
# longest-waiting first. Taking one moves it to the back (next_attempt_at = now()), so with more
# outputs than `limit` every one gets its turn; SKIP LOCKED lets two uploaders share the work.
OUTPUTS_DUE: Final = """
UPDATE scrapeq_outputs AS outputs SET next_attempt_at = now()
FROM (
    SELECT owner_uid FROM scrapeq_outputs
    WHERE finished_at IS NULL AND next_attempt_at <= now()
    ORDER BY next_attempt_at, owner_uid
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS due
WHERE outputs.owner_uid = due.owner_uid
RETURNING outputs.owner_uid, outputs.owner_namespace, outputs.owner_name, outputs.format,
          outputs.batch_rows, outputs.batch_seconds, outputs.key_prefix, outputs.changes_only,
          outputs.job_ended_at IS NOT NULL, outputs.failures, outputs.batch_webhooks
"""

# What an output waits for: its finished undelivered rows that no open batch holds (how many,
# and how long the oldest has waited), its open batches, and whether any of its rows is still
# unfinished.
OUTPUT_PROGRESS: Final = """
WITH open_rows AS (
    SELECT unnest(row_ids) AS id FROM scrapeq_output_batches
    WHERE owner_uid = %(owner_uid)s AND state = 'cut'
)
SELECT
    (SELECT count(*) FROM scraping_jobs AS jobs
     WHERE jobs.owner_uid = %(owner_uid)s AND jobs.undelivered
       AND jobs.status IN ('completed', 'failed', 'cancelled')
       AND jobs.id NOT IN (SELECT id FROM open_rows)),
    (SELECT extract(epoch FROM now() - min(jobs.finished_at)) FROM scraping_jobs AS jobs
     WHERE jobs.owner_uid = %(owner_uid)s AND jobs.undelivered
       AND jobs.status IN ('completed', 'failed', 'cancelled')
       AND jobs.id NOT IN (SELECT id FROM open_rows)),
    (SELECT count(*) FROM scrapeq_output_batches
     WHERE owner_uid = %(owner_uid)s AND state = 'cut'),
    EXISTS (SELECT 1 FROM scraping_jobs AS jobs
            WHERE jobs.owner_uid = %(owner_uid)s AND jobs.status IN ('pending', 'processing'))
"""

# Locks the output while a batch is cut, so two uploaders never cut the same rows or number.
OUTPUT_LOCK: Final = """
SELECT batches_cut FROM scrapeq_outputs WHERE owner_uid = %(owner_uid)s FOR UPDATE
"""

# Cuts the next batch: up to `limit` finished undelivered rows no open batch holds, oldest
# finish first, numbered batches_cut + 1. Runs under OUTPUT_LOCK in one transaction.
OUTPUT_BATCH_CUT: Final = """
WITH open_rows AS (
    SELECT unnest(row_ids) AS id FROM scrapeq_output_batches
    WHERE owner_uid = %(owner_uid)s AND state = 'cut'
), ready AS (
    SELECT jobs.id FROM scraping_jobs AS jobs
    WHERE jobs.owner_uid = %(owner_uid)s AND jobs.undelivered
      AND jobs.status IN ('completed', 'failed', 'cancelled')
      AND jobs.id NOT IN (SELECT id FROM open_rows)
    ORDER BY jobs.finished_at, jobs.id
    LIMIT %(limit)s
), numbered AS (
    UPDATE scrapeq_outputs SET batches_cut = batches_cut + 1
    WHERE owner_uid = %(owner_uid)s AND EXISTS (SELECT 1 FROM ready)
    RETURNING batches_cut
)
INSERT INTO scrapeq_output_batches (owner_uid, sequence, row_ids)
SELECT %(owner_uid)s, numbered.batches_cut, (SELECT array_agg(id ORDER BY id) FROM ready)
FROM numbered
RETURNING sequence, row_ids, cut_at
"""

# The batches cut but not uploaded yet (after a crash or a failed upload: upload them again).
OUTPUT_BATCHES_OPEN: Final = """
SELECT sequence, row_ids, cut_at FROM scrapeq_output_batches
WHERE owner_uid = %(owner_uid)s AND state = 'cut'
ORDER BY sequence
"""

# What a batch's object holds for each of its rows, in id order.
OUTPUT_BATCH_ROWS: Final = """
SELECT id, url_to_scrape, status, result, last_error, finished_at, payload ? 'source'
FROM scraping_jobs
WHERE id = ANY(%(row_ids)s) AND owner_uid = %(owner_uid)s
ORDER BY id
"""

# Marks a batch uploaded (its object, size and digest) and clears `undelivered` on its rows, in
# one transaction; a batch already uploaded stays as it was (RETURNING nothing).
OUTPUT_BATCH_MARK_UPLOADED: Final = """
WITH batch AS (
    UPDATE scrapeq_output_batches
    SET state = 'uploaded', object_key = %(object_key)s, lines = %(lines)s,
        skipped = %(skipped)s, bytes = %(bytes)s, sha256 = %(sha256)s, counts = %(counts)s,
        uploaded_at = now()
    WHERE owner_uid = %(owner_uid)s AND sequence = %(sequence)s AND state = 'cut'
    RETURNING row_ids
), delivered AS (
    UPDATE scraping_jobs AS jobs SET undelivered = false
    FROM (SELECT unnest(row_ids) AS id FROM batch) AS delivered_rows
    WHERE jobs.id = delivered_rows.id AND jobs.owner_uid = %(owner_uid)s
    RETURNING jobs.id
)
SELECT count(*) FROM delivered
"""

# Every uploaded batch of an output, in order: the manifest's list.
OUTPUT_BATCHES_UPLOADED: Final = """
SELECT sequence, object_key, cardinality(row_ids), lines, skipped, bytes, sha256, counts,
       uploaded_at
FROM scrapeq_output_batches
WHERE owner_uid = %(owner_uid)s AND state = 'uploaded'
ORDER BY sequence
"""

# The manifest is uploaded: the output is finished.
OUTPUT_MARK_FINISHED: Final = """
UPDATE scrapeq_outputs
SET finished_at = now(), manifest_key = %(manifest_key)s, failures = 0, last_error = NULL
WHERE owner_uid = %(owner_uid)s AND finished_at IS NULL
RETURNING owner_uid
"""

# An upload failed: look at this output again after `delay_seconds`; returns the failures in a
# row, counting this one.
OUTPUT_RECORD_FAILURE: Final = """
UPDATE scrapeq_outputs
SET failures = failures + 1, last_error = left(%(error)s, 1000),
    next_attempt_at = now() + make_interval(secs => %(delay_seconds)s)
WHERE owner_uid = %(owner_uid)s
RETURNING failures
"""

# An upload succeeded after failures: the output is healthy again.
OUTPUT_RECORD_SUCCESS: Final = """
UPDATE scrapeq_outputs SET failures = 0, last_error = NULL
WHERE owner_uid = %(owner_uid)s AND failures > 0
RETURNING owner_uid
"""

# One output as the table holds it (inspection, tests).
OUTPUT_OF_OWNER: Final = """
SELECT batches_cut, job_ended_at, manifest_key, finished_at, failures, last_error
FROM scrapeq_outputs WHERE owner_uid = %(owner_uid)s
"""

# --- sessions (sql/sessions.sql) ----------------------------------------------------------------

# The session for one page of a row (the row's own while usable, else the healthiest for the
# site), written to the row; no row when every proxy of the row is retired.
SESSION_CHOOSE: Final = """
SELECT chosen.session_id, chosen.proxy_id, chosen.user_agent, chosen.cookies, chosen.tried
FROM scrapeq_session_choose(%(job_id)s, %(attempt)s, %(host_key)s, %(proxy_ids)s::text[],
                            %(user_agent)s) AS chosen
"""

# How a page went on its session: its jar saved, its health on the site and its proxy's
# counted, the session or the proxy retired at their thresholds.
SESSION_RECORD: Final = """
SELECT recorded.session_retired, recorded.proxy_retired
FROM scrapeq_session_record(%(job_id)s, %(attempt)s, %(session_id)s, %(host_key)s,
                            %(outcome)s, %(cookies)s::jsonb, %(blocks_per_site)s,
                            %(failures_in_a_row)s, %(failed_sites)s,
                            %(retire_seconds)s) AS recorded
"""

# The proxies retired now, of the ids given.
PROXIES_RETIRED: Final = """
SELECT proxies.proxy_id FROM scrapeq_proxies AS proxies
WHERE proxies.proxy_id = ANY(%(proxy_ids)s::text[]) AND proxies.retired_until > now()
ORDER BY proxies.proxy_id
"""

# Sessions untaken since the cutoff go in batches (their health per site with them); a row
# whose session went takes the healthiest next time. SKIP LOCKED: a session being recorded
# now stays.
SESSIONS_PRUNE_BATCH: Final = """
WITH doomed AS (
    SELECT sessions.session_id FROM scrapeq_sessions AS sessions
    WHERE coalesce(sessions.last_used_at, sessions.created_at) < %(expired_before)s
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM scrapeq_sessions AS sessions USING doomed
    WHERE sessions.session_id = doomed.session_id
    RETURNING sessions.session_id
)
SELECT count(*) FROM deleted
"""

# A proxy's failures on a site that are older than the cutoff are forgotten, and a proxy with
# no session left, known since before the cutoff and not retired since, goes.
PROXIES_PRUNE_BATCH: Final = """
WITH stale AS (
    DELETE FROM scrapeq_proxy_sites AS failing
    WHERE failing.last_failed_at < %(expired_before)s
),
doomed AS (
    SELECT proxies.proxy_id FROM scrapeq_proxies AS proxies
    WHERE proxies.created_at < %(expired_before)s
      AND (proxies.retired_until IS NULL OR proxies.retired_until < %(expired_before)s)
      AND NOT EXISTS (
          SELECT FROM scrapeq_sessions AS sessions WHERE sessions.proxy_id = proxies.proxy_id)
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM scrapeq_proxies AS proxies USING doomed
    WHERE proxies.proxy_id = doomed.proxy_id
    RETURNING proxies.proxy_id
)
SELECT count(*) FROM deleted
"""


# --- namespace caps (namespace_limits.py; docs/queue.md, "Namespace caps") -----------------------

# Replace the caps with the given ones in one statement; an unchanged cap is not rewritten.
NAMESPACE_LIMITS_REPLACE: Final = """
WITH given AS (
    SELECT named.owner_namespace, named.max_in_flight
    FROM unnest(%(namespaces)s::text[], %(limits)s::integer[]) AS named(owner_namespace,
                                                                        max_in_flight)
),
removed AS (
    DELETE FROM scrapeq_namespace_limits AS known
    WHERE NOT EXISTS (SELECT FROM given WHERE given.owner_namespace = known.owner_namespace)
)
INSERT INTO scrapeq_namespace_limits AS known (owner_namespace, max_in_flight)
SELECT given.owner_namespace, given.max_in_flight FROM given
ON CONFLICT (owner_namespace) DO UPDATE SET max_in_flight = excluded.max_in_flight,
                                            updated_at = now()
    WHERE known.max_in_flight <> excluded.max_in_flight
"""

# Every cap.
NAMESPACE_LIMITS_READ: Final = """
SELECT owner_namespace, max_in_flight FROM scrapeq_namespace_limits ORDER BY owner_namespace
"""
