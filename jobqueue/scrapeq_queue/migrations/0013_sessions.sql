-- 0013: the session pool shared by the cluster (docs/queue.md, "Sessions"; docs/architecture.md,
-- record 15). Upstream proxies are known by an id (a hash, never the address or credentials,
-- which stay sealed in the payload or the pool's settings); sessions pair a proxy with a cookie
-- jar and a user agent, and keep their health per site; a row records its session and the
-- sessions it was blocked on.

CREATE TABLE scrapeq_proxies (
    proxy_id TEXT NOT NULL,
    failures_in_a_row INTEGER NOT NULL DEFAULT 0,
    retired_until TIMESTAMPTZ,
    retirements INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT scrapeq_proxies_pkey PRIMARY KEY (proxy_id),
    CONSTRAINT scrapeq_proxies_id_valid CHECK (proxy_id ~ '^(direct|p[0-9a-f]{16})$'),
    CONSTRAINT scrapeq_proxies_counts_valid CHECK (failures_in_a_row >= 0 AND retirements >= 0)
);

CREATE TABLE scrapeq_proxy_sites (
    proxy_id TEXT NOT NULL REFERENCES scrapeq_proxies (proxy_id) ON DELETE CASCADE,
    host_key TEXT NOT NULL,
    failures INTEGER NOT NULL DEFAULT 1,
    last_failed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT scrapeq_proxy_sites_pkey PRIMARY KEY (proxy_id, host_key),
    CONSTRAINT scrapeq_proxy_sites_failures_valid CHECK (failures > 0)
);

CREATE TABLE scrapeq_sessions (
    session_id BIGINT GENERATED ALWAYS AS IDENTITY,
    proxy_id TEXT NOT NULL REFERENCES scrapeq_proxies (proxy_id) ON DELETE CASCADE,
    user_agent TEXT,
    cookies JSONB NOT NULL DEFAULT '[]',
    uses BIGINT NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_used_at TIMESTAMPTZ,
    CONSTRAINT scrapeq_sessions_pkey PRIMARY KEY (session_id),
    CONSTRAINT scrapeq_sessions_cookies_valid CHECK (
        jsonb_typeof(cookies) = 'array'
        AND octet_length(cookies::text) <= {{MAX_SESSION_COOKIE_BYTES}}
    ),
    CONSTRAINT scrapeq_sessions_user_agent_valid CHECK (length(user_agent) <= 1000),
    CONSTRAINT scrapeq_sessions_uses_valid CHECK (uses >= 0)
);
CREATE INDEX scrapeq_sessions_proxy_idx ON scrapeq_sessions (proxy_id);

CREATE TABLE scrapeq_session_sites (
    session_id BIGINT NOT NULL REFERENCES scrapeq_sessions (session_id) ON DELETE CASCADE,
    host_key TEXT NOT NULL,
    uses INTEGER NOT NULL DEFAULT 0,
    blocks INTEGER NOT NULL DEFAULT 0,
    blocks_in_a_row INTEGER NOT NULL DEFAULT 0,
    retired_at TIMESTAMPTZ,
    CONSTRAINT scrapeq_session_sites_pkey PRIMARY KEY (session_id, host_key),
    CONSTRAINT scrapeq_session_sites_counts_valid
        CHECK (uses >= 0 AND blocks >= 0 AND blocks_in_a_row >= 0 AND blocks_in_a_row <= blocks)
);

ALTER TABLE scraping_jobs
    ADD COLUMN session_id BIGINT,
    ADD COLUMN tried_sessions BIGINT[] NOT NULL DEFAULT '{}',
    ADD CONSTRAINT scraping_jobs_tried_sessions_valid
        CHECK (cardinality(tried_sessions) <= {{MAX_TRIED_SESSIONS}});

COMMENT ON TABLE scrapeq_proxies IS
    'Upstream proxies by id (p + 16 hex digits of a SHA-256 of the proxy URL, or direct), never their address or credentials, and whether the cluster has retired them (retired_until).';
COMMENT ON TABLE scrapeq_proxy_sites IS
    'The sites where a proxy failed (blocked pages, connection failures) with no page going well there since; a proxy failing on enough sites is retired.';
COMMENT ON TABLE scrapeq_sessions IS
    'Sessions: an upstream proxy, a cookie jar (a JSON array of cookies, bounded) and a user agent, shared by every worker.';
COMMENT ON TABLE scrapeq_session_sites IS
    'A session''s health on one site (keyed like scrapeq_hosts): uses, blocks, blocks in a row, and when it was retired there.';
COMMENT ON COLUMN scraping_jobs.session_id IS
    'The session the row''s latest page used; a followed row starts with its parent''s (sticky).';
COMMENT ON COLUMN scraping_jobs.tried_sessions IS
    'The sessions the row was blocked on; the next page uses another, and the row fails as blocked after MAX_TRIED_SESSIONS.';

\ir ../sql/sessions.sql
