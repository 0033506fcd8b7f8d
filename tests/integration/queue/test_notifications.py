"""Wake-ups: an idle worker hears about new rows within milliseconds, bulk inserts notify once."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]


async def count_notifications(listener: Connection, window: float) -> int:
    received = 0
    while await queue.wait_for_notification(listener, window):
        received += 1
    return received


async def test_a_listening_worker_wakes_within_milliseconds_of_an_insert(
    database_url: str, async_connection: Connection
) -> None:
    async with await queue.connect(database_url) as listener:
        await queue.listen(listener)
        assert not await queue.wait_for_notification(listener, 0.05)

        started = time.monotonic()
        await queue.enqueue(async_connection, "https://e.test/")
        woke = await queue.wait_for_notification(listener, 5)
        elapsed = time.monotonic() - started

    assert woke
    assert elapsed < 0.5, f"woke after {elapsed * 1000:.0f} ms"


async def test_a_bulk_insert_sends_one_notification(
    database_url: str, async_connection: Connection
) -> None:
    async with await queue.connect(database_url) as listener:
        await queue.listen(listener)

        await queue.enqueue_many(async_connection, [f"https://e.test/{n}" for n in range(50_000)])

        assert await count_notifications(listener, 0.3) == 1


async def test_a_plain_sql_insert_by_another_application_wakes_workers(
    database_url: str, async_connection: Connection
) -> None:
    async with await queue.connect(database_url) as listener:
        await queue.listen(listener)

        await async_connection.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) "
            "VALUES ('https://a.test/', 'p', '{}'), ('https://b.test/', 'p', '{}')"
        )

        assert await count_notifications(listener, 0.3) == 1


async def test_released_jobs_wake_workers(database_url: str, async_connection: Connection) -> None:
    await queue.enqueue(async_connection, "https://e.test/")
    jobs = await queue.claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=1, lease_seconds=30
    )
    async with await queue.connect(database_url) as listener:
        await queue.listen(listener)

        await queue.release_jobs(async_connection, worker_id="w", jobs=[jobs[0].token])

        assert await queue.wait_for_notification(listener, 5)
