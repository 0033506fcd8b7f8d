-- 0016: namespaces take turns in the claim (docs/queue.md, "Namespace turns"), and may be capped
-- on rows in flight ("Namespace caps"). A site's head is
-- now per (queue, site, owner namespace), '' for rows without an owner: a namespace's rows of a
-- site shared with another namespace's backlog get a head of their own, and a site's rows go out
-- in turns of namespaces. The heads are rebuilt from the pending rows. The triggers that write
-- heads call the functions of sql/namespace_heads.sql, which replace those of
-- sql/hosts_pending.sql.

DROP TRIGGER scrapeq_jobs_hosts_on_insert ON scraping_jobs;
DROP TRIGGER scrapeq_jobs_hosts_on_pending ON scraping_jobs;
DROP FUNCTION scrapeq_hosts_after_insert();
DROP FUNCTION scrapeq_hosts_after_pending();
DROP FUNCTION scrapeq_hosts_pending(TEXT[], TEXT[], INTEGER[], TIMESTAMPTZ[], BIGINT[]);

ALTER TABLE scrapeq_host_queues
    ADD COLUMN owner_namespace TEXT NOT NULL DEFAULT '',
    DROP CONSTRAINT scrapeq_host_queues_pkey,
    ADD CONSTRAINT scrapeq_host_queues_pkey PRIMARY KEY (host_key, queue, owner_namespace);

COMMENT ON TABLE scrapeq_host_queues IS
    'scrapeq: each site''s head per queue and owner namespace (the key of its best pending row), the order in which claims visit sites.';
COMMENT ON COLUMN scrapeq_host_queues.owner_namespace IS
    'The owner_namespace of the head''s rows; '''' for rows without an owner (one namespace of their own).';

-- A site's pending rows of one namespace, in the claim's order: the claim's walk and its
-- correction of heads find a namespace's rows without stepping over another's.
CREATE INDEX scrapeq_jobs_namespace_claim_idx ON scraping_jobs
    (host_key, queue, (coalesce(owner_namespace, '')), priority DESC, run_at, id)
    WHERE status = 'pending';

DELETE FROM scrapeq_host_queues;
INSERT INTO scrapeq_host_queues (queue, host_key, owner_namespace, head_priority, head_run_at,
                                 head_id)
SELECT DISTINCT ON (jobs.queue, jobs.host_key, coalesce(jobs.owner_namespace, ''))
       jobs.queue, jobs.host_key, coalesce(jobs.owner_namespace, ''), jobs.priority,
       jobs.run_at, jobs.id
FROM scraping_jobs AS jobs
WHERE jobs.status = 'pending' AND jobs.host_key IS NOT NULL
ORDER BY jobs.queue, jobs.host_key, coalesce(jobs.owner_namespace, ''), jobs.run_at > now(),
         jobs.priority DESC, jobs.run_at, jobs.id;

-- Caps on rows in flight per namespace, written by the operator from the QueuePolicies and
-- read by every claim (docs/queue.md, "Namespace caps").
CREATE TABLE scrapeq_namespace_limits (
    owner_namespace TEXT PRIMARY KEY CHECK (owner_namespace <> ''),
    max_in_flight INTEGER NOT NULL CHECK (max_in_flight >= 1),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

COMMENT ON TABLE scrapeq_namespace_limits IS
    'scrapeq: the most rows of a namespace in flight at once (the claim holds it); * is every namespace without a row of its own.';
COMMENT ON COLUMN scrapeq_namespace_limits.owner_namespace IS
    'A namespace (owner_namespace of its rows), or * for every other namespace.';

-- A capped namespace's rows in flight, counted by the claim.
CREATE INDEX scrapeq_jobs_namespace_processing_idx ON scraping_jobs (owner_namespace)
    WHERE status = 'processing' AND owner_namespace IS NOT NULL;

\ir ../sql/namespace_heads.sql

-- New pending rows make their hosts claimable: one call per INSERT statement, whoever runs it.
CREATE TRIGGER scrapeq_jobs_hosts_on_insert
    AFTER INSERT ON scraping_jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION scrapeq_heads_after_insert();

-- A row back to pending (retry, release, rescue, a retried dead job, or an application's own
-- UPDATE), or a pending row made due sooner or more urgent, or given to another namespace, by an
-- UPDATE, moves its head.
CREATE TRIGGER scrapeq_jobs_hosts_on_pending
    AFTER UPDATE OF status, run_at, priority, owner_namespace ON scraping_jobs
    FOR EACH ROW WHEN (NEW.status = 'pending'
                       AND (OLD.status <> 'pending' OR NEW.run_at < OLD.run_at
                            OR NEW.priority > OLD.priority
                            OR NEW.owner_namespace IS DISTINCT FROM OLD.owner_namespace))
    EXECUTE FUNCTION scrapeq_heads_after_pending();

\ir ../sql/claim.sql
