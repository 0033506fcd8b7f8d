"""Deleting a finished owner's rows (history limits of scheduled ScrapeJobs), on real PostgreSQL."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue.rows import Owner

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]


async def row_count(connection: Connection, owner_uid: str) -> int:
    cursor = await connection.execute(
        "SELECT count(*) FROM scraping_jobs WHERE owner_uid = %s", (owner_uid,)
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def attempts_of(connection: Connection, job_ids: list[int]) -> int:
    cursor = await connection.execute(
        "SELECT count(*) FROM scrapeq_attempts WHERE job_id = ANY(%s)", (job_ids,)
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def finish_all(connection: Connection, queue_name: str) -> list[int]:
    jobs = await queue.claim_jobs(
        connection, worker_id="w", queues=[queue_name], limit=10, lease_seconds=30
    )
    for job in jobs:
        await queue.complete_job(
            connection, job.id, job.attempt, result={"ok": 1}, duration_seconds=0.1
        )
    return [job.id for job in jobs]


async def test_a_finished_owner_loses_its_rows_and_attempts_and_others_keep_theirs(
    async_connection: Connection,
) -> None:
    run = Owner(uid="run-1", namespace="ns", name="nightly-1700000000")
    other = Owner(uid="run-2", namespace="ns", name="nightly-1700000060")
    urls = ["https://e.test/a", "https://e.test/b"]
    await queue.enqueue_for_owner(async_connection, run, urls, queue="runs")
    finished_ids = await finish_all(async_connection, "runs")
    await queue.enqueue_for_owner(async_connection, other, urls, queue="runs")
    assert await attempts_of(async_connection, finished_ids) == 2

    assert await queue.delete_owner_rows(async_connection, "run-1") == 2

    assert await row_count(async_connection, "run-1") == 0
    assert await attempts_of(async_connection, finished_ids) == 0
    assert await row_count(async_connection, "run-2") == 2


async def test_an_owner_with_a_live_row_keeps_every_row(async_connection: Connection) -> None:
    run = Owner(uid="run-live", namespace="ns", name="nightly-1700000000")
    await queue.enqueue_for_owner(
        async_connection, run, ["https://e.test/a", "https://e.test/b"], queue="live"
    )
    (job,) = await queue.claim_jobs(
        async_connection, worker_id="w", queues=["live"], limit=1, lease_seconds=30
    )
    await queue.complete_job(
        async_connection, job.id, job.attempt, result={"ok": 1}, duration_seconds=0.1
    )

    assert await queue.delete_owner_rows(async_connection, "run-live") == 0
    assert await row_count(async_connection, "run-live") == 2

    # Once the live row is cancelled, the run is finished and may go.
    assert await queue.cancel_owner(async_connection, "run-live") == 1
    assert await queue.delete_owner_rows(async_connection, "run-live") == 2


async def test_deleting_an_owner_without_rows_deletes_nothing(async_connection: Connection) -> None:
    assert await queue.delete_owner_rows(async_connection, "nobody") == 0
