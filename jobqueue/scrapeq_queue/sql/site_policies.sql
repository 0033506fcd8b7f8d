-- Site policies: which policy applies to a site, what it sets, and its resolution into
-- scrapeq_hosts. The live definition; a migration applies this file
-- (`\ir ../sql/site_policies.sql`); docs/queue.md, "Site policies", explains the rule once.
--
-- The claim never matches patterns: a site's policy is resolved into its scrapeq_hosts row
-- (policy_pattern, max_in_flight, delay_seconds, adaptive_ceiling) when the site is first seen
-- (scrapeq_heads_pending) and again for every site when a policy changes
-- (scrapeq_site_policies_resolve).

-- The patterns that may apply to a site, most specific first: the site itself, then `*.` and
-- each of its suffixes, longest first (`*.shop.example.com`, `*.example.com`, `*.com`), then
-- `*`. So `*.example.com` applies to example.com and to every name under it.
CREATE OR REPLACE FUNCTION scrapeq_site_patterns(host_key TEXT) RETURNS TEXT[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY[host_key]
           || ARRAY(SELECT '*.' || array_to_string(labels.label[position:], '.')
                    FROM (SELECT string_to_array(host_key, '.')) AS labels(label),
                         generate_subscripts(labels.label, 1) AS position
                    ORDER BY position)
           || ARRAY['*']
$$;

-- What the policies naming one pattern set together: the strictest of each setting (the lowest
-- limit, the longest delay, robots.txt obeyed when any of them obeys it), and the user agent
-- and contact of the first of them by name that names one.
CREATE OR REPLACE VIEW scrapeq_site_rules AS
SELECT policies.pattern,
       min(policies.max_in_flight) AS max_in_flight,
       max(policies.delay_seconds) AS delay_seconds,
       bool_or(policies.respect_robots_txt) AS respect_robots_txt,
       (array_agg(policies.user_agent ORDER BY policies.policy)
           FILTER (WHERE policies.user_agent IS NOT NULL))[1] AS user_agent,
       (array_agg(policies.contact ORDER BY policies.policy)
           FILTER (WHERE policies.contact IS NOT NULL))[1] AS contact,
       array_agg(policies.policy ORDER BY policies.policy) AS policies
FROM scrapeq_site_policies AS policies
GROUP BY policies.pattern;

COMMENT ON VIEW scrapeq_site_rules IS
    'scrapeq: per site pattern, what the site policies naming it set together (the strictest of each setting).';

-- The most specific pattern of a policy that applies to `host_key` (NULL: no policy does).
CREATE OR REPLACE FUNCTION scrapeq_site_policy_pattern(host_key TEXT) RETURNS TEXT
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT candidate.pattern
    FROM unnest(scrapeq_site_patterns(host_key)) WITH ORDINALITY AS candidate(pattern, rank)
    WHERE EXISTS (SELECT FROM scrapeq_site_policies AS policies
                  WHERE policies.pattern = candidate.pattern)
    ORDER BY candidate.rank
    LIMIT 1
$$;

-- The first policy (by name) of `pattern` that refuses `namespace` (it is denied, or an allow
-- list leaves it out); NULL when every policy of the pattern lets it crawl.
CREATE OR REPLACE FUNCTION scrapeq_site_refusing_policy(pattern TEXT, namespace TEXT)
RETURNS TEXT
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT policies.policy FROM scrapeq_site_policies AS policies
    WHERE policies.pattern = scrapeq_site_refusing_policy.pattern
      AND (namespace = ANY(policies.denied_namespaces)
           OR NOT namespace = ANY(coalesce(policies.allowed_namespaces, ARRAY[namespace])))
    ORDER BY policies.policy
    LIMIT 1
$$;

-- Resolves every known site's policy again (after a policy changed); answers how many sites'
-- limits, delays or patterns changed. Writes only the rows that change. A site whose policy
-- makes its limit adaptive keeps the limit it has reached (within the policy's limit, which
-- becomes its ceiling), or starts at {{ADAPTIVE_START_LIMIT}}; one that no longer adapts takes
-- the policy's limit. PL/pgSQL, whose statements are planned when they first run: the columns
-- of later migrations (adaptive: 0019) need not exist when an earlier one defines it.
CREATE OR REPLACE FUNCTION scrapeq_site_policies_resolve() RETURNS BIGINT
    LANGUAGE plpgsql AS $$
DECLARE
    changed BIGINT;
BEGIN
    WITH resolved AS (
        SELECT hosts.host_key, rules.pattern, rules.delay_seconds, adapting.ceiling,
               CASE WHEN adapting.ceiling IS NULL THEN NULL
                    ELSE least(adapting.ceiling,
                               coalesce(hosts.adaptive_limit, {{ADAPTIVE_START_LIMIT}}))
               END AS adaptive_limit,
               rules.max_in_flight
        FROM scrapeq_hosts AS hosts
        LEFT JOIN scrapeq_site_rules AS rules
            ON rules.pattern = scrapeq_site_policy_pattern(hosts.host_key)
        CROSS JOIN LATERAL (
            SELECT CASE WHEN EXISTS (SELECT FROM scrapeq_site_policies AS policies
                                     WHERE policies.pattern = rules.pattern AND policies.adaptive)
                        THEN rules.max_in_flight END AS ceiling
        ) AS adapting
    ),
    updated AS (
        UPDATE scrapeq_hosts AS hosts
        SET policy_pattern = resolved.pattern,
            max_in_flight = coalesce(floor(resolved.adaptive_limit)::integer,
                                     resolved.max_in_flight),
            delay_seconds = resolved.delay_seconds,
            adaptive_ceiling = resolved.ceiling,
            adaptive_limit = resolved.adaptive_limit
        FROM resolved
        WHERE hosts.host_key = resolved.host_key
          AND (hosts.policy_pattern, hosts.max_in_flight, hosts.delay_seconds,
               hosts.adaptive_ceiling, hosts.adaptive_limit)
              IS DISTINCT FROM (resolved.pattern,
                                coalesce(floor(resolved.adaptive_limit)::integer,
                                         resolved.max_in_flight),
                                resolved.delay_seconds, resolved.ceiling,
                                resolved.adaptive_limit)
        RETURNING 1
    )
    SELECT count(*) INTO changed FROM updated;
    RETURN changed;
END;
$$;

COMMENT ON FUNCTION scrapeq_site_patterns(TEXT) IS
    'scrapeq: the site patterns that may apply to a site, most specific first (docs/queue.md, "Site policies").';
COMMENT ON FUNCTION scrapeq_site_policy_pattern(TEXT) IS
    'scrapeq: the most specific pattern of a site policy that applies to a site; NULL when none does.';
COMMENT ON FUNCTION scrapeq_site_refusing_policy(TEXT, TEXT) IS
    'scrapeq: the first site policy of a pattern that refuses a namespace; NULL when none does.';
COMMENT ON FUNCTION scrapeq_site_policies_resolve() IS
    'scrapeq: resolves every known site''s policy into scrapeq_hosts again; answers how many sites changed.';

-- A site seen for the first time takes its policy (every insert into scrapeq_hosts: a
-- producer's rows, a robots.txt copy's Crawl-delay).
CREATE OR REPLACE FUNCTION scrapeq_hosts_take_policy() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    SELECT rules.pattern, rules.max_in_flight, rules.delay_seconds,
           CASE WHEN EXISTS (SELECT FROM scrapeq_site_policies AS policies
                             WHERE policies.pattern = rules.pattern AND policies.adaptive)
                THEN rules.max_in_flight END
    INTO NEW.policy_pattern, NEW.max_in_flight, NEW.delay_seconds, NEW.adaptive_ceiling
    FROM scrapeq_site_rules AS rules
    WHERE rules.pattern = scrapeq_site_policy_pattern(NEW.host_key);
    IF NEW.adaptive_ceiling IS NOT NULL THEN
        NEW.adaptive_limit := least(NEW.adaptive_ceiling, {{ADAPTIVE_START_LIMIT}});
        NEW.max_in_flight := floor(NEW.adaptive_limit)::integer;
    END IF;
    RETURN NEW;
END;
$$;
