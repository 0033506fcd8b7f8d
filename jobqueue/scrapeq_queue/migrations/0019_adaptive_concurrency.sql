-- 0019: adaptive concurrency, a site policy's choice (docs/queue.md, "Adaptive concurrency"):
-- the site's limit follows the latency and the server errors of its responses, for the whole
-- cluster, between 1 and the policy's limit. The claim and the autoscaler read the limit where
-- they always did (scrapeq_hosts.max_in_flight): the completions and retries of the site move
-- it.

ALTER TABLE scrapeq_site_policies
    ADD COLUMN adaptive BOOLEAN NOT NULL DEFAULT false,
    ADD CONSTRAINT scrapeq_site_policies_adaptive_bounded
        CHECK (NOT adaptive OR max_in_flight IS NOT NULL);

COMMENT ON COLUMN scrapeq_site_policies.adaptive IS
    'The sites'' limit adapts to their latency and server errors, up to max_in_flight (which it then requires).';

ALTER TABLE scrapeq_hosts
    ADD COLUMN adaptive_ceiling INTEGER,
    ADD COLUMN adaptive_limit DOUBLE PRECISION,
    ADD COLUMN latency_seconds DOUBLE PRECISION,
    ADD COLUMN latency_floor_seconds DOUBLE PRECISION,
    ADD COLUMN adaptive_lowered_at TIMESTAMPTZ,
    ADD CONSTRAINT scrapeq_hosts_adaptive_valid
        CHECK ((adaptive_ceiling IS NULL) = (adaptive_limit IS NULL)
               AND (adaptive_ceiling IS NULL
                    OR (adaptive_limit >= 1 AND adaptive_limit <= adaptive_ceiling)));

COMMENT ON COLUMN scrapeq_hosts.adaptive_ceiling IS
    'The limit an adaptive site may grow to (its policy''s); NULL: the site''s limit does not adapt.';
COMMENT ON COLUMN scrapeq_hosts.adaptive_limit IS
    'An adaptive site''s limit, fractional as it grows; max_in_flight is its whole part.';
COMMENT ON COLUMN scrapeq_hosts.latency_seconds IS
    'An adaptive site''s latency: a moving average of its completions'' durations.';
COMMENT ON COLUMN scrapeq_hosts.latency_floor_seconds IS
    'An adaptive site''s fastest latency, drifting towards the average.';
COMMENT ON COLUMN scrapeq_hosts.adaptive_lowered_at IS
    'When an adaptive site''s limit last fell: it falls at most once per latency.';

-- A completion writes the state of the sites it must: a server error in the window, a tripped
-- breaker, or a limit that adapts.
DROP INDEX scrapeq_hosts_troubled_idx;
CREATE INDEX scrapeq_hosts_troubled_idx ON scrapeq_hosts (host_key)
    WHERE recent_responses <> 0 OR breaker_trips > 0 OR adaptive_ceiling IS NOT NULL;

\ir ../sql/site_policies.sql
