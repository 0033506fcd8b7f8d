-- 0006: one copy of each site's robots.txt for the whole cluster.
--
-- Every worker process used to fetch a site's robots.txt for itself, once a day: ten pods asked
-- ten times. Now the first worker that needs it takes a short lease on the origin's row, fetches
-- the file and stores it here with its expiry; every other worker reads this copy (and waits for
-- the lease instead of fetching too). A file that could not be read is stored the same way,
-- with a short expiry, so the whole cluster holds the site back for the same minute.

CREATE TABLE scrapeq_robots (
    -- scheme://host[:port], lower-cased: robots.txt belongs to an origin.
    origin TEXT PRIMARY KEY,
    -- The HTTP status of the fetch; NULL when none came (timeout, network error): see problem.
    status INTEGER,
    -- The file (up to the first 500 KiB), with a 2xx status.
    body TEXT,
    -- Why the file could not be read (a timeout, a network error, a 5xx).
    problem TEXT,
    -- Until when this copy holds ('-infinity': never read yet).
    expires_at TIMESTAMPTZ NOT NULL,
    -- A worker is fetching the file until then; others wait for its copy.
    fetching_until TIMESTAMPTZ
);

COMMENT ON TABLE scrapeq_robots IS
    'scrapeq: the cluster''s copy of each origin''s robots.txt, read by every worker.';
