"""A site's server-error breaker in PostgreSQL: server errors trip it by their rate over the
site's recent responses, never by a few in a row; a tripped site waits out a bounded pause
that doubles while its probes of pages never tried fail, takes one request at a time after
the pause, and its first completion closes the breaker."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue.politeness import SERVER_ERROR_TRIP, SERVER_ERROR_WINDOW

from tests.waiting import eventually

Connection = psycopg.AsyncConnection[Any]

pytestmark = pytest.mark.timeout(60)

# Short pauses, so that a test sees a probe within seconds.
SHORT_PAUSES = queue.RetryPolicy(breaker_pause_seconds=2.0, breaker_max_pause_seconds=4.0)
FIVE_PER_SITE = queue.SitePoliteness(max_concurrent_per_site=5)


async def claim(
    connection: Connection, limit: int = 50, politeness: queue.SitePoliteness = FIVE_PER_SITE
) -> list[queue.ClaimedJob]:
    return await queue.claim_jobs(
        connection,
        worker_id="w",
        queues=["default"],
        limit=limit,
        lease_seconds=30,
        politeness=politeness,
    )


async def server_error(connection: Connection, job: queue.ClaimedJob) -> None:
    await queue.retry_job(
        connection,
        job.id,
        job.attempt,
        error="HTTP 500",
        reason="http_5xx",
        duration_seconds=0,
        retry_after_seconds=0,
        host_key=job.host_key,
        policy=SHORT_PAUSES,
    )


async def success(connection: Connection, job: queue.ClaimedJob) -> None:
    assert await queue.complete_job(connection, job.id, job.attempt, result={}, duration_seconds=0)


async def state(connection: Connection, site: str) -> queue.SiteState:
    return (await queue.site_states(connection, [site]))[site]


async def test_a_site_where_fewer_than_half_the_responses_fail_keeps_its_pace(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://mixed.test/{n}" for n in range(60)])
    # Two failures, then three successes, over and over: 40 % of the responses fail.
    for _ in range(12):
        jobs = await claim(async_connection, limit=5)
        assert len(jobs) == 5
        for position, job in enumerate(jobs):
            if position < 2:
                await server_error(async_connection, job)
            else:
                await success(async_connection, job)
    site = await state(async_connection, "mixed.test")
    assert site.breaker_trips == 0
    assert site.paused_until is None
    assert site.recent_server_errors < SERVER_ERROR_TRIP


async def test_half_the_window_failing_trips_the_breaker_and_pauses_the_site(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://down.test/{n}" for n in range(20)])
    for _ in range(SERVER_ERROR_TRIP - 1):
        [job, *_] = await claim(async_connection, limit=1)
        await server_error(async_connection, job)
    assert (await state(async_connection, "down.test")).breaker_trips == 0
    assert len(await claim(async_connection, limit=1)) == 1  # one short: still claimed

    [job] = [job for job in await claim(async_connection, limit=1)]
    await server_error(async_connection, job)
    site = await state(async_connection, "down.test")
    assert site.breaker_trips == 1
    assert site.recent_server_errors == SERVER_ERROR_TRIP
    assert site.paused_until is not None
    assert await claim(async_connection) == []


async def test_after_the_pause_one_probe_at_a_time_and_its_success_closes_the_breaker(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://flaky.test/{n}" for n in range(30)])
    for _ in range(SERVER_ERROR_TRIP):
        [job, *_] = await claim(async_connection, limit=1)
        await server_error(async_connection, job)
    assert await claim(async_connection) == []

    probe = await eventually(
        lambda: claim(async_connection), within=10, what="the probe after the pause"
    )
    assert len(probe) == 1  # one request, though the site's limit is 5
    assert await claim(async_connection) == []  # and no other while it runs
    await success(async_connection, probe[0])

    site = await state(async_connection, "flaky.test")
    assert site.breaker_trips == 0
    assert site.recent_server_errors == 0
    assert len(await claim(async_connection)) == 5  # the site's own limit again


async def pause_left(connection: Connection, site: str) -> float:
    paused_until = (await state(connection, site)).paused_until
    assert paused_until is not None
    return (paused_until - await queue.database_now(connection)).total_seconds()


async def test_a_failed_probe_of_a_site_that_still_answers_some_pages_keeps_the_first_pause(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://some.test/{n}" for n in range(30)])
    for job in await claim(async_connection, limit=5):
        await success(async_connection, job)
    for _ in range(SERVER_ERROR_TRIP):
        [job, *_] = await claim(async_connection, limit=1)
        await server_error(async_connection, job)
    [probe] = await eventually(lambda: claim(async_connection), within=10, what="the probe")
    await server_error(async_connection, probe)
    site = await state(async_connection, "some.test")
    assert site.breaker_trips == 1
    assert await pause_left(async_connection, "some.test") == pytest.approx(2.0, abs=0.5)


async def test_once_every_recent_response_failed_each_failed_probe_doubles_the_pause_to_the_bound(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://dead.test/{n}" for n in range(30)])
    # A whole window in flight at once: the first half trips the breaker, the rest fails
    # during the pause and only fills the window.
    in_flight = await claim(
        async_connection, politeness=queue.SitePoliteness(max_concurrent_per_site=20)
    )
    assert len(in_flight) == SERVER_ERROR_WINDOW
    for job in in_flight:
        await server_error(async_connection, job)
    site = await state(async_connection, "dead.test")
    assert (site.breaker_trips, site.recent_server_errors) == (1, SERVER_ERROR_WINDOW)
    pauses = []
    for trips in (2, 3):
        [probe] = await eventually(
            lambda: claim(async_connection), within=10, what=f"the probe before trip {trips}"
        )
        await server_error(async_connection, probe)
        assert (await state(async_connection, "dead.test")).breaker_trips == trips
        pauses.append(await pause_left(async_connection, "dead.test"))
    # 2 s doubled is 4 s, the bound; doubled again it stays 4 s.
    assert pauses == [pytest.approx(4.0, abs=0.5)] * 2


async def test_a_failed_probe_that_retries_a_row_keeps_the_pause_whatever_the_window_says(
    async_connection: Connection,
) -> None:
    # Only the window's own rows: once they all failed, every probe is a retry of one of them.
    await queue.enqueue_many(
        async_connection,
        [f"https://removed.test/{n}" for n in range(SERVER_ERROR_WINDOW)],
        max_retries=5,
    )
    in_flight = await claim(
        async_connection, politeness=queue.SitePoliteness(max_concurrent_per_site=20)
    )
    assert len(in_flight) == SERVER_ERROR_WINDOW
    for job in in_flight:
        await server_error(async_connection, job)
    for _ in range(2):
        [probe] = await eventually(lambda: claim(async_connection), within=10, what="the probe")
        assert probe.retry_count >= 1
        await server_error(async_connection, probe)
        site = await state(async_connection, "removed.test")
        assert (site.breaker_trips, site.recent_server_errors) == (1, SERVER_ERROR_WINDOW)
        assert await pause_left(async_connection, "removed.test") == pytest.approx(2.0, abs=0.5)


async def test_a_successful_response_pushes_an_old_error_out_of_the_window(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(
        async_connection, [f"https://recovering.test/{n}" for n in range(SERVER_ERROR_WINDOW + 5)]
    )
    [job] = await claim(async_connection, limit=1)
    await server_error(async_connection, job)
    assert (await state(async_connection, "recovering.test")).recent_server_errors == 1
    completed = 0
    while completed < SERVER_ERROR_WINDOW:
        for job in await claim(async_connection, limit=5):
            await success(async_connection, job)
            completed += 1
    assert (await state(async_connection, "recovering.test")).recent_server_errors == 0


async def test_the_completions_of_a_clean_site_leave_its_state_row_unwritten(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://healthy.test/{n}" for n in range(4)])
    jobs = await claim(async_connection, limit=4)
    cursor = await async_connection.execute(
        "SELECT xmin::text FROM scrapeq_hosts WHERE host_key = 'healthy.test'"
    )
    before = await cursor.fetchone()
    await queue.complete_many(
        async_connection, [queue.Completion(job.id, job.attempt, {}, 0.0) for job in jobs]
    )
    cursor = await async_connection.execute(
        "SELECT xmin::text FROM scrapeq_hosts WHERE host_key = 'healthy.test'"
    )
    assert await cursor.fetchone() == before


async def test_a_retry_after_that_is_no_server_error_pauses_the_site_and_leaves_its_window(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://refusing.test/{n}" for n in range(3)])
    [job, *_] = await claim(async_connection, limit=1)
    await queue.retry_job(
        async_connection,
        job.id,
        job.attempt,
        error="HTTP 429: blocked",
        reason="blocked",
        duration_seconds=0,
        retry_after_seconds=5,
        pause_site_seconds=5,
        server_error=False,
        host_key=job.host_key,
    )
    site = await state(async_connection, "refusing.test")
    assert (site.pause_reason, site.recent_server_errors, site.breaker_trips) == ("blocked", 0, 0)
    assert await pause_left(async_connection, "refusing.test") == pytest.approx(5.0, abs=0.5)
    assert await claim(async_connection) == []
