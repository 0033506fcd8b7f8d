-- 0004: the table refuses a payload that no worker could run, whatever its options say: one
-- that is not a JSON object, is larger than 256 KiB as JSON text, or nests objects and arrays
-- 32 levels deep or more (scrapeq_queue.payload: MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH; the
-- errors validate_payload gives for the same payloads are in each constraint's comment). The
-- option rules themselves (names, types, ranges) stay in validate_payload, which every claim
-- applies. Rows already in the table are not checked (NOT VALID): a claim fails any of them
-- that breaks a bound with reason invalid_payload, as it fails every invalid row.

ALTER TABLE scraping_jobs
    ADD CONSTRAINT scrapeq_jobs_payload_is_object
        CHECK (payload IS NULL OR jsonb_typeof(payload) = 'object') NOT VALID,
    ADD CONSTRAINT scrapeq_jobs_payload_bounded
        CHECK (
            payload IS NULL
            OR (
                octet_length(payload::text) <= 262144
                AND NOT jsonb_path_exists(
                    payload, 'strict $.**{32} ? (@.type() == "object" || @.type() == "array")'
                )
            )
        ) NOT VALID;

COMMENT ON CONSTRAINT scrapeq_jobs_payload_is_object ON scraping_jobs IS
    'payload must be a JSON object of options (NULL counts as {})';
COMMENT ON CONSTRAINT scrapeq_jobs_payload_bounded ON scraping_jobs IS
    'payload is at most 262144 bytes of JSON and nests objects and arrays at most 32 levels deep';
