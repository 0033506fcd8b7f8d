-- 0021: the payload's bounds (migration 0004) are checked when a payload is written, by
-- triggers, instead of by CHECK constraints on every new version of a row. A constraint made
-- every claim, heartbeat and completion print the payload as text and walk its nesting again,
-- and a row written before 0004 that breaks a bound refused every UPDATE, so each claim that
-- reached it failed whole instead of failing that row (docs/queue.md, "Payload options").
-- The errors are those of the constraints: SQLSTATE 23514 naming the same constraint.

ALTER TABLE scraping_jobs
    DROP CONSTRAINT scrapeq_jobs_payload_is_object,
    DROP CONSTRAINT scrapeq_jobs_payload_bounded;

\ir ../sql/payload_bounds.sql
