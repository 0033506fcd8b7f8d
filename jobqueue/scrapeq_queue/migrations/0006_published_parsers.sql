-- 0006: the parsers each worker loaded from its image, per queue it serves (docs/parsers.md,
-- "Publication"). Workers write their row at start and every few minutes; the operator reads
-- the union for a queue before it queues a ScrapeJob that names a parser. A row outlives its
-- worker on purpose: a pool scaled to zero still says what its image had when it last ran.
-- Rows not refreshed for a week are deleted by the next publication.

CREATE TABLE scrapeq_worker_parsers (
    queue TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    parsers TEXT[] NOT NULL,
    published_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, worker_id)
);

COMMENT ON TABLE scrapeq_worker_parsers IS
    'The parsers each worker loaded (entry points scrapeq.parsers of its image), per queue it serves.';
COMMENT ON COLUMN scrapeq_worker_parsers.queue IS 'A queue the worker claims from.';
COMMENT ON COLUMN scrapeq_worker_parsers.worker_id IS 'The worker (its pod name in a cluster).';
COMMENT ON COLUMN scrapeq_worker_parsers.parsers IS 'The names of the parsers it loaded, sorted; empty when it has none.';
COMMENT ON COLUMN scrapeq_worker_parsers.published_at IS 'When the worker last wrote this row.';
