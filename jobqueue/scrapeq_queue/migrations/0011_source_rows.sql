-- 0011: source rows (docs/queue.md, "Source rows"). A row whose payload carries `source` is a
-- sitemap or a robots.txt that a worker expands into rows of the same owner, in batches; each
-- batch records here how far the expansion got, so that a rescued row's next attempt skips
-- what is done instead of reading it again into the database.

ALTER TABLE scraping_jobs ADD COLUMN source_progress JSONB;

ALTER TABLE scraping_jobs ADD CONSTRAINT scrapeq_jobs_source_progress_valid
    CHECK (source_progress IS NULL OR jsonb_typeof(source_progress) = 'object');

COMMENT ON COLUMN scraping_jobs.source_progress IS
    'scrapeq: a source row''s expansion so far, written with each batch: entries (how many entries of the document were handled, in document order), enqueued (rows it inserted), sitemaps (sitemap rows it inserted), skipped (entries left out by a filter, a bad URL or a bound). NULL for page rows and for sources not started.';
