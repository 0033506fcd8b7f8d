-- The session pool shared by the cluster (docs/queue.md, "Sessions"; docs/architecture.md,
-- record 15). A session is an upstream proxy (by its id, never its address), a cookie jar and a
-- user agent; its health is kept per site. Two functions are all a worker calls: one picks the
-- session a row's page uses, one records how the page went.

-- The session for one page of row (p_job_id, p_attempt) on site p_host_key, among the sessions
-- of the proxies p_proxy_ids (the row's upstream proxies; 'direct' when it has none):
-- * the row's own session (sticky: a login's follow-up or a followed page carries its parent's)
--   while neither it nor its proxy is retired and it is not in p_tried;
-- * otherwise the healthiest for the site: a proxy the row has not been blocked through first,
--   then the fewest blocks on the site, then the longest unused (taking a session counts as a
--   use, so pages in flight at once spread over the sessions). Every proxy
--   that is not retired gets a fresh session for the site when it has none that is usable, so a
--   retired session is replaced by a new cookie jar on the same proxy.
-- The chosen session is written to the row (fenced by its attempt), so that the rows it follows
-- carry it, and comes back with how many sessions the row was blocked on so far (tried). No
-- row comes back when every proxy of the row is retired.
CREATE OR REPLACE FUNCTION scrapeq_session_choose(
    p_job_id BIGINT,
    p_attempt INTEGER,
    p_host_key TEXT,
    p_proxy_ids TEXT[],
    p_user_agent TEXT
) RETURNS TABLE (
    session_id BIGINT, proxy_id TEXT, user_agent TEXT, cookies JSONB, tried INTEGER
)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_sticky BIGINT;
    v_tried BIGINT[];
    v_chosen BIGINT;
BEGIN
    INSERT INTO scrapeq_proxies AS proxies (proxy_id)
    SELECT DISTINCT ids.id FROM unnest(p_proxy_ids) AS ids (id)
    ON CONFLICT ON CONSTRAINT scrapeq_proxies_pkey DO NOTHING;

    SELECT jobs.session_id, jobs.tried_sessions INTO v_sticky, v_tried
    FROM scraping_jobs AS jobs WHERE jobs.id = p_job_id AND jobs.attempt = p_attempt;
    v_tried := coalesce(v_tried, '{}');

    IF v_sticky IS NOT NULL AND NOT v_sticky = ANY (v_tried) THEN
        SELECT sessions.session_id INTO v_chosen
        FROM scrapeq_sessions AS sessions
        JOIN scrapeq_proxies AS proxies ON proxies.proxy_id = sessions.proxy_id
        LEFT JOIN scrapeq_session_sites AS sites
            ON sites.session_id = sessions.session_id AND sites.host_key = p_host_key
        WHERE sessions.session_id = v_sticky
          AND sessions.proxy_id = ANY (p_proxy_ids)
          AND (proxies.retired_until IS NULL OR proxies.retired_until <= now())
          AND sites.retired_at IS NULL;
    END IF;

    IF v_chosen IS NULL THEN
        -- A fresh session for every usable proxy that has none left for this site.
        INSERT INTO scrapeq_sessions (proxy_id, user_agent)
        SELECT proxies.proxy_id, p_user_agent
        FROM scrapeq_proxies AS proxies
        WHERE proxies.proxy_id = ANY (p_proxy_ids)
          AND (proxies.retired_until IS NULL OR proxies.retired_until <= now())
          AND NOT EXISTS (
              SELECT FROM scrapeq_sessions AS sessions
              LEFT JOIN scrapeq_session_sites AS sites
                  ON sites.session_id = sessions.session_id AND sites.host_key = p_host_key
              WHERE sessions.proxy_id = proxies.proxy_id
                AND sites.retired_at IS NULL
                AND NOT sessions.session_id = ANY (v_tried)
          );

        SELECT sessions.session_id INTO v_chosen
        FROM scrapeq_sessions AS sessions
        JOIN scrapeq_proxies AS proxies ON proxies.proxy_id = sessions.proxy_id
        LEFT JOIN scrapeq_session_sites AS sites
            ON sites.session_id = sessions.session_id AND sites.host_key = p_host_key
        WHERE sessions.proxy_id = ANY (p_proxy_ids)
          AND (proxies.retired_until IS NULL OR proxies.retired_until <= now())
          AND sites.retired_at IS NULL
          AND NOT sessions.session_id = ANY (v_tried)
        ORDER BY
            EXISTS (
                SELECT FROM scrapeq_sessions AS tried
                WHERE tried.session_id = ANY (v_tried) AND tried.proxy_id = sessions.proxy_id
            ),
            coalesce(sites.blocks, 0),
            sessions.last_used_at NULLS FIRST,
            sessions.session_id
        LIMIT 1;
    END IF;

    IF v_chosen IS NULL THEN
        RETURN;
    END IF;

    -- Taken now: the next choice prefers another session, so pages in flight at once spread
    -- over the proxies.
    UPDATE scrapeq_sessions AS sessions SET last_used_at = now()
    WHERE sessions.session_id = v_chosen;

    UPDATE scraping_jobs AS jobs SET session_id = v_chosen
    WHERE jobs.id = p_job_id AND jobs.attempt = p_attempt
      AND jobs.session_id IS DISTINCT FROM v_chosen;

    RETURN QUERY
    SELECT sessions.session_id, sessions.proxy_id, sessions.user_agent, sessions.cookies,
           cardinality(v_tried)
    FROM scrapeq_sessions AS sessions WHERE sessions.session_id = v_chosen;
END;
$$;

-- How one page of row (p_job_id, p_attempt) went on session p_session_id at site p_host_key:
-- 'ok' (any answer that is not a block), 'blocked' (docs/worker.md, "Blocked pages") or
-- 'proxy_failed' (the upstream proxy could not be reached or refused the tunnel).
-- * The session's jar becomes p_cookies (NULL: unchanged), its uses and last use move on.
-- * A block counts against the session on that site, which is retired there after
--   p_blocks_per_site blocks in a row, and is added to the row's tried sessions.
-- * A block or a proxy failure counts against the proxy: it is retired for every worker for
--   p_retire_seconds after p_failures_in_a_row failures with no page through it going well in
--   between, or once it fails on p_failed_sites sites (a site's failures end with a page there
--   that goes well). An 'ok' clears the proxy's failures in a row and its failures on the site.
-- Returns whether the session was retired on the site and whether the proxy was retired.
CREATE OR REPLACE FUNCTION scrapeq_session_record(
    p_job_id BIGINT,
    p_attempt INTEGER,
    p_session_id BIGINT,
    p_host_key TEXT,
    p_outcome TEXT,
    p_cookies JSONB,
    p_blocks_per_site INTEGER,
    p_failures_in_a_row INTEGER,
    p_failed_sites INTEGER,
    p_retire_seconds DOUBLE PRECISION
) RETURNS TABLE (session_retired BOOLEAN, proxy_retired BOOLEAN)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_proxy TEXT;
    v_session_retired BOOLEAN := false;
    v_proxy_retired BOOLEAN := false;
    v_failures INTEGER;
    v_sites INTEGER;
BEGIN
    IF p_outcome NOT IN ('ok', 'blocked', 'proxy_failed') THEN
        RAISE EXCEPTION 'a session outcome is ok, blocked or proxy_failed, not %', p_outcome
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    UPDATE scrapeq_sessions AS sessions
    SET cookies = coalesce(p_cookies, sessions.cookies),
        uses = sessions.uses + 1,
        last_used_at = now()
    WHERE sessions.session_id = p_session_id
    RETURNING sessions.proxy_id INTO v_proxy;
    IF v_proxy IS NULL THEN
        -- A session pruned while its page ran: nothing to count against.
        RETURN QUERY SELECT false, false;
        RETURN;
    END IF;

    IF p_outcome <> 'proxy_failed' THEN
        INSERT INTO scrapeq_session_sites AS sites
            (session_id, host_key, uses, blocks, blocks_in_a_row, retired_at)
        VALUES (
            p_session_id, p_host_key, 1,
            (p_outcome = 'blocked')::int, (p_outcome = 'blocked')::int,
            CASE WHEN p_outcome = 'blocked' AND p_blocks_per_site <= 1 THEN now() END
        )
        ON CONFLICT ON CONSTRAINT scrapeq_session_sites_pkey DO UPDATE
        SET uses = sites.uses + 1,
            blocks = sites.blocks + excluded.blocks,
            blocks_in_a_row = CASE WHEN p_outcome = 'blocked' THEN sites.blocks_in_a_row + 1
                                   ELSE 0 END,
            retired_at = CASE
                WHEN sites.retired_at IS NOT NULL THEN sites.retired_at
                WHEN p_outcome = 'blocked' AND sites.blocks_in_a_row + 1 >= p_blocks_per_site
                    THEN now()
            END
        RETURNING sites.retired_at IS NOT NULL INTO v_session_retired;
    END IF;

    IF p_outcome = 'blocked' THEN
        UPDATE scraping_jobs AS jobs
        SET tried_sessions = jobs.tried_sessions || p_session_id
        WHERE jobs.id = p_job_id AND jobs.attempt = p_attempt
          AND NOT p_session_id = ANY (jobs.tried_sessions)
          AND cardinality(jobs.tried_sessions) < {{MAX_TRIED_SESSIONS}};
    END IF;

    IF p_outcome = 'ok' THEN
        UPDATE scrapeq_proxies AS proxies SET failures_in_a_row = 0
        WHERE proxies.proxy_id = v_proxy AND proxies.failures_in_a_row <> 0;
        DELETE FROM scrapeq_proxy_sites AS failing
        WHERE failing.proxy_id = v_proxy AND failing.host_key = p_host_key;
    ELSE
        INSERT INTO scrapeq_proxy_sites AS failing (proxy_id, host_key, failures)
        VALUES (v_proxy, p_host_key, 1)
        ON CONFLICT ON CONSTRAINT scrapeq_proxy_sites_pkey
        DO UPDATE SET failures = failing.failures + 1, last_failed_at = now();

        UPDATE scrapeq_proxies AS proxies
        SET failures_in_a_row = proxies.failures_in_a_row + 1
        WHERE proxies.proxy_id = v_proxy
        RETURNING proxies.failures_in_a_row INTO v_failures;

        SELECT count(*) INTO v_sites FROM scrapeq_proxy_sites AS failing
        WHERE failing.proxy_id = v_proxy;

        IF v_failures >= p_failures_in_a_row OR v_sites >= p_failed_sites THEN
            UPDATE scrapeq_proxies AS proxies
            SET retired_until = now() + make_interval(secs => p_retire_seconds),
                retirements = proxies.retirements + 1,
                failures_in_a_row = 0
            WHERE proxies.proxy_id = v_proxy;
            DELETE FROM scrapeq_proxy_sites AS failing WHERE failing.proxy_id = v_proxy;
            v_proxy_retired := true;
        END IF;
    END IF;

    RETURN QUERY SELECT v_session_retired, v_proxy_retired;
END;
$$;
