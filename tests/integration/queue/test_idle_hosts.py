"""Pruning the politeness state of idle hosts on a real PostgreSQL: only hosts with nothing
pending, nothing in flight and no claim for long go, and a producer racing the prune never
leaves rows that no claim can see."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue import statements

from tests.integration.queue.test_host_politeness import claim
from tests.integration.queue.test_retention import cli
from tests.waiting import eventually

Connection = psycopg.AsyncConnection[Any]

pytestmark = pytest.mark.timeout(60)

WEEK = timedelta(days=7)


async def known_hosts(connection: Connection) -> set[str]:
    cursor = await connection.execute("SELECT host_key FROM scrapeq_hosts")
    return {row[0] for row in await cursor.fetchall()}


async def head_hosts(connection: Connection) -> set[str]:
    cursor = await connection.execute("SELECT host_key FROM scrapeq_host_queues")
    return {row[0] for row in await cursor.fetchall()}


async def untouched_for(connection: Connection, host_keys: list[str], days: float) -> None:
    """Date the hosts' last claim `days` back (as if nobody had claimed their rows since)."""
    await connection.execute(
        "UPDATE scrapeq_hosts SET touched_at = now() - make_interval(secs => %s)"
        " WHERE host_key = ANY(%s)",
        (days * 86400, host_keys),
    )


async def scraped(connection: Connection, url: str) -> None:
    """Enqueue, claim and complete one row of the URL's host."""
    await queue.enqueue(connection, url)
    (job,) = await claim(connection, limit=1)
    assert job.url == url
    assert await queue.complete_job(
        connection, job.id, job.attempt, result={}, duration_seconds=0.1
    )


async def idle_host(connection: Connection, host: str) -> None:
    """A host whose only row was scraped, its last claim ten days back."""
    await scraped(connection, f"https://{host}/done")
    await untouched_for(connection, [host], 10)


async def wait_until_blocked(connection: Connection, application_name: str) -> None:
    """Poll pg_stat_activity until the named session waits for a lock (deadline: 10 s)."""

    async def waiting_sessions() -> int:
        cursor = await connection.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = %s AND wait_event_type = 'Lock'",
            (application_name,),
        )
        row = await cursor.fetchone()
        return 0 if row is None else int(row[0])

    await eventually(
        waiting_sessions,
        until=lambda sessions: sessions == 1,
        within=10,
        what=f"{application_name} to wait for a lock",
        every=0.02,
    )


async def test_only_hosts_idle_for_long_lose_their_state(async_connection: Connection) -> None:
    await idle_host(async_connection, "idle.test")
    await idle_host(async_connection, "recent.test")
    await untouched_for(async_connection, ["recent.test"], 1)
    await idle_host(async_connection, "paused.test")
    await async_connection.execute(
        "UPDATE scrapeq_hosts SET paused_until = now() + interval '1 hour',"
        " next_allowed_at = now() + interval '1 hour' WHERE host_key = 'paused.test'"
    )
    await queue.enqueue(async_connection, "https://pending.test/waiting")
    await queue.enqueue(async_connection, "https://running.test/in-flight")
    assert [job.url for job in await claim(async_connection, limit=2)] == [
        "https://pending.test/waiting",
        "https://running.test/in-flight",
    ]
    await queue.enqueue(async_connection, "https://pending.test/still-waiting")
    await untouched_for(async_connection, ["pending.test", "running.test"], 10)

    assert await queue.prune_idle_sites(async_connection, idle_longer_than=WEEK) == 1

    kept = {"recent.test", "paused.test", "pending.test", "running.test"}
    assert await known_hosts(async_connection) == kept
    assert await head_hosts(async_connection) == kept
    assert await queue.prune_idle_sites(async_connection, idle_longer_than=WEEK) == 0
    # The next row of the pruned host brings its state back and is claimed like any other.
    await queue.enqueue(async_connection, "https://idle.test/again")
    urls = {job.url for job in await claim(async_connection)}
    assert urls == {"https://idle.test/again", "https://pending.test/still-waiting"}
    assert "idle.test" in await known_hosts(async_connection)


async def test_small_batches_walk_every_host_once(async_connection: Connection) -> None:
    hosts = [f"site{n}.test" for n in range(7)]
    for host in hosts:
        await idle_host(async_connection, host)
    await queue.enqueue(async_connection, "https://site3.test/waiting")

    assert await queue.prune_idle_sites(async_connection, idle_longer_than=WEEK, batch_rows=2) == 6
    assert await known_hosts(async_connection) == {"site3.test"}


