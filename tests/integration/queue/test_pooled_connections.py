"""Clients of one PgBouncer in transaction mode share server connections: what one client's
claim leaves on a server connection must be nothing the next client can see."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

from scrapeq.local.pgbouncer import LocalPgBouncer
from tests.conftest import running

Connection = psycopg.AsyncConnection[Any]

pytestmark = pytest.mark.timeout(60)

ONE_PER_SITE = queue.SitePoliteness(max_concurrent_per_site=1, delay_seconds=0)


@pytest.fixture
def one_server_connection(postgres_server: str) -> Iterator[LocalPgBouncer]:
    """A PgBouncer whose pool holds a single server connection: every client's transaction
    runs on it, one after another."""
    server = LocalPgBouncer(postgres_server, pool_size=1)
    with running("PgBouncer", server):
        yield server


async def backend_pid(connection: Connection) -> int:
    cursor = await connection.execute("SELECT pg_backend_pid()")
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def session_state(connection: Connection) -> dict[str, object]:
    """What a server session keeps between transactions: prepared statements, advisory locks,
    LISTEN channels, and the claim's former session setting."""
    cursor = await connection.execute(
        """
        SELECT (SELECT count(*) FROM pg_prepared_statements),
               (SELECT count(*) FROM pg_locks
                 WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
               (SELECT count(*) FROM pg_listening_channels()),
               coalesce(current_setting('scrapeq.claim_cursor', true), '')
        """
    )
    row = await cursor.fetchone()
    assert row is not None
    prepared, advisory, listening, cursor_setting = row
    return {
        "prepared": prepared,
        "advisory": advisory,
        "listening": listening,
        "claim_cursor": cursor_setting,
    }


async def test_two_clients_taking_turns_on_one_server_connection_see_none_of_the_others_state(
    database_url: str, one_server_connection: LocalPgBouncer
) -> None:
    pooled = one_server_connection.pooled(database_url)
    first = await queue.connect(pooled, prepared_statements=False)
    second = await queue.connect(pooled, prepared_statements=False)
    try:
        assert await backend_pid(first) == await backend_pid(second)
        sites = [f"https://site{n}.test/page{page}" for n in range(6) for page in range(4)]
        await queue.enqueue_many(first, sites)
        handed_out: list[int] = []
        # More rounds than psycopg's prepare threshold, each claim followed by the other
        # client's: with any per-session claim state, the second client would see it.
        for _ in range(8):
            for client, worker in ((first, "first"), (second, "second")):
                jobs = await queue.claim_jobs(
                    client,
                    worker_id=worker,
                    queues=["default"],
                    limit=2,
                    lease_seconds=30,
                    politeness=ONE_PER_SITE,
                )
                handed_out.extend(job.id for job in jobs)
                hosts = [job.host_key for job in jobs]
                assert len(hosts) == len(set(hosts)), "one row per site at a time"
                assert await session_state(client) == {
                    "prepared": 0,
                    "advisory": 0,
                    "listening": 0,
                    "claim_cursor": "",
                }
                done = await queue.complete_many(
                    client, [queue.Completion(job.id, job.attempt, {}, 0.0) for job in jobs]
                )
                assert done == {job.id for job in jobs}
        assert len(handed_out) == len(set(handed_out)) == len(sites)
    finally:
        await first.close()
        await second.close()


async def test_clients_that_prepare_statements_collide_on_a_shared_server_connection(
    database_url: str, one_server_connection: LocalPgBouncer
) -> None:
    """Why pooled mode turns prepared statements off: psycopg names them per client
    (`_pg3_0`, …), and two clients on one server connection make the same name."""
    pooled = one_server_connection.pooled(database_url)
    first = await psycopg.AsyncConnection.connect(pooled, autocommit=True, prepare_threshold=0)
    second = await psycopg.AsyncConnection.connect(pooled, autocommit=True, prepare_threshold=0)
    try:
        await first.execute("SELECT count(*) FROM scraping_jobs WHERE id > %s", (0,))
        with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
            await second.execute("SELECT count(*) FROM scraping_jobs WHERE id > %s", (1,))
    finally:
        await first.close()
        await second.close()


async def test_the_operators_pool_in_pooled_mode_shares_one_server_connection_without_state(
    database_url: str, one_server_connection: LocalPgBouncer
) -> None:
    pool = queue.ConnectionPool(
        one_server_connection.pooled(database_url),
        max_size=3,
        timeout=10,
        name="scrapeq-test",
        prepared_statements=False,
    )
    await pool.open()
    try:
        for _ in range(8):
            async with pool.connection() as connection:
                await queue.enqueue_many(connection, ["https://shop.test/a"])
                await queue.queue_backlog(connection, ["default"])
                assert (await session_state(connection))["prepared"] == 0
    finally:
        await pool.close()


def test_migrating_through_the_pooler_leaves_nothing_prepared_on_its_server_connection(
    empty_database_url: str, one_server_connection: LocalPgBouncer
) -> None:
    pooled = one_server_connection.pooled(empty_database_url)
    assert queue.migrate(pooled)
    assert queue.migrate(pooled) == []
    with psycopg.connect(pooled, autocommit=True, prepare_threshold=None) as check:
        assert check.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
