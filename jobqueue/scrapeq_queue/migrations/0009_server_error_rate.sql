-- 0009: server errors pause a site by their rate over its recent responses, with a growing,
-- bounded pause and a probe (docs/queue.md, "Server errors"), instead of by a run of errors.
-- The site's state row keeps a window of its last responses as bits and its breaker's trips;
-- the limit rule gives a tripped site one request at a time, and the claim applies it again.

ALTER TABLE scrapeq_hosts
    DROP CONSTRAINT scrapeq_hosts_server_errors_valid,
    DROP COLUMN server_errors,
    DROP COLUMN last_server_error_at,
    ADD COLUMN recent_responses BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN recent_responses_at TIMESTAMPTZ,
    ADD COLUMN breaker_trips INTEGER NOT NULL DEFAULT 0,
    ADD CONSTRAINT scrapeq_hosts_recent_responses_valid
        CHECK (recent_responses >= 0 AND recent_responses < (1::bigint << {{SERVER_ERROR_WINDOW}})),
    ADD CONSTRAINT scrapeq_hosts_breaker_trips_valid CHECK (breaker_trips >= 0);

-- The sites a completion must write (a server error in the window, or a tripped breaker): a
-- completion looks its site up here, in an index of the few troubled sites, so that the
-- completions of healthy sites touch neither their state rows nor the table's primary key.
CREATE INDEX scrapeq_hosts_troubled_idx ON scrapeq_hosts (host_key)
    WHERE recent_responses <> 0 OR breaker_trips > 0;

COMMENT ON COLUMN scrapeq_hosts.recent_responses IS
    'The site''s latest responses as bits, newest in bit 0: 1 a server error (5xx, 429), 0 any other outcome. A window of SERVER_ERROR_WINDOW bits (scrapeq_queue.politeness); a window whose newest response is old starts again empty.';
COMMENT ON COLUMN scrapeq_hosts.recent_responses_at IS
    'When the newest response of recent_responses came.';
COMMENT ON COLUMN scrapeq_hosts.breaker_trips IS
    'How many times in a row the server-error breaker tripped (0: closed). While above 0 the site takes one request at a time after its pause (the probe); a completed row closes it, a server error trips it again with a doubled pause.';
COMMENT ON COLUMN scrapeq_hosts.paused_until IS
    'The latest pause the site asked for (429/503 Retry-After) or earned (its server-error breaker tripped).';

\ir ../sql/host_limits.sql
\ir ../sql/claim.sql
