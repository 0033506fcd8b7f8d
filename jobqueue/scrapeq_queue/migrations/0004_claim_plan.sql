-- 0004: the claim keeps one cached plan.
--
-- The claim is a prepared statement that every worker runs many times a second. PostgreSQL
-- plans a prepared statement once (a generic plan) only when that plan's estimated cost is not
-- above the plans made for each call's values; otherwise it plans every call again. The claim
-- walks `unnest(queues)`, which a generic plan estimates at 100 queues (a call's own plan sees
-- the one or two it has), so the generic plan looked 9 times dearer and every claim was
-- planned again: about 2 ms of a claim's 6 ms on the benchmark's rows. The same plan is chosen
-- either way; only its estimate differed.
--
-- scrapeq_claim_queues gives the queues of a claim, each once, and tells the planner to expect
-- one. It is STRICT so that PostgreSQL runs it as a function instead of inlining its body (an
-- inlined body would bring back unnest's estimate); a NULL array gives no queue.
CREATE FUNCTION scrapeq_claim_queues(queues TEXT[]) RETURNS SETOF TEXT
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE ROWS 1 AS $$
    SELECT DISTINCT queue FROM unnest(queues) AS given(queue) WHERE queue IS NOT NULL
$$;
