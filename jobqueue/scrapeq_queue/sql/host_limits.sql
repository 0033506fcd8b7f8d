-- A site's effective delay and limit (scrapeq_hosts is keyed by site): the one rule the claim (scrapeq_claim) and the
-- autoscaler's backlog count (statements.QUEUE_STARTABLE_DUE) both apply, so that the
-- autoscaler counts exactly the rows a claim would hand out (docs/queue.md, "Limits").
--
-- Both are plain SQL expressions that PostgreSQL inlines into the statements calling them:
-- they cost nothing per call. Neither is STRICT (an inlined STRICT function must be strict in
-- every argument) and each names an argument at most once where that matters.

-- The delay between two requests to a host: its producers' (scrapeq_hosts.delay_seconds), else
-- the claiming pool's default, and never less than robots.txt's Crawl-delay.
CREATE OR REPLACE FUNCTION scrapeq_host_delay(delay_seconds DOUBLE PRECISION,
                                              crawl_delay_seconds DOUBLE PRECISION,
                                              default_delay_seconds DOUBLE PRECISION)
RETURNS DOUBLE PRECISION
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT greatest(coalesce(delay_seconds, default_delay_seconds), crawl_delay_seconds)
$$;

-- How many requests a host may have in flight: 1 while its server-error breaker is tripped
-- (breaker_trips > 0: after the pause, one probe at a time; docs/queue.md, "Server errors") or
-- while it has a delay (a delayed host takes one request at a time), else its producers' limit
-- (scrapeq_hosts.max_in_flight), else the claiming pool's default.
DROP FUNCTION IF EXISTS scrapeq_host_limit(INTEGER, DOUBLE PRECISION, DOUBLE PRECISION, INTEGER,
                                           DOUBLE PRECISION);
CREATE OR REPLACE FUNCTION scrapeq_host_limit(max_in_flight INTEGER,
                                              delay_seconds DOUBLE PRECISION,
                                              crawl_delay_seconds DOUBLE PRECISION,
                                              breaker_trips INTEGER,
                                              default_max_in_flight INTEGER,
                                              default_delay_seconds DOUBLE PRECISION)
RETURNS INTEGER
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN breaker_trips > 0 THEN 1
                WHEN scrapeq_host_delay(delay_seconds, crawl_delay_seconds,
                                        default_delay_seconds) > 0 THEN 1
                ELSE coalesce(max_in_flight, default_max_in_flight) END
$$;

COMMENT ON FUNCTION scrapeq_host_limit(INTEGER, DOUBLE PRECISION, DOUBLE PRECISION, INTEGER,
                                       INTEGER, DOUBLE PRECISION) IS
    'scrapeq: how many requests a site (scrapeq_hosts.host_key) may have in flight; used by the claim and the autoscaler''s backlog count.';
COMMENT ON FUNCTION scrapeq_host_delay(DOUBLE PRECISION, DOUBLE PRECISION, DOUBLE PRECISION) IS
    'scrapeq: the delay between two requests to a site (scrapeq_hosts.host_key); used by the claim and the autoscaler''s backlog count.';

-- How many of one job's rows may be in flight on a site, by the limits the job named for its
-- own rows (scrapeq_site_job_limits): 1 while it has a delay, else its limit; NULL when it named
-- none (only the site's limit binds its rows). The site's limit binds them as well, so a job's
-- own limit can only be stricter (docs/queue.md, "Site policies").
CREATE OR REPLACE FUNCTION scrapeq_job_limit(max_in_flight INTEGER,
                                             delay_seconds DOUBLE PRECISION)
RETURNS INTEGER
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN delay_seconds > 0 THEN 1 ELSE max_in_flight END
$$;

COMMENT ON FUNCTION scrapeq_job_limit(INTEGER, DOUBLE PRECISION) IS
    'scrapeq: how many of one job''s rows may be in flight on a site by its own limits (NULL: none of its own); used by the claim and the autoscaler''s backlog count.';
