-- The table's bounds on a row's payload: a JSON object (or NULL), at most
-- {{MAX_PAYLOAD_BYTES}} bytes as JSON text, objects and arrays nested fewer than
-- {{MAX_PAYLOAD_DEPTH}} levels deep (scrapeq_queue.payload, their one source; validate_payload
-- gives the same verdict in its own words). The live definition; a migration applies this file
-- (`\ir ../sql/payload_bounds.sql`).
--
-- Checked by triggers when a payload is written (an INSERT, or an UPDATE that changes it), not
-- as CHECK constraints: PostgreSQL checks a constraint on every new version of a row, so every
-- claim, heartbeat and completion would print the payload as text and walk it again (for a
-- 2 KB payload about as much as the rest of the row's UPDATE), and a row written before the
-- bounds existed would refuse every UPDATE, the claim's that fails it included.

CREATE OR REPLACE FUNCTION scrapeq_check_payload_bounds() RETURNS TRIGGER
    LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_typeof(NEW.payload) <> 'object' THEN
        RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"',
                        TG_TABLE_NAME, 'scrapeq_jobs_payload_is_object'
            USING ERRCODE = 'check_violation', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME,
                  CONSTRAINT = 'scrapeq_jobs_payload_is_object',
                  DETAIL = 'payload must be a JSON object of options (NULL counts as {})';
    END IF;
    IF octet_length(NEW.payload::text) > {{MAX_PAYLOAD_BYTES}}
       OR jsonb_path_exists(NEW.payload,
                            ('strict $.**{' || {{MAX_PAYLOAD_DEPTH}}
                             || '} ? (@.type() == "object" || @.type() == "array")')::jsonpath)
    THEN
        RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"',
                        TG_TABLE_NAME, 'scrapeq_jobs_payload_bounded'
            USING ERRCODE = 'check_violation', SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME,
                  CONSTRAINT = 'scrapeq_jobs_payload_bounded',
                  DETAIL = 'payload is at most {{MAX_PAYLOAD_BYTES}} bytes of JSON and nests '
                           || 'objects and arrays at most {{MAX_PAYLOAD_DEPTH}} levels deep';
    END IF;
    RETURN NEW;
END;
$$;

COMMENT ON FUNCTION scrapeq_check_payload_bounds() IS
    'scrapeq: refuses a payload written to scraping_jobs that is not a JSON object, is larger than {{MAX_PAYLOAD_BYTES}} bytes as JSON text or nests objects and arrays {{MAX_PAYLOAD_DEPTH}} levels deep (jobqueue/scrapeq_queue/sql/payload_bounds.sql).';

-- An empty object, the payload of most rows, passes without a call.
DROP TRIGGER IF EXISTS scrapeq_jobs_payload_bounds_on_insert ON scraping_jobs;
CREATE TRIGGER scrapeq_jobs_payload_bounds_on_insert
    BEFORE INSERT ON scraping_jobs
    FOR EACH ROW WHEN (NEW.payload IS NOT NULL AND NEW.payload <> '{}'::jsonb)
    EXECUTE FUNCTION scrapeq_check_payload_bounds();

DROP TRIGGER IF EXISTS scrapeq_jobs_payload_bounds_on_update ON scraping_jobs;
CREATE TRIGGER scrapeq_jobs_payload_bounds_on_update
    BEFORE UPDATE OF payload ON scraping_jobs
    FOR EACH ROW WHEN (NEW.payload IS NOT NULL AND NEW.payload <> '{}'::jsonb
                       AND NEW.payload IS DISTINCT FROM OLD.payload)
    EXECUTE FUNCTION scrapeq_check_payload_bounds();
