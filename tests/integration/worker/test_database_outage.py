"""The worker survives its database going away: it backs off, reconnects and carries on."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_worker.loop import Worker
from scrapeq_worker.network_guard import parse_networks
from scrapeq_worker.settings import WorkerSettings

from scrapeq.local.postgres import LocalPostgres

from .conftest import eventually
from .site import ALLOW_SITE, HostileSite

pytestmark = [pytest.mark.postgres]


async def completed(dsn: str) -> int:
    """Jobs completed so far (0 while the server is down)."""
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            stats = await queue.queue_stats(connection)
    except (psycopg.Error, queue.QueueError):
        return 0
    return sum(entry.completed_total for entry in stats)


async def enqueue_static(dsn: str, site: HostileSite, numbers: range) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        await queue.enqueue_many(
            connection, [site.url(f"/static/{n}") for n in numbers], payload={"render": False}
        )


async def test_a_database_restart_is_ridden_out_without_losing_jobs(
    restartable_postgres: LocalPostgres, site: HostileSite
) -> None:
    dsn = restartable_postgres.dsn()
    await asyncio.to_thread(queue.migrate, dsn)
    await enqueue_static(dsn, site, range(5))
    worker = Worker(
        WorkerSettings(
            database_url=dsn,
            allow_networks=parse_networks(ALLOW_SITE),
            metrics_port=0,
            poll_seconds=0.2,
            lease_seconds=6,
        ),
        install_signal_handlers=False,
    )
    run = asyncio.create_task(worker.run())
    try:
        done = 0

        async def count() -> None:
            nonlocal done
            done = await completed(dsn)

        async def wait_for_completed(number: int) -> None:
            """Poll (through fresh connections) until `number` jobs are completed."""
            async with asyncio.timeout(60):
                while True:
                    await count()
                    if done >= number:
                        return
                    await asyncio.sleep(0.1)

        await wait_for_completed(5)
        await asyncio.to_thread(restartable_postgres.stop_server, "immediate")
        await eventually(
            lambda: worker.metrics.database_errors._value.get() > 0,
            within=30,
            what="the worker to notice the outage",
        )
        assert not run.done()
        await asyncio.to_thread(restartable_postgres.start)
        await enqueue_static(dsn, site, range(5, 10))
        await wait_for_completed(10)
    finally:
        worker.request_stop()
        status = await asyncio.wait_for(run, 30)
    assert status == 0
