"""Per-site politeness enforced by the claim: limits hold for every claimer at once, every
way a row stops being in flight frees its slot, delays and pauses hold a whole host, and a
host holding most of the backlog does not hold up the others."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue import inspection, statements
from scrapeq_queue.politeness import SERVER_ERROR_TRIP

from tests.waiting import eventually

Connection = psycopg.AsyncConnection[Any]

pytestmark = pytest.mark.timeout(60)

TWO_PER_SITE = queue.SitePoliteness(max_concurrent_per_site=2)


async def claim(
    connection: Connection, worker: str = "w", limit: int = 50, **more: Any
) -> list[queue.ClaimedJob]:
    more.setdefault("politeness", TWO_PER_SITE)
    return await queue.claim_jobs(
        connection, worker_id=worker, queues=["default"], limit=limit, lease_seconds=30, **more
    )


async def in_flight(connection: Connection, host_key: str) -> int:
    return (await queue.site_states(connection, [host_key]))[host_key].in_flight


async def test_rows_are_keyed_by_registrable_domain_and_plain_inserts_by_host_name(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(
        async_connection,
        ["https://shop.example.co.uk/a", "https://www.example.co.uk/b", "http://127.0.0.3:81/c"],
    )
    await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type) VALUES (%s, 'classic')",
        ("https://News.Example.org:8443/x",),
    )
    cursor = await async_connection.execute("SELECT host_key FROM scraping_jobs ORDER BY id")
    assert [row[0] for row in await cursor.fetchall()] == [
        "example.co.uk",
        "example.co.uk",
        "127.0.0.3",
        "news.example.org",
    ]


async def test_no_claimer_gets_more_rows_of_a_host_than_its_limit(
    async_connection: Connection, database_url: str
) -> None:
    await queue.enqueue_many(async_connection, [f"https://busy.test/{n}" for n in range(20)])
    await queue.enqueue_many(async_connection, [f"https://other.test/{n}" for n in range(20)])

    async def one_claimer(name: str) -> list[queue.ClaimedJob]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            return await claim(conn, name, limit=8)

    claimed = [job for jobs in await asyncio.gather(*map(one_claimer, "abcdef")) for job in jobs]

    per_host = {
        key: sum(job.host_key == key for job in claimed) for key in ("busy.test", "other.test")
    }
    assert per_host == {"busy.test": 2, "other.test": 2}
    assert await in_flight(async_connection, "busy.test") == 2
    assert await claim(async_connection) == []


async def test_rows_can_ask_for_a_stricter_limit_of_their_own_never_a_looser_one(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(
        async_connection,
        [f"https://wide.test/{n}" for n in range(10)],
        payload={"politeness": {"maxConcurrentPerSite": 5}},
    )
    await queue.enqueue_many(
        async_connection,
        [f"https://narrow.test/{n}" for n in range(10)],
        payload={"politeness": {"maxConcurrentPerSite": 1}},
    )
    claimed = await claim(async_connection)
    assert sorted(job.host_key for job in claimed) == ["narrow.test", "wide.test", "wide.test"]


async def test_every_way_out_of_flight_gives_the_slot_back(async_connection: Connection) -> None:
    await queue.enqueue_many(async_connection, [f"https://slots.test/{n}" for n in range(12)])

    async def two() -> list[queue.ClaimedJob]:
        jobs = await claim(async_connection)
        assert len(jobs) == 2
        assert await in_flight(async_connection, "slots.test") == 2
        return jobs

    first, second = await two()
    await queue.complete_job(
        async_connection, first.id, first.attempt, result={}, duration_seconds=0
    )
    assert await queue.fail_job(
        async_connection, second.id, second.attempt, error="x", reason="x", duration_seconds=0
    )
    assert await in_flight(async_connection, "slots.test") == 0

    first, second = await two()
    await queue.retry_job(
        async_connection, first.id, first.attempt, error="x", reason="x", duration_seconds=0
    )
    assert await queue.release_jobs(async_connection, worker_id="w", jobs=[second.token]) == 1
    assert await in_flight(async_connection, "slots.test") == 0

    first, second = await two()
    assert await queue.complete_many(
        async_connection, [queue.Completion(first.id, first.attempt, {}, 0.0)]
    ) == {first.id}
    assert await queue.cancel_jobs(async_connection, [second.id]) == 1
    assert await in_flight(async_connection, "slots.test") == 0

    await two()
    await async_connection.execute(
        "UPDATE scraping_jobs SET lease_expires_at = now() - interval '1 second'"
        " WHERE status = 'processing'"
    )
    assert await queue.rescue_expired_leases(async_connection) == 2
    assert await in_flight(async_connection, "slots.test") == 0
    assert len(await claim(async_connection)) == 2


async def test_a_delay_makes_a_host_take_one_request_at_a_time_spaced_by_the_delay(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(
        async_connection,
        [f"https://slow.test/{n}" for n in range(3)],
        payload={"politeness": {"delaySeconds": 0.5}},
    )
    [job] = await claim(async_connection)
    assert await claim(async_connection) == []
    await queue.complete_job(async_connection, job.id, job.attempt, result={}, duration_seconds=0)
    finished = asyncio.get_running_loop().time()
    assert await claim(async_connection) == []  # the delay runs from the end of the request

    jobs = await eventually(
        lambda: claim(async_connection), within=5, what="the delay to pass", every=0.02
    )
    assert len(jobs) == 1
    assert asyncio.get_running_loop().time() - finished >= 0.5 - 0.05


async def test_retry_after_pauses_the_whole_host_and_not_the_others(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://limited.test/{n}" for n in range(4)])
    await queue.enqueue_many(async_connection, [f"https://free.test/{n}" for n in range(4)])
    jobs = await claim(async_connection)
    limited = next(job for job in jobs if job.host_key == "limited.test")
    await queue.retry_job(
        async_connection,
        limited.id,
        limited.attempt,
        error="HTTP 429",
        reason="http_429",
        duration_seconds=0,
        retry_after_seconds=3,
        pause_site_seconds=3,
        server_error=True,
        host_key=limited.host_key,
    )
    for job in jobs:
        if job.host_key == "free.test":
            await queue.complete_job(
                async_connection, job.id, job.attempt, result={}, duration_seconds=0
            )
    state = (await queue.site_states(async_connection, ["limited.test"]))["limited.test"]
    assert state.pause_reason == "http_429"
    assert state.paused_until is not None
    assert (state.paused_until - await queue.database_now(async_connection)).total_seconds() > 2.5

    again = await claim(async_connection, "another-worker")
    assert {job.host_key for job in again} == {"free.test"}


async def test_server_errors_in_half_the_recent_responses_pause_a_host(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://down.test/{n}" for n in range(12)])
    for _ in range(SERVER_ERROR_TRIP):
        [job, *_] = await claim(async_connection, politeness=queue.SitePoliteness(1))
        await queue.retry_job(
            async_connection,
            job.id,
            job.attempt,
            error="HTTP 502",
            reason="http_5xx",
            duration_seconds=0,
            retry_after_seconds=0,
            server_error=True,
            host_key=job.host_key,
        )
    state = (await queue.site_states(async_connection, ["down.test"]))["down.test"]
    assert state.recent_server_errors == SERVER_ERROR_TRIP
    assert state.breaker_trips == 1
    assert state.pause_reason == "http_5xx"
    assert await claim(async_connection) == []


async def test_a_host_holding_most_rows_does_not_hold_up_the_others(
    async_connection: Connection,
) -> None:
    # The hot host's rows come first in every order the old claim used (older, higher priority).
    await queue.enqueue_many(
        async_connection, [f"https://hot.test/{n}" for n in range(5000)], priority=9
    )
    await queue.enqueue_many(async_connection, [f"https://cold{n}.test/" for n in range(50)])
    claimed: list[queue.ClaimedJob] = []
    while batch := await claim(async_connection, limit=10):
        claimed.extend(batch)
    hosts = [job.host_key for job in claimed]
    assert hosts.count("hot.test") == 2
    assert len(set(hosts) - {"hot.test"}) == 50


async def test_hosts_of_equal_priority_take_turns_even_when_the_first_is_free_again(
    async_connection: Connection,
) -> None:
    """Each claim of a connection starts after the host where its previous claim stopped: a
    host that is free again waits until the hosts behind it had their turn."""
    for host in ("a", "b", "c"):
        await queue.enqueue_many(async_connection, [f"https://{host}.test/{n}" for n in range(6)])
    order: list[set[str | None]] = []
    for _ in range(6):
        jobs = await claim(async_connection, limit=2)
        order.append({job.host_key for job in jobs})
        await queue.complete_many(
            async_connection, [queue.Completion(job.id, job.attempt, {}, 0.0) for job in jobs]
        )
    assert order == [{"a.test"}, {"b.test"}, {"c.test"}] * 2


async def test_claimers_on_different_connections_take_turns_together(
    async_connection: Connection, database_url: str
) -> None:
    """A claim starts where the queue's latest claim stopped, whichever connection made it:
    two claimers going round the same hosts share one turn instead of each passing over the
    hosts the other just took."""
    for host in ("a", "b", "c", "d"):
        await queue.enqueue_many(async_connection, [f"https://{host}.test/{n}" for n in range(4)])
    order: list[set[str | None]] = []
    async with await queue.connect(database_url) as other:
        for connection in (async_connection, other) * 4:
            jobs = await claim(connection, limit=2)
            order.append({job.host_key for job in jobs})
            await queue.complete_many(
                connection, [queue.Completion(job.id, job.attempt, {}, 0.0) for job in jobs]
            )
    assert order == [{"a.test"}, {"b.test"}, {"c.test"}, {"d.test"}] * 2


async def test_a_claim_whose_published_place_is_gone_starts_at_the_first_host(
    async_connection: Connection,
) -> None:
    """The shared place is a row's id: when that row is gone (retention deleted it), the claim
    starts before the first host of the highest priority."""
    for host in ("a", "b", "c"):
        await queue.enqueue_many(async_connection, [f"https://{host}.test/{n}" for n in range(4)])
    order: list[set[str | None]] = []
    for mark in (None, None, 10**15):
        if mark is not None:
            await async_connection.execute(
                "SELECT setval(scrapeq_claim_turn_slot('default'), %s)", (mark,)
            )
        jobs = await claim(async_connection, limit=2)
        order.append({job.host_key for job in jobs})
        await queue.complete_many(
            async_connection, [queue.Completion(job.id, job.attempt, {}, 0.0) for job in jobs]
        )
    assert order == [{"a.test"}, {"b.test"}, {"a.test"}]


async def test_a_place_published_by_another_queue_is_a_place_to_start(
    async_connection: Connection,
) -> None:
    """Queues that share a turn sequence start from each other's place: a row of another queue
    is a key in the same order (priority, run_at, id) as any head."""
    for host in ("a", "b"):
        await queue.enqueue_many(async_connection, [f"https://{host}.test/{n}" for n in range(2)])
    [elsewhere] = await queue.enqueue_many(async_connection, ["https://z.test/"], queue="other")
    await queue.enqueue_many(async_connection, ["https://c.test/0", "https://c.test/1"])
    await async_connection.execute(
        "SELECT setval(scrapeq_claim_turn_slot('default'), %s)", (elsewhere,)
    )
    jobs = await claim(async_connection, limit=2)
    assert {job.host_key for job in jobs} == {"c.test"}


async def test_rows_inserted_with_any_id_are_claimed_in_turn(
    async_connection: Connection,
) -> None:
    """A claim publishes the id of the last head it visited: a plain INSERT may give a row any
    id, and every one of them is a place to start from."""
    await async_connection.execute(
        "INSERT INTO scraping_jobs (id, url_to_scrape, parser_type)"
        " VALUES (-9223372036854775808, 'https://low.test/', 'classic'),"
        " (0, 'https://zero.test/', 'classic'), (-7, 'https://negative.test/', 'classic')"
    )
    claimed = set()
    for _ in range(3):
        jobs = await claim(async_connection, limit=1)
        claimed.update(job.id for job in jobs)
    assert claimed == {-9223372036854775808, 0, -7}


async def test_the_claim_function_called_with_no_queue_claims_nothing(
    async_connection: Connection,
) -> None:
    await queue.enqueue(async_connection, "https://a.test/1")
    for queues in (None, [], [None], [None, None]):
        cursor = await async_connection.execute(
            "SELECT id FROM scrapeq_claim(%s::text[], 10, 'w', 30, 2, 0)", (queues,)
        )
        assert await cursor.fetchall() == [], queues
    assert len(await claim(async_connection)) == 1


async def test_a_claim_holding_a_host_makes_no_other_claimer_wait(
    async_connection: Connection, database_url: str
) -> None:
    """Claims of one host take turns on a lock that nobody waits for: while one claim's
    transaction holds the host, another claimer passes over it at once and takes other hosts."""
    await queue.enqueue_many(async_connection, ["https://held.test/1", "https://held.test/2"])
    await queue.enqueue_many(async_connection, ["https://free.test/1"])
    # A claim inside an open transaction keeps its lock on held.test until it ends.
    async with (
        await psycopg.AsyncConnection.connect(database_url) as holder,
        holder.transaction(),
    ):
        cursor = await holder.execute(
            "SELECT id FROM scrapeq_claim(ARRAY['default'], 1, 'holder', 30, 2, 0)"
        )
        assert len(await cursor.fetchall()) == 1
        jobs = await asyncio.wait_for(claim(async_connection, "other", limit=5), 5)
        assert {job.host_key for job in jobs} == {"free.test"}
    # Once the holder is gone its host's other row is claimable.
    jobs = await claim(async_connection, "other", limit=5)
    assert {job.host_key for job in jobs} == {"held.test"}


async def test_rows_back_to_pending_by_plain_sql_become_claimable_again(
    async_connection: Connection,
) -> None:
    await queue.enqueue(async_connection, "https://classic.test/a")
    [job] = await claim(async_connection)
    assert await queue.fail_job(
        async_connection, job.id, job.attempt, error="x", reason="x", duration_seconds=0
    )
    assert await claim(async_connection) == []
    await async_connection.execute(
        "UPDATE scraping_jobs SET status = 'pending', finished_at = NULL WHERE id = %s", (job.id,)
    )
    assert [again.id for again in await claim(async_connection)] == [job.id]


async def test_a_pending_row_moved_earlier_by_plain_sql_is_claimable_at_once(
    async_connection: Connection,
) -> None:
    later = await queue.database_now(async_connection) + timedelta(hours=1)
    [job_id] = await queue.enqueue_many(async_connection, ["https://classic.test/a"], run_at=later)
    assert await claim(async_connection) == []
    await async_connection.execute(
        "UPDATE scraping_jobs SET run_at = now() WHERE id = %s", (job_id,)
    )
    assert [job.id for job in await claim(async_connection)] == [job_id]


async def head_of(connection: Connection, host_key: str) -> int | None:
    cursor = await connection.execute(
        "SELECT head_id FROM scrapeq_host_queues WHERE host_key = %s", (host_key,)
    )
    row = await cursor.fetchone()
    assert row is not None
    return row[0]


async def test_a_claim_leaves_the_head_on_the_hosts_next_row_not_on_one_it_took(
    async_connection: Connection,
) -> None:
    """A host that gave fewer rows than its free slots gets its next pending row as head (or
    none), not a row the claim took (which still looks pending to the claim): no later claim
    visits the host for nothing."""
    first, second = await queue.enqueue_many(
        async_connection, ["https://two.test/1", "https://two.test/2"]
    )
    assert [job.id for job in await claim(async_connection, limit=1)] == [first]
    assert await head_of(async_connection, "two.test") == second
    [only] = await queue.enqueue_many(async_connection, ["https://one.test/1"])
    assert [job.id for job in await claim(async_connection, limit=2)] == [second, only]
    assert await head_of(async_connection, "one.test") is None


async def test_priority_orders_rows_across_hosts_whatever_host_holds_them(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://a.test/{n}" for n in range(10)])
    await queue.enqueue_many(async_connection, [f"https://b.test/{n}" for n in range(10)])
    urgent = await queue.enqueue(async_connection, "https://c.test/urgent", priority=5)
    await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, priority)"
        " VALUES ('https://d.test/classic', 'classic', 7)"
    )

    first = await claim(async_connection, limit=3)

    assert [job.priority for job in first] == [7, 5, 0]
    assert first[0].host_key == "d.test"
    assert first[1].id == urgent
    # The rest go in priority order too, each host within its two slots at a time.
    rest = await claim(async_connection, limit=50)
    assert {job.host_key for job in rest} == {"a.test", "b.test"}
    assert all(job.priority == 0 for job in rest)


async def test_the_backlog_counts_only_the_due_rows_the_per_site_limits_let_start(
    async_connection: Connection,
) -> None:
    """What the autoscaler scales on: per host, due rows up to its limit less its rows in
    flight, and none of a paused host."""

    async def startable() -> int | None:
        backlog = await inspection.live_queue_backlog(async_connection, default_max_per_site=2)
        return backlog["default"].startable_due

    await queue.enqueue_many(async_connection, [f"https://busy.test/{n}" for n in range(10)])
    await queue.enqueue_many(async_connection, [f"https://quiet.test/{n}" for n in range(3)])
    assert await startable() == 2 + 2

    jobs = await claim(async_connection)
    assert len(jobs) == 4
    assert await startable() == 0  # both hosts at their limit

    busy = next(job for job in jobs if job.host_key == "busy.test")
    await queue.retry_job(
        async_connection,
        busy.id,
        busy.attempt,
        error="HTTP 429",
        reason="http_429",
        duration_seconds=0,
        retry_after_seconds=30,
        pause_site_seconds=30,
        server_error=True,
        host_key=busy.host_key,
    )
    for job in jobs:
        if job.host_key == "quiet.test":
            await queue.complete_job(
                async_connection, job.id, job.attempt, result={}, duration_seconds=0
            )
    # busy.test is paused (a slot free, 8 rows due): nothing; quiet.test has one row left.
    assert await startable() == 1


async def test_the_startable_rows_follow_the_pools_limit_and_a_hosts_delay(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://wide.test/{n}" for n in range(10)])
    await queue.enqueue_many(async_connection, [f"https://crawl.test/{n}" for n in range(10)])
    await queue.set_crawl_delay(async_connection, "crawl.test", 2.0)
    await queue.enqueue_many(
        async_connection,
        [f"https://slow.test/{n}" for n in range(10)],
        payload={"politeness": {"delaySeconds": 1}},
    )
    # A host with a delay (its producers' or robots.txt's) takes one request at a time.
    for limit, startable in [(2, 2 + 1 + 1), (6, 6 + 1 + 1)]:
        counts = await inspection.startable_due(async_connection, default_max_per_site=limit)
        assert counts == {"default": startable}


@pytest.mark.parametrize(
    "pool",
    [
        queue.SitePoliteness(max_concurrent_per_site=2),
        queue.SitePoliteness(max_concurrent_per_site=3, delay_seconds=5.0),
    ],
    ids=["no-pool-delay", "pool-delay"],
)
async def test_the_backlog_counts_as_startable_exactly_the_rows_a_claim_hands_out(
    async_connection: Connection, pool: queue.SitePoliteness
) -> None:
    """The autoscaler's count and the claim apply one rule (scrapeq_host_limit): a pool with a
    delay gets one row per host from a claim, and the backlog counts one per host too."""
    await queue.enqueue_many(async_connection, [f"https://busy.test/{n}" for n in range(5)])
    [held] = await claim(async_connection, limit=1, politeness=pool)
    await queue.enqueue_many(async_connection, [f"https://plain.test/{n}" for n in range(5)])
    await queue.enqueue_many(
        async_connection,
        [f"https://narrow.test/{n}" for n in range(6)],
        payload={"politeness": {"maxConcurrentPerSite": 1}},
    )
    await queue.enqueue_many(
        async_connection,
        [f"https://slow.test/{n}" for n in range(3)],
        payload={"politeness": {"delaySeconds": 2}},
    )
    await queue.enqueue_many(async_connection, [f"https://crawl.test/{n}" for n in range(3)])
    await queue.set_crawl_delay(async_connection, "crawl.test", 1.0)

    counted = await inspection.startable_due(
        async_connection,
        default_max_per_site=pool.max_concurrent_per_site,
        default_delay_seconds=pool.delay_seconds,
    )
    jobs = await claim(async_connection, limit=1000, politeness=pool)

    assert held.host_key == "busy.test"
    assert counted == {"default": len(jobs)}
    # busy.test holds one of its slots; narrow.test's rows asked for one at a time;
    # slow.test and crawl.test have delays of their own.
    assert len(jobs) == (0 + 1 + 1 + 1 + 1 if pool.delay_seconds else 1 + 2 + 1 + 1 + 1)


async def test_a_connection_plans_the_claim_once_and_reuses_the_plan(
    async_connection: Connection, connection_mode: str
) -> None:
    """Planning the claim costs about as much as running it. The client's statement is a short
    call that psycopg keeps parsed (it parses statements over 4,096 characters on every run)
    and PostgreSQL keeps planned; the function's own statements always use their cached
    generic plans. Through a pooler in transaction mode the client prepares nothing (the
    next transaction may run on another server connection), and the function's own plans
    are still cached per server connection."""
    assert len(statements.JOB_CLAIM) <= 4096
    await queue.enqueue_many(async_connection, [f"https://site{n}.test/" for n in range(40)])
    for _ in range(12):
        jobs = await claim(async_connection, limit=3)
        assert jobs
        await queue.complete_many(
            async_connection, [queue.Completion(job.id, job.attempt, {}, 0.0) for job in jobs]
        )
    cursor = await async_connection.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
        ("%scrapeq_claim(%",),
    )
    prepared = await cursor.fetchall()
    if connection_mode == "pgbouncer":
        assert prepared == []
    else:
        [(generic, custom)] = prepared
        # psycopg prepares a statement on its 5th run; PostgreSQL then makes 5 custom plans
        # and compares: every run after that must use the generic plan.
        assert custom <= 5
        assert generic >= 12 - 5 - custom
    cursor = await async_connection.execute(
        "SELECT proconfig FROM pg_proc WHERE proname = 'scrapeq_claim'"
    )
    [(settings,)] = await cursor.fetchall()
    assert "plan_cache_mode=force_generic_plan" in settings
