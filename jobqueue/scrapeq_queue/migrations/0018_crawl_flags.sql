-- 0018: what a completed row's result says of its crawl memory (changed, unchanged, fetched
-- without validators, skipped) is kept in a small column when the row completes, so that a
-- ScrapeJob's progress counts read no result: counting them from the results read every
-- completed row's result, out of TOAST, on every status poll (docs/queue.md, "Crawl memory").

-- The flags of a result document: 1 changed, 2 unchanged, 4 fetched without validators,
-- 8 skipped (within recrawlAfter; a string names why: a source row's numeric `skipped` is a
-- count of entries, not a skipped page). NULL when none applies.
CREATE FUNCTION scrapeq_crawl_flags(result JSONB) RETURNS SMALLINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT nullif(
        CASE result->'changed' WHEN 'true' THEN 1 WHEN 'false' THEN 2 ELSE 0 END
        | CASE WHEN result->'validators' = 'false' THEN 4 ELSE 0 END
        | CASE WHEN jsonb_typeof(result->'skipped') = 'string' THEN 8 ELSE 0 END,
        0)::smallint
$$;

ALTER TABLE scraping_jobs ADD COLUMN crawl_flags SMALLINT;

-- Rows completed before this migration: their results are read once, here.
UPDATE scraping_jobs
SET crawl_flags = scrapeq_crawl_flags(result)
WHERE status = 'completed' AND result ?| ARRAY['changed', 'validators', 'skipped'];

COMMENT ON FUNCTION scrapeq_crawl_flags(JSONB) IS
    'scrapeq: the crawl-memory flags of a result (1 changed, 2 unchanged, 4 without validators, 8 skipped); NULL when none.';
COMMENT ON COLUMN scraping_jobs.crawl_flags IS
    'What the completed row''s result says of its crawl memory (scrapeq_crawl_flags: 1 changed, 2 unchanged, 4 fetched without validators, 8 skipped), set when the row completes; NULL: none of them.';
