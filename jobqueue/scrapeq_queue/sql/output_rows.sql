-- Rows of a ScrapeJob with an object-storage output are undelivered from their insert on
-- (docs/queue.md, "Retention"; docs/architecture.md, record 12): whoever inserts them (the
-- operator's enqueue, a followed link, an expanded URL source, a plain INSERT), retention
-- cannot prune them before the output's uploader has put them into an uploaded batch.
--
-- The project's own inserts mark their rows themselves (the operator's enqueue asks
-- scrapeq_outputs once per statement; followed links and expanded rows copy the flag of the row
-- they come from). This trigger runs once per INSERT statement and marks the owned rows an
-- insert left unmarked: it looks up the distinct owners of the statement's unmarked rows in
-- scrapeq_outputs, and a statement whose rows are all marked, or whose owners have no output,
-- updates nothing. Once per statement, not per row: a per-row function call and look-up cost
-- about a quarter of an expansion batch's insert (docs/queue.md, "Source rows").

CREATE OR REPLACE FUNCTION scrapeq_mark_undelivered() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    owners_with_output TEXT[];
BEGIN
    -- The owners first (a statement's rows have one or a few): the plan of a statement over
    -- new_rows is made once, for a table it takes to be one row long, so a join of new_rows
    -- with scraping_jobs would probe the table for every new row even when nothing matches.
    SELECT array_agg(owners.owner_uid) INTO owners_with_output
    FROM (SELECT DISTINCT owner_uid FROM new_rows WHERE NOT undelivered) AS owners
    JOIN scrapeq_outputs AS outputs ON outputs.owner_uid = owners.owner_uid;
    IF owners_with_output IS NOT NULL THEN
        UPDATE scraping_jobs AS jobs SET undelivered = true
        FROM new_rows
        WHERE jobs.id = new_rows.id AND NOT new_rows.undelivered
          AND new_rows.owner_uid = ANY (owners_with_output);
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS scrapeq_jobs_mark_undelivered ON scraping_jobs;
CREATE TRIGGER scrapeq_jobs_mark_undelivered
    AFTER INSERT ON scraping_jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION scrapeq_mark_undelivered();
