"""The retry delay as the queue computes it (JOB_RETRY, with the values of one RetryPolicy):
exponential with jitter, a Retry-After hint wins, always capped; server errors pause a site."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

Connection = psycopg.AsyncConnection[Any]


async def retry_delay(
    connection: Connection, retry_count: int, backoff_seconds: float, **retry: Any
) -> float:
    """Seconds from just before a retry to the row's new run_at, for a fresh row that has
    already been retried `retry_count` times."""
    job_id = await queue.enqueue(
        connection,
        f"https://e.test/{retry_count}",
        max_retries=100,
        backoff_seconds=backoff_seconds,
    )
    await connection.execute(
        "UPDATE scraping_jobs SET retry_count = %s WHERE id = %s", (retry_count, job_id)
    )
    [job] = await queue.claim_jobs(
        connection,
        worker_id="w",
        queues=["default"],
        limit=1,
        lease_seconds=30,
        politeness=queue.NO_SITE_LIMIT,
    )
    before = await queue.database_now(connection)
    outcome = await queue.retry_job(
        connection, job.id, job.attempt, error="x", reason="timeout", duration_seconds=0, **retry
    )
    assert outcome == "retrying"
    cursor = await connection.execute("SELECT run_at FROM scraping_jobs WHERE id = %s", (job_id,))
    row = await cursor.fetchone()
    assert row is not None
    await queue.cancel_jobs(connection, [job_id])  # out of the next claim's way
    return float((row[0] - before).total_seconds())


async def test_the_delay_doubles_with_every_retry(async_connection: Connection) -> None:
    delays = [await retry_delay(async_connection, n, 10.0, jitter=1.0) for n in range(4)]
    assert delays == pytest.approx([10.0, 20.0, 40.0, 80.0], abs=0.5)


async def test_jitter_only_shortens_the_delay_within_the_policys_range(
    async_connection: Connection,
) -> None:
    low, high = queue.RETRY_POLICY.jitter_range
    assert await retry_delay(async_connection, 2, 10.0, jitter=low) == pytest.approx(
        40.0 * low, abs=0.5
    )
    drawn = [await retry_delay(async_connection, 2, 100.0) for _ in range(5)]
    assert all(400.0 * low - 0.5 <= delay <= 400.0 * high + 0.5 for delay in drawn), drawn


async def test_retry_after_wins_over_the_schedule(async_connection: Connection) -> None:
    delay = await retry_delay(async_connection, 5, 10.0, jitter=1.0, retry_after_seconds=3.0)
    assert delay == pytest.approx(3.0, abs=0.5)


async def test_the_delay_never_exceeds_the_policys_cap(async_connection: Connection) -> None:
    cap = queue.RETRY_POLICY.max_delay_seconds
    assert await retry_delay(async_connection, 30, 10.0, jitter=1.0) == pytest.approx(cap, abs=1)
    hinted = await retry_delay(async_connection, 0, 10.0, retry_after_seconds=86_400.0)
    assert hinted == pytest.approx(cap, abs=1)
    shorter = queue.RetryPolicy(max_delay_seconds=60.0)
    capped = await retry_delay(async_connection, 10, 10.0, jitter=1.0, policy=shorter)
    assert capped == pytest.approx(60.0, abs=0.5)


async def test_a_pausing_reason_counts_against_the_site_by_the_policys_trip(
    async_connection: Connection,
) -> None:
    """Which reasons speak for the whole site, and how many of them pause it, are the
    policy's: without `server_error`, the reason decides."""
    policy = queue.RetryPolicy(
        server_error_trip=2, breaker_pause_seconds=120.0, breaker_max_pause_seconds=120.0
    )
    await queue.enqueue_many(async_connection, [f"https://down.test/{n}" for n in range(4)])
    for reason in ("timeout", "http_5xx", "http_429"):
        [job] = await queue.claim_jobs(
            async_connection,
            worker_id="w",
            queues=["default"],
            limit=1,
            lease_seconds=30,
            politeness=queue.SitePoliteness(1),
        )
        await queue.retry_job(
            async_connection,
            job.id,
            job.attempt,
            error=reason,
            reason=reason,
            duration_seconds=0,
            retry_after_seconds=0,
            host_key=job.host_key,
            policy=policy,
        )
    state = (await queue.site_states(async_connection, ["down.test"]))["down.test"]
    assert state.recent_server_errors == 2  # the timeout is the row's own business
    assert state.breaker_trips == 1
    assert state.pause_reason == "http_429"
    assert state.paused_until is not None
