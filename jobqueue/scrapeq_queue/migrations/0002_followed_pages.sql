-- 0002: count a job's followed pages quickly. A worker completing a page with links to follow
-- counts the rows its ScrapeJob already followed (spec.follow.maxPages caps them per job);
-- without this index that count would read every row of the job, seeds included.

CREATE INDEX scrapeq_jobs_followed_idx ON scraping_jobs (owner_uid)
    WHERE depth > 0 AND owner_uid IS NOT NULL;
