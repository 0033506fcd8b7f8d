"""PostgreSQL restarted in the middle of a run: clients reconnect and no job is lost."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

from scrapeq.local.postgres import LocalPostgres
from tests.waiting import eventually

pytestmark = pytest.mark.postgres

# Short leases so that jobs whose completion was lost with the server come back quickly.
LEASE_SECONDS = 2.0
FIRST_WAVE = 200
SECOND_WAVE = 100


class ReconnectingClient:
    """The worker loop in miniature: on DatabaseUnavailable, drop the connection and reconnect."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.connection: psycopg.AsyncConnection[Any] | None = None
        self.reconnects = 0

    async def run(self, operation: Any) -> Any:
        while True:
            try:
                if self.connection is None or self.connection.closed:
                    self.connection = await queue.connect(self.dsn)
                return await operation(self.connection)
            except queue.DatabaseUnavailable:
                if self.connection is not None:
                    await self.connection.close()
                self.connection = None
                self.reconnects += 1
                await asyncio.sleep(0.1)  # back off before knocking on a restarting server

    async def close(self) -> None:
        if self.connection is not None:
            await self.connection.close()


async def test_clients_reconnect_after_a_restart_and_every_job_completes(
    restartable_postgres: LocalPostgres,
) -> None:
    dsn = restartable_postgres.dsn()
    queue.migrate(dsn)
    producer = ReconnectingClient(dsn)
    await producer.run(
        lambda c: queue.enqueue_many(c, [f"https://e.test/a/{n}" for n in range(FIRST_WAVE)])
    )
    stop = asyncio.Event()
    workers = [ReconnectingClient(dsn) for _ in range(2)]

    async def work(client: ReconnectingClient, name: str) -> None:
        while not stop.is_set():
            await client.run(queue.rescue_expired_leases)
            jobs = await client.run(
                lambda c: queue.claim_jobs(
                    c, worker_id=name, queues=["default"], limit=5, lease_seconds=LEASE_SECONDS
                )
            )
            if not jobs:
                await asyncio.sleep(0.05)  # an idle worker's poll interval
                continue
            await asyncio.sleep(0.01 * len(jobs))  # the "scrape"
            completions = [queue.Completion(j.id, j.attempt, {"by": name}, 0.01) for j in jobs]
            # Retried on a new connection if the server went away; a completion that did
            # commit before the crash is simply fenced the second time.
            await client.run(lambda c, done=completions: queue.complete_many(c, done))

    async def completed() -> int:
        async def count(c: psycopg.AsyncConnection[Any]) -> int:
            cursor = await c.execute(
                "SELECT count(*) FROM scraping_jobs WHERE status = 'completed'"
            )
            row = await cursor.fetchone()
            return int(row[0]) if row else 0

        result: int = await producer.run(count)
        return result

    tasks = [asyncio.create_task(work(w, f"pod-{n}")) for n, w in enumerate(workers)]
    try:
        await eventually(completed, until=lambda n: n >= 40, within=30, what="some progress")
        await asyncio.to_thread(restartable_postgres.restart)
        await producer.run(
            lambda c: queue.enqueue_many(c, [f"https://e.test/b/{n}" for n in range(SECOND_WAVE)])
        )
        await eventually(
            completed,
            until=lambda n: n == FIRST_WAVE + SECOND_WAVE,
            within=60,
            what="every job to complete after the restart",
        )
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        for client in workers:
            await client.close()

    assert sum(w.reconnects for w in workers) >= 1, "the restart should have broken connections"
    async with await queue.connect(dsn) as connection:
        cursor = await connection.execute(
            "SELECT count(*), count(DISTINCT url_to_scrape) FROM scraping_jobs"
        )
        assert await cursor.fetchone() == (FIRST_WAVE + SECOND_WAVE, FIRST_WAVE + SECOND_WAVE)
        cursor = await connection.execute(
            "SELECT count(*) FROM scrapeq_attempts WHERE outcome = 'completed'"
        )
        assert await cursor.fetchone() == (FIRST_WAVE + SECOND_WAVE,)
    await producer.close()
