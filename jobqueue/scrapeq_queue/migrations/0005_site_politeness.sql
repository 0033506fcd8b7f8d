-- 0005: the payload key of a site's limit is politeness.maxConcurrentPerSite. The readers of a
-- row's limits take it, with their bounds from scrapeq_queue.politeness; the politeness state
-- says in its comments that it is keyed by site (docs/queue.md, "Per-site politeness"). Every
-- function the claim and the row triggers call is applied from its live definition in sql/.

\ir ../sql/payload_limits.sql
\ir ../sql/host_limits.sql
\ir ../sql/hosts_pending.sql

-- Pending rows that still name the limit under its key before 0.1.0 keep it under the new key,
-- so that a worker does not fail them for an unknown key. Their site already recorded it when
-- they were inserted; this UPDATE changes no column a trigger watches.
UPDATE scraping_jobs
SET payload = jsonb_set(payload #- '{politeness,maxConcurrentPerHost}',
                        '{politeness,maxConcurrentPerSite}',
                        payload->'politeness'->'maxConcurrentPerHost')
WHERE status = 'pending'
  AND jsonb_typeof(payload->'politeness') = 'object'
  AND payload->'politeness' ? 'maxConcurrentPerHost'
  AND NOT payload->'politeness' ? 'maxConcurrentPerSite';

COMMENT ON COLUMN scraping_jobs.host_key IS
    'scrapeq: the row''s site, the key of per-site politeness: its URL''s registrable domain (Python producers), else its host name (trigger scrapeq_jobs_fill_host_key).';
COMMENT ON TABLE scrapeq_hosts IS
    'scrapeq: each site''s politeness state (keyed by site: host_key is a registrable domain, or a host name where there is none): limits, next allowed start, pause, a delayed site''s latest attempt. Its slots in use are its rows in flight (scraping_jobs.status = processing), never stored.';
COMMENT ON COLUMN scrapeq_hosts.max_in_flight IS
    'The limit of requests in flight the latest producer that named one gave (payload.politeness.maxConcurrentPerSite); NULL: the claiming pool''s default. See scrapeq_host_limit.';
COMMENT ON COLUMN scrapeq_hosts.touched_at IS
    'When a claim last took rows of this site (written at most once a minute), or when the site was first seen: prune_idle_sites deletes sites idle for days.';
COMMENT ON TABLE scrapeq_host_queues IS
    'scrapeq: each site''s head per queue (the key of its best pending row), the order in which claims visit sites.';
