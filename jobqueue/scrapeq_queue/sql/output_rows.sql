-- Rows of a ScrapeJob with an object-storage output are undelivered from their insert on
-- (docs/queue.md, "Retention"; docs/architecture.md, record 12): whoever inserts them (the
-- operator's enqueue, a followed link, an expanded URL source), retention cannot prune them
-- before the output's uploader has put them into an uploaded batch. One primary-key lookup per
-- inserted owned row; rows without an owner never run it.

CREATE OR REPLACE FUNCTION scrapeq_mark_undelivered() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM scrapeq_outputs WHERE owner_uid = NEW.owner_uid) THEN
        NEW.undelivered := true;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS scrapeq_jobs_mark_undelivered ON scraping_jobs;
CREATE TRIGGER scrapeq_jobs_mark_undelivered
    BEFORE INSERT ON scraping_jobs
    FOR EACH ROW
    WHEN (NEW.owner_uid IS NOT NULL AND NOT NEW.undelivered)
    EXECUTE FUNCTION scrapeq_mark_undelivered();
