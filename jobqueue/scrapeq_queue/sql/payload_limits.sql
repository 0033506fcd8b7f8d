-- A row's politeness limits from its payload (payload.politeness.maxConcurrentPerSite and
-- .delaySeconds), read by the insert trigger that records them for the row's site. The live
-- definition; a migration applies this file (`\ir ../sql/payload_limits.sql`).
--
-- Never failing: a value of the wrong type counts as absent (validate_payload fails such rows
-- anyway), one out of range is clamped. The bounds are placeholders the migration runner fills
-- from scrapeq_queue.politeness, their one source (docs/queue.md, "Schema and migrations").

CREATE OR REPLACE FUNCTION scrapeq_payload_max_per_host(payload JSONB) RETURNS INTEGER
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(payload->'politeness'->'maxConcurrentPerSite') = 'number'
        THEN least(greatest((payload->'politeness'->>'maxConcurrentPerSite')::numeric, 1),
                   {{MAX_CONCURRENT_PER_SITE_LIMIT}})::integer END
$$;

CREATE OR REPLACE FUNCTION scrapeq_payload_delay_seconds(payload JSONB)
RETURNS DOUBLE PRECISION
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(payload->'politeness'->'delaySeconds') = 'number'
        THEN least(greatest((payload->'politeness'->>'delaySeconds')::numeric, 0),
                   {{MAX_DELAY_SECONDS}})::double precision END
$$;

COMMENT ON FUNCTION scrapeq_payload_max_per_host(JSONB) IS
    'scrapeq: the site''s limit a row names (payload.politeness.maxConcurrentPerSite), clamped to 1..{{MAX_CONCURRENT_PER_SITE_LIMIT}}; NULL when it names none.';
COMMENT ON FUNCTION scrapeq_payload_delay_seconds(JSONB) IS
    'scrapeq: the site''s delay a row names (payload.politeness.delaySeconds), clamped to 0..{{MAX_DELAY_SECONDS}}; NULL when it names none.';
