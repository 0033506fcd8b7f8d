-- 0008: what retention may delete, and a signal when a row finishes (docs/queue.md,
-- "Retention" and "Signals for SQL producers"). Three columns a producer may set in its INSERT,
-- each with a constant default (no table rewrite):
--   retain_for       how long the row stays once finished; NULL: rows of a ScrapeJob follow
--                    the operator's retention, rows without an owner are never deleted;
--   undelivered      true while a configured result sink does not have the row yet;
--                    retention never deletes such a row;
--   notify_finished  NOTIFY scrapeq_finished when the row finishes.

ALTER TABLE scraping_jobs
    ADD COLUMN retain_for INTERVAL,
    ADD COLUMN undelivered BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN notify_finished BOOLEAN NOT NULL DEFAULT false,
    ADD CONSTRAINT scrapeq_jobs_retain_for_valid CHECK (retain_for >= interval '0');

COMMENT ON COLUMN scraping_jobs.retain_for IS
    'scrapeq: how long retention keeps the row once it finished (any final state); NULL: a ScrapeJob''s row follows the operator''s retention, a row without an owner is never deleted.';
COMMENT ON COLUMN scraping_jobs.undelivered IS
    'scrapeq: true while a configured result sink does not have this row''s result yet; retention never deletes such a row.';
COMMENT ON COLUMN scraping_jobs.notify_finished IS
    'scrapeq: when true, the row''s finishing (completed, failed, cancelled) sends NOTIFY scrapeq_finished with {"id", "queue", "state"}.';

\ir ../sql/finished_signal.sql