async def test_a_producer_that_has_not_committed_keeps_its_host(
    async_connection: Connection, database_url: str
) -> None:
    await idle_host(async_connection, "site.test")
    async with (
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as producer,
        producer.transaction(),
    ):
        await queue.enqueue(producer, "https://site.test/new")
        assert await queue.prune_idle_sites(async_connection, idle_longer_than=WEEK) == 0
    assert [job.url for job in await claim(async_connection)] == ["https://site.test/new"]


async def test_a_producer_waiting_for_a_prune_brings_its_host_back(
    async_connection: Connection, database_url: str
) -> None:
    await idle_host(async_connection, "site.test")
    now = await (await async_connection.execute("SELECT now()")).fetchone()
    assert now is not None
    idle_before = now[0] - WEEK
    async with (
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as pruner,
        await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, application_name="racing-producer"
        ) as producer,
    ):
        async with pruner.transaction():
            cursor = await pruner.execute(
                statements.HOSTS_IDLE_LOCK,
                {"from_host": "", "first": True, "idle_before": idle_before, "batch": 10},
            )
            assert await cursor.fetchall() == [("site.test",)]
            enqueued = asyncio.create_task(queue.enqueue(producer, "https://site.test/new"))
            await wait_until_blocked(async_connection, "racing-producer")
            cursor = await pruner.execute(
                statements.HOSTS_IDLE_DELETE,
                {"host_keys": ["site.test"], "idle_before": idle_before},
            )
            assert await cursor.fetchone() == (1,)
        assert await asyncio.wait_for(enqueued, 10) is not None
    assert await known_hosts(async_connection) == {"site.test"}
    assert [job.url for job in await claim(async_connection)] == ["https://site.test/new"]


async def test_an_open_producer_transaction_does_not_hold_up_its_hosts_claims(
    async_connection: Connection, database_url: str
) -> None:
    await queue.enqueue(async_connection, "https://site.test/committed")
    async with (
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as producer,
        producer.transaction(),
    ):
        await queue.enqueue(producer, "https://site.test/uncommitted")
        assert [job.url for job in await claim(async_connection)] == ["https://site.test/committed"]
    assert [job.url for job in await claim(async_connection)] == ["https://site.test/uncommitted"]


async def test_a_nonpositive_idle_time_is_refused(async_connection: Connection) -> None:
    with pytest.raises(queue.InvalidJob, match="idle_longer_than"):
        await queue.prune_idle_sites(async_connection, idle_longer_than=timedelta(0))


async def test_the_prune_command_deletes_idle_sites_when_asked(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    await idle_host(async_connection, "idle.test")
    url = ("--database-url", database_url)

    assert await cli("prune", *url) == 0
    assert capsys.readouterr().out.strip() == "deleted 0 finished job(s)"
    assert await known_hosts(async_connection) == {"idle.test"}

    assert await cli("prune", *url, "--idle-sites-older-than-days", "7") == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        "deleted 0 finished job(s)",
        "deleted the state of 1 idle site(s)",
    ]
    assert await known_hosts(async_connection) == set()
    for refused in ("0", "-1", "soon", "inf"):
        with pytest.raises(SystemExit):
            await cli("prune", *url, "--idle-sites-older-than-days", refused)
        assert "expected a" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        await cli("prune", *url, "--idle-hosts-older-than-days", "7")
    assert "is now --idle-sites-older-than-days" in capsys.readouterr().err


async def test_expired_robots_txt_copies_go_with_idle_sites(async_connection: Connection) -> None:
    for origin in ("https://old.test", "https://fresh.test", "https://fetching.test"):
        copy = await queue.robots_copy(async_connection, origin, lease_seconds=60)
        assert copy.leased
    for origin in ("https://old.test", "https://fresh.test"):
        await queue.store_robots_copy(
            async_connection, origin, status=200, body="", problem=None, ttl_seconds=86400
        )
    await async_connection.execute(
        "UPDATE scrapeq_robots SET expires_at = now() - interval '8 days'"
        " WHERE origin IN ('https://old.test', 'https://fetching.test')"
    )

    await queue.prune_idle_sites(async_connection, idle_longer_than=WEEK)

    cursor = await async_connection.execute("SELECT origin FROM scrapeq_robots ORDER BY origin")
    # A copy still being fetched stays whatever its age (its lease runs).
    assert [row[0] for row in await cursor.fetchall()] == [
        "https://fetching.test",
        "https://fresh.test",
    ]
