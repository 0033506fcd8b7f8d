"""Wake-ups: an idle worker hears about new rows within milliseconds, bulk inserts notify once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

from scrapeq.local.postgres import LocalPostgres

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


async def test_listen_and_wake_wakes_on_a_notification_and_again_after_a_restart(
    restartable_postgres: LocalPostgres,
) -> None:
    dsn = restartable_postgres.dsn()
    await asyncio.to_thread(queue.migrate, dsn)
    wakes = 0
    woke = asyncio.Event()

    def wake() -> None:
        nonlocal wakes
        wakes += 1
        woke.set()

    async def next_wake(within: float) -> int:
        await asyncio.wait_for(woke.wait(), within)
        woke.clear()
        return wakes

    listener = asyncio.create_task(queue.listen_and_wake(dsn, wake, application_name="test"))
    try:
        assert await next_wake(10) == 1  # listening: whatever was missed may be due
        async with await queue.connect(dsn) as connection:
            await queue.enqueue(connection, "https://e.test/1")
        assert await next_wake(5) == 2

        await asyncio.to_thread(restartable_postgres.stop_server, "immediate")
        await asyncio.to_thread(restartable_postgres.start)
        back = time.monotonic()
        assert await next_wake(10) == 3  # listening again
        assert time.monotonic() - back <= queue.RECONNECT_MAX_SECONDS + 0.5
        async with await queue.connect(dsn) as connection:
            await queue.enqueue(connection, "https://e.test/2")
        assert await next_wake(5) == 4
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
