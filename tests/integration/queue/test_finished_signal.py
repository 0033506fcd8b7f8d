"""The finished-row signal on a real PostgreSQL: a client LISTENing on scrapeq_finished gets
exactly one notification per row that opted in (notify_finished) when it completes, fails for
good or is cancelled, and none for rows that did not opt in or did not finish."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

from tests.integration.queue.test_job_lifecycle import claim_jobs
from tests.plain_sql import insert_plain_row

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]

# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more.
NOTIFY_PAYLOAD_LIMIT = 8000


async def received(listener: Connection, *, at_least: int, within: float) -> list[str]:
    """The payloads of the notifications that arrive: at least `at_least` of them within
    `within` seconds, then whatever else comes within one more second (so that a duplicate or
    a stray notification shows)."""
    payloads = [
        notification.payload
        async for notification in listener.notifies(timeout=within, stop_after=at_least)
    ]
    payloads += [notification.payload async for notification in listener.notifies(timeout=1.0)]
    return payloads


async def claim_all(connection: Connection) -> dict[int, queue.ClaimedJob]:
    jobs = await claim_jobs(
        connection, worker_id="w", queues=["default", "news"], limit=100, lease_seconds=30
    )
    return {job.id: job for job in jobs}


async def test_a_listener_gets_one_notification_per_opted_in_row_that_finishes(
    database_url: str, async_connection: Connection
) -> None:
    # A classic producer opts in with one more column in its INSERT.
    classic = await insert_plain_row(async_connection, "https://e.test/classic", "'{}'")
    await async_connection.execute(
        "UPDATE scraping_jobs SET notify_finished = true WHERE id = %s", (classic,)
    )
    opted_in = await queue.enqueue_many(
        async_connection,
        ["https://e.test/to-fail", "https://e.test/to-cancel"],
        queue="news",
        notify_finished=True,
    )
    to_fail, to_cancel = opted_in
    quiet = await queue.enqueue_many(
        async_connection, ["https://e.test/quiet-done", "https://e.test/quiet-failed"]
    )
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listener:
        await listener.execute(f"LISTEN {queue.FINISHED_CHANNEL}")

        jobs = await claim_all(async_connection)
        assert set(jobs) == {classic, to_fail, to_cancel, *quiet}
        # One batched completion of an opted-in row and a quiet one, as a worker writes them.
        done = await queue.complete_many(
            async_connection,
            [
                queue.Completion(job.id, job.attempt, {"ok": True}, 0.0)
                for job in (jobs[classic], jobs[quiet[0]])
            ],
        )
        assert done == {classic, quiet[0]}
        # A retry is not a finish: no notification until the row fails for good.
        outcome = await queue.retry_job(
            async_connection,
            to_fail,
            jobs[to_fail].attempt,
            error="HTTP 503",
            reason="http_503",
            duration_seconds=0,
        )
        assert outcome == "retrying"
        assert await queue.fail_job(
            async_connection,
            quiet[1],
            jobs[quiet[1]].attempt,
            error="HTTP 404",
            reason="http_404",
            duration_seconds=0,
        )
        await async_connection.execute(
            "UPDATE scraping_jobs SET run_at = now() WHERE id = %s", (to_fail,)
        )
        (again,) = (await claim_all(async_connection)).values()
        assert await queue.fail_job(
            async_connection,
            to_fail,
            again.attempt,
            error="gone",
            reason="http_410",
            duration_seconds=0,
        )
        assert await queue.cancel_jobs(async_connection, [to_cancel]) == 1

        payloads = await received(listener, at_least=3, within=10)

    assert all(len(payload.encode()) < NOTIFY_PAYLOAD_LIMIT for payload in payloads)
    assert sorted((json.loads(payload) for payload in payloads), key=lambda p: p["id"]) == [
        {"id": classic, "queue": "default", "state": "completed"},
        {"id": to_fail, "queue": "news", "state": "failed"},
        {"id": to_cancel, "queue": "news", "state": "cancelled"},
    ]


async def test_rows_that_did_not_opt_in_send_nothing_when_they_finish(
    database_url: str, async_connection: Connection
) -> None:
    ids = await queue.enqueue_many(async_connection, [f"https://e.test/{n}" for n in range(20)])
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listener:
        await listener.execute(f"LISTEN {queue.FINISHED_CHANNEL}")
        jobs = await claim_all(async_connection)
        done = await queue.complete_many(
            async_connection,
            [queue.Completion(job.id, job.attempt, {}, 0.0) for job in jobs.values()],
        )
        assert done == set(ids)

        assert [n.payload async for n in listener.notifies(timeout=1.0)] == []


async def test_a_followed_page_keeps_its_parents_signal_and_retention(
    async_connection: Connection,
) -> None:
    (parent,) = await queue.enqueue_many(
        async_connection,
        ["https://e.test/listing"],
        notify_finished=True,
        retain_for=timedelta(days=3),
    )
    (job,) = (await claim_all(async_connection)).values()
    assert await queue.complete_job(
        async_connection,
        parent,
        job.attempt,
        result={},
        duration_seconds=0,
        follow_urls=[queue.FollowUrl("https://e.test/detail")],
    )

    cursor = await async_connection.execute(
        "SELECT notify_finished, retain_for, undelivered FROM scraping_jobs WHERE parent_id = %s",
        (parent,),
    )
    assert await cursor.fetchall() == [(True, timedelta(days=3), False)]
