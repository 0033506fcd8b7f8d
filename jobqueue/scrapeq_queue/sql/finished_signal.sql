-- The signal of a finished row for SQL producers (docs/queue.md, "Signals for SQL producers"):
-- one NOTIFY on channel scrapeq_finished per row that opted in (notify_finished) when it
-- becomes completed, failed or cancelled, sent when the finishing transaction commits. The
-- payload is {"id": …, "queue": …, "state": …}: at most about 150 bytes (a queue name has at
-- most 100 characters), far below PostgreSQL's 8000-byte limit. The trigger's WHEN clause
-- decides before any function runs, so rows that did not opt in cost no call and no NOTIFY.
CREATE OR REPLACE FUNCTION scrapeq_notify_finished() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        'scrapeq_finished',
        jsonb_build_object('id', NEW.id, 'queue', NEW.queue, 'state', NEW.status)::text
    );
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS scrapeq_jobs_notify_finished ON scraping_jobs;
CREATE TRIGGER scrapeq_jobs_notify_finished
    AFTER UPDATE OF status ON scraping_jobs
    FOR EACH ROW
    WHEN (NEW.notify_finished AND NEW.finished_at IS NOT NULL AND OLD.finished_at IS NULL)
    EXECUTE FUNCTION scrapeq_notify_finished();
