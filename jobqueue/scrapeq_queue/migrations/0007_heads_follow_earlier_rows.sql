-- 0007: a pending row moved earlier or up by a plain UPDATE moves its host's head too.
--
-- A host's head (scrapeq_host_queues) is the claim-order key of its best pending row; the walk
-- of a claim skips a host whose head is not due. Heads followed inserts and rows going back to
-- pending, but not an application's UPDATE that makes a pending row due sooner (run_at earlier)
-- or more urgent (priority higher): such a row waited until the host's old head came due.
-- Claims never fire this trigger: they change status to processing, and the WHEN below is false.

DROP TRIGGER scrapeq_jobs_hosts_on_pending ON scraping_jobs;

CREATE TRIGGER scrapeq_jobs_hosts_on_pending
    AFTER UPDATE OF status, run_at, priority ON scraping_jobs
    FOR EACH ROW WHEN (NEW.status = 'pending'
                       AND (OLD.status <> 'pending' OR NEW.run_at < OLD.run_at
                            OR NEW.priority > OLD.priority))
    EXECUTE FUNCTION scrapeq_hosts_after_pending();
