-- 0012: the crawl memory, what one crawl saw of each URL across its runs (docs/queue.md,
-- "Crawl memory"; decision record 14). A row's payload names its crawl (`crawlKey`); the worker
-- reads the memory of that crawl's URL before it fetches (validators for a conditional request,
-- the hashes to tell a changed page from an unchanged one) and writes it back after the page.

CREATE TABLE scrapeq_crawl_memory (
    crawl_key TEXT NOT NULL,
    -- SHA-256 of the URL as the row holds it: a fixed-size key, whatever the URL's length.
    url_hash BYTEA NOT NULL,
    url TEXT NOT NULL,
    etag TEXT,
    last_modified TEXT,
    content_hash BYTEA,
    result_hash BYTEA,
    fetched_at TIMESTAMPTZ NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (crawl_key, url_hash),
    CONSTRAINT scrapeq_crawl_memory_key_valid
        CHECK (length(crawl_key) BETWEEN 1 AND {{MAX_CRAWL_KEY_CHARS}}),
    CONSTRAINT scrapeq_crawl_memory_url_hash_valid CHECK (length(url_hash) = 32),
    CONSTRAINT scrapeq_crawl_memory_validators_valid
        CHECK (length(etag) <= {{MAX_VALIDATOR_CHARS}}
               AND length(last_modified) <= {{MAX_VALIDATOR_CHARS}}),
    CONSTRAINT scrapeq_crawl_memory_changed_valid CHECK (changed_at <= fetched_at)
);

-- The age bound's prune walks the oldest fetches first.
CREATE INDEX scrapeq_crawl_memory_fetched_idx ON scrapeq_crawl_memory (fetched_at);

ALTER TABLE scrapeq_crawl_memory SET (autovacuum_vacuum_scale_factor = 0.05);

COMMENT ON TABLE scrapeq_crawl_memory IS
    'What a crawl (a schedule''s runs, or every job naming one crawlKey) saw of each URL: its validators, the hashes of its content and of its extracted result, when it was last fetched and when its result last changed. Read and written by workers for rows with a crawlKey only.';
COMMENT ON COLUMN scrapeq_crawl_memory.crawl_key IS
    'The crawl: schedule/<namespace>/<name>/<uid> for a schedule''s runs, <namespace>/<key> for spec.recrawl.key, a SQL producer''s crawlKey as written.';
COMMENT ON COLUMN scrapeq_crawl_memory.content_hash IS
    'SHA-256 of the page''s body (static engine) or of its rendered HTML; NULL for a page with no body read.';
COMMENT ON COLUMN scrapeq_crawl_memory.result_hash IS
    'SHA-256 of the extracted part of the result (title, fields, items, structured data, a parser''s data): what "changed" compares.';
COMMENT ON COLUMN scrapeq_crawl_memory.changed_at IS
    'When a fetch last found a result different from the one before (the first fetch counts).';
