-- A job's own limits on a site (scrapeq_site_job_limits): recorded from the rows that name
-- them, by a trigger of scraping_jobs that migration 0015_site_policies makes. The live
-- definition; a migration applies this file (`\ir ../sql/job_limits.sql`). The claim and the
-- autoscaler's count read them with scrapeq_job_limit (sql/host_limits.sql); docs/queue.md,
-- "Site policies", explains the rule once.

-- The limits rows name (parallel arrays, one entry per row), per site and owner_key: of each,
-- the last row's that names one.
CREATE OR REPLACE FUNCTION scrapeq_named_job_limits(host_keys TEXT[], owner_keys TEXT[],
                                                    ids BIGINT[], limits INTEGER[],
                                                    delays DOUBLE PRECISION[])
RETURNS TABLE (host_key TEXT, owner_key TEXT, max_in_flight INTEGER,
               delay_seconds DOUBLE PRECISION)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT given.host_key, given.owner_key,
           (array_agg(given.max_in_flight ORDER BY given.id DESC)
               FILTER (WHERE given.max_in_flight IS NOT NULL))[1],
           (array_agg(given.delay_seconds ORDER BY given.id DESC)
               FILTER (WHERE given.delay_seconds IS NOT NULL))[1]
    FROM unnest(host_keys, owner_keys, ids, limits, delays)
         AS given(host_key, owner_key, id, max_in_flight, delay_seconds)
    WHERE given.max_in_flight IS NOT NULL OR given.delay_seconds IS NOT NULL
    GROUP BY given.host_key, given.owner_key
$$;

-- A job's own limits on its sites (scrapeq_site_job_limits, keyed by site and owner_key: the
-- owner_uid, or '' for rows without an owner, which share one group per site), from rows that
-- name them (parallel arrays, one entry per row; of each group, the last row's that names one
-- wins). Inserted once and written again only when a row names others: an upsert of every call
-- would lock the group's row and serialise a job's producers. Flags the site (job_limits) so
-- that the claim looks them up.
CREATE OR REPLACE FUNCTION scrapeq_job_limits_named(host_keys TEXT[], owner_keys TEXT[],
                                                    ids BIGINT[], limits INTEGER[],
                                                    delays DOUBLE PRECISION[]) RETURNS void
    LANGUAGE plpgsql AS $$
BEGIN
    IF limits IS NULL OR NOT EXISTS (SELECT FROM unnest(limits, delays) AS given(lim, del)
                                     WHERE given.lim IS NOT NULL OR given.del IS NOT NULL) THEN
        RETURN;  -- the common case: no row names limits of its own
    END IF;
    INSERT INTO scrapeq_site_job_limits (host_key, owner_key, max_in_flight, delay_seconds)
    SELECT named.host_key, named.owner_key, named.max_in_flight, named.delay_seconds
    FROM scrapeq_named_job_limits(host_keys, owner_keys, ids, limits, delays) AS named
    ORDER BY named.host_key, named.owner_key
    ON CONFLICT (host_key, owner_key) DO NOTHING;
    UPDATE scrapeq_site_job_limits AS own
    SET max_in_flight = coalesce(named.max_in_flight, own.max_in_flight),
        delay_seconds = coalesce(named.delay_seconds, own.delay_seconds)
    FROM scrapeq_named_job_limits(host_keys, owner_keys, ids, limits, delays) AS named
    WHERE own.host_key = named.host_key AND own.owner_key = named.owner_key
      AND (own.max_in_flight, own.delay_seconds)
          IS DISTINCT FROM (coalesce(named.max_in_flight, own.max_in_flight),
                            coalesce(named.delay_seconds, own.delay_seconds));
    UPDATE scrapeq_hosts AS hosts SET job_limits = true
    WHERE NOT hosts.job_limits
      AND hosts.host_key IN (SELECT named.host_key
                             FROM scrapeq_named_job_limits(host_keys, owner_keys, ids, limits,
                                                           delays) AS named);
END;
$$;

-- New pending rows that name limits make them their jobs' own: one call per INSERT statement,
-- whoever runs it.
CREATE OR REPLACE FUNCTION scrapeq_job_limits_after_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM scrapeq_job_limits_named(
        array_agg(host_key), array_agg(coalesce(owner_uid, '')), array_agg(id),
        array_agg(scrapeq_payload_max_per_host(payload)),
        array_agg(scrapeq_payload_delay_seconds(payload)))
    FROM new_rows WHERE status = 'pending';
    RETURN NULL;
END;
$$;
