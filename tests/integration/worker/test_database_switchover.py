"""A switchover of a replicated PostgreSQL, as a worker sees it: a primary with a synchronous
streaming standby, the worker given both hosts with `target_session_attrs=read-write`; the
primary dies, the standby is promoted, and the worker carries on against the new primary
without losing or repeating a row (docs/chart.md, "A highly available PostgreSQL")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_worker.network_guard import parse_networks
from scrapeq_worker.settings import WorkerSettings
from scrapeq_worker.worker import Worker

from scrapeq.local.postgres import LocalPostgres
from tests.conftest import running
from tests.waiting import eventually

from .site import ALLOW_SITE, HostileSite

pytestmark = [pytest.mark.postgres]

# Work resumes on the promoted standby within this long of the promotion: the worker retries
# its connections at least once a second (scrapeq_queue.RECONNECT_MAX_SECONDS).
RESUME_WITHIN_SECONDS = 5.0


@pytest.fixture
def replicated() -> Iterator[tuple[LocalPostgres, LocalPostgres]]:
    """A durable primary and a hot standby streaming from it, synchronously: a commit the
    primary acknowledged is on the standby too."""
    primary = LocalPostgres(durable=True)
    standby = LocalPostgres(durable=True)
    with running("PostgreSQL (primary)", primary):
        standby.start_standby_of(primary)
        try:
            with psycopg.connect(primary.dsn(), autocommit=True) as admin:
                admin.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                admin.execute("SELECT pg_reload_conf()")
            yield primary, standby
        finally:
            standby.stop("immediate")


def both_hosts(primary: LocalPostgres, standby: LocalPostgres) -> str:
    """One URL naming both servers: libpq connects to whichever accepts writes."""
    return (
        f"postgresql://{primary.user}@127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
        "/postgres?target_session_attrs=read-write&connect_timeout=2"
    )


async def states(dsn: str) -> dict[str, int]:
    """Rows by status, and how many attempts they took in all."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        cursor = await connection.execute(
            "SELECT status, count(*) FROM scraping_jobs GROUP BY status"
        )
        counts = {status: count for status, count in await cursor.fetchall()}
        cursor = await connection.execute("SELECT count(*) FROM scrapeq_attempts")
        row = await cursor.fetchone()
    assert row is not None
    counts["attempts"] = row[0]
    return counts


async def completed_on(dsn: str) -> int:
    try:
        return (await states(dsn)).get("completed", 0)
    except psycopg.Error:
        return 0


async def sync_standby(primary: LocalPostgres) -> str:
    async with await psycopg.AsyncConnection.connect(primary.dsn(), autocommit=True) as admin:
        cursor = await admin.execute("SELECT sync_state FROM pg_stat_replication")
        row = await cursor.fetchone()
    return str(row[0]) if row else "none"


async def test_a_promoted_standby_takes_over_and_no_row_is_lost_or_done_twice(
    replicated: tuple[LocalPostgres, LocalPostgres], site: HostileSite
) -> None:
    primary, standby = replicated
    await asyncio.to_thread(queue.migrate, primary.dsn())
    await eventually(
        lambda: sync_standby(primary),
        until=lambda state: state == "sync",
        within=30,
        what="the standby to stream synchronously",
    )
    async with await psycopg.AsyncConnection.connect(primary.dsn(), autocommit=True) as producer:
        await queue.enqueue_many(
            producer, [site.url(f"/static/{n}") for n in range(10)], payload={"render": False}
        )
    worker = Worker(
        WorkerSettings(
            database_url=both_hosts(primary, standby),
            allow_networks=parse_networks(ALLOW_SITE),
            metrics_port=0,
            poll_seconds=0.2,
            lease_seconds=10,
        ),
        install_signal_handlers=False,
    )
    run = asyncio.create_task(worker.run())
    try:
        await eventually(
            lambda: completed_on(primary.dsn()),
            until=lambda done: done == 10,
            within=60,
            what="10 rows completed on the primary",
        )
        await asyncio.to_thread(primary.stop_server, "immediate")
        await asyncio.to_thread(standby.promote)
        promoted = time.monotonic()
        async with await psycopg.AsyncConnection.connect(standby.dsn(), autocommit=True) as db:
            await queue.enqueue_many(
                db, [site.url(f"/static/{n}") for n in range(10, 20)], payload={"render": False}
            )
        await eventually(
            lambda: completed_on(standby.dsn()),
            until=lambda done: done >= 11,
            within=30,
            what="the first row completed on the promoted standby",
            every=0.05,
        )
        resumed = time.monotonic() - promoted
        await eventually(
            lambda: completed_on(standby.dsn()),
            until=lambda done: done == 20,
            within=60,
            what="every row completed on the promoted standby",
        )
    finally:
        worker.request_stop()
        status = await asyncio.wait_for(run, 30)
    assert status == 0
    # Synchronous replication: the ten rows the primary completed are completed on the new
    # primary too, and no row was claimed a second time.
    assert await states(standby.dsn()) == {"completed": 20, "attempts": 20}
    print(f"work resumed {resumed:.2f}s after the promotion")
    assert resumed <= RESUME_WITHIN_SECONDS, f"work resumed {resumed:.1f}s after the promotion"
