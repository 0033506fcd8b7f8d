-- 0015: site policies the cluster admin owns (docs/queue.md, "Site policies"; docs/architecture.md,
-- record 16). A site's limit and delay for everyone come from the most specific policy whose
-- pattern matches it (else the claiming pool's defaults), resolved into scrapeq_hosts when the
-- site is first seen and when policies change; a producer no longer sets them. A job's own
-- limit and delay bind only that job's rows on the site (scrapeq_site_job_limits), and can only
-- be stricter, since the site's limit binds every row as well.

CREATE TABLE scrapeq_site_policies (
    policy TEXT NOT NULL,
    pattern TEXT NOT NULL,
    max_in_flight INTEGER,
    delay_seconds DOUBLE PRECISION,
    respect_robots_txt BOOLEAN,
    user_agent TEXT,
    contact TEXT,
    allowed_namespaces TEXT[],
    denied_namespaces TEXT[] NOT NULL DEFAULT '{}',
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT scrapeq_site_policies_pkey PRIMARY KEY (pattern, policy),
    CONSTRAINT scrapeq_site_policies_pattern_valid
        CHECK (pattern = '*' OR pattern ~ '^(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*$'),
    CONSTRAINT scrapeq_site_policies_max_in_flight_valid
        CHECK (max_in_flight IS NULL OR max_in_flight BETWEEN 1 AND {{MAX_CONCURRENT_PER_SITE_LIMIT}}),
    CONSTRAINT scrapeq_site_policies_delay_valid
        CHECK (delay_seconds IS NULL OR delay_seconds BETWEEN 0 AND {{MAX_DELAY_SECONDS}}),
    CONSTRAINT scrapeq_site_policies_texts_valid
        CHECK (length(policy) <= 253 AND length(user_agent) <= 512 AND length(contact) <= 512)
);

COMMENT ON TABLE scrapeq_site_policies IS
    'scrapeq: the cluster''s site policies (SitePolicy resources, synced by the operator): one row per policy and site pattern (example.com, *.example.com, or *).';
COMMENT ON COLUMN scrapeq_site_policies.allowed_namespaces IS
    'Namespaces whose ScrapeJobs may crawl the pattern''s sites; NULL: every namespace not denied.';

CREATE TABLE scrapeq_site_job_limits (
    host_key TEXT NOT NULL REFERENCES scrapeq_hosts (host_key) ON DELETE CASCADE,
    owner_key TEXT NOT NULL,
    max_in_flight INTEGER,
    delay_seconds DOUBLE PRECISION,
    last_claimed_id BIGINT,
    CONSTRAINT scrapeq_site_job_limits_pkey PRIMARY KEY (host_key, owner_key),
    CONSTRAINT scrapeq_site_job_limits_valid
        CHECK ((max_in_flight IS NULL OR max_in_flight > 0)
               AND (delay_seconds IS NULL OR delay_seconds >= 0))
);

COMMENT ON TABLE scrapeq_site_job_limits IS
    'scrapeq: a job''s own limit and delay on a site, binding only its rows (owner_key: the owner_uid, or '''' for the rows without an owner, which share one group per site).';
COMMENT ON COLUMN scrapeq_site_job_limits.last_claimed_id IS
    'A delayed group''s latest claimed row: its next row starts no sooner than the delay after that one ended.';

ALTER TABLE scrapeq_hosts
    ADD COLUMN policy_pattern TEXT,
    ADD COLUMN job_limits BOOLEAN NOT NULL DEFAULT false;

COMMENT ON COLUMN scrapeq_hosts.max_in_flight IS
    'The site''s limit from its site policy (NULL: the claiming pool''s default).';
COMMENT ON COLUMN scrapeq_hosts.delay_seconds IS
    'The site''s delay from its site policy (NULL: the claiming pool''s default).';
COMMENT ON COLUMN scrapeq_hosts.policy_pattern IS
    'The pattern of the site policies that apply to the site (the most specific match; NULL: none).';
COMMENT ON COLUMN scrapeq_hosts.job_limits IS
    'Some job named its own limit or delay on the site (scrapeq_site_job_limits): the claim looks them up.';

-- The limits producers set before this migration become the limits of their jobs' rows: the
-- rows still to run keep them, and no site keeps a limit no policy set.
INSERT INTO scrapeq_site_job_limits (host_key, owner_key, max_in_flight, delay_seconds)
SELECT DISTINCT ON (jobs.host_key, coalesce(jobs.owner_uid, ''))
       jobs.host_key, coalesce(jobs.owner_uid, ''), scrapeq_payload_max_per_host(jobs.payload),
       scrapeq_payload_delay_seconds(jobs.payload)
FROM scraping_jobs AS jobs
JOIN scrapeq_hosts AS hosts ON hosts.host_key = jobs.host_key
WHERE jobs.status IN ('pending', 'processing')
  AND (scrapeq_payload_max_per_host(jobs.payload) IS NOT NULL
       OR scrapeq_payload_delay_seconds(jobs.payload) IS NOT NULL)
ORDER BY jobs.host_key, coalesce(jobs.owner_uid, ''), jobs.id DESC;

UPDATE scrapeq_hosts SET max_in_flight = NULL, delay_seconds = NULL
WHERE max_in_flight IS NOT NULL OR delay_seconds IS NOT NULL;
UPDATE scrapeq_hosts AS hosts SET job_limits = true
WHERE EXISTS (SELECT FROM scrapeq_site_job_limits AS own WHERE own.host_key = hosts.host_key);

\ir ../sql/site_policies.sql
\ir ../sql/host_limits.sql
\ir ../sql/hosts_pending.sql
\ir ../sql/job_limits.sql
\ir ../sql/claim.sql

CREATE TRIGGER scrapeq_hosts_policy_on_insert
    BEFORE INSERT ON scrapeq_hosts
    FOR EACH ROW EXECUTE FUNCTION scrapeq_hosts_take_policy();

-- Runs after scrapeq_jobs_hosts_on_insert (triggers fire in name order): the sites exist.
CREATE TRIGGER scrapeq_jobs_job_limits_on_insert
    AFTER INSERT ON scraping_jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION scrapeq_job_limits_after_insert();
