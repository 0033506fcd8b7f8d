"""The cluster's copy of robots.txt on a real PostgreSQL: worker processes (here RobotsRules, each
on its own connection as each worker has one) share one fetch per origin and time-to-live, an
unreadable file holds the site back for all of them, and an expired copy is fetched again."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_worker.errors import PermanentFailure, RetryLater
from scrapeq_worker.robots import RobotsRead, RobotsRules

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

ROBOTS = "User-agent: *\nDisallow: /private\nCrawl-delay: 1.5\n"
ORIGIN = "https://shop.test"


class Site:
    """One origin's robots.txt: counts the fetches; each takes a moment, so that concurrent
    checks overlap it."""

    def __init__(self, status: int = 200, text: str = ROBOTS) -> None:
        self.status, self.text = status, text
        self.fetches = 0

    async def fetch(self, url: str) -> tuple[int, str]:
        assert url == f"{ORIGIN}/robots.txt"
        self.fetches += 1
        await asyncio.sleep(0.2)
        return self.status, self.text


class DatabaseCopies:
    """What a worker gives RobotsRules: the queue's robots.txt copies on its connection."""

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self.connection = connection
        self.lock = asyncio.Lock()  # one statement at a time per connection, as in a worker

    async def robots_copy(self, origin: str, lease_seconds: float) -> queue.RobotsCopy | None:
        async with self.lock:
            return await queue.robots_copy(self.connection, origin, lease_seconds=lease_seconds)

    async def store_robots_copy(self, origin: str, read: RobotsRead, ttl_seconds: float) -> None:
        async with self.lock:
            await queue.store_robots_copy(
                self.connection,
                origin,
                status=read.status,
                body=read.body,
                problem=read.problem,
                ttl_seconds=ttl_seconds,
            )


@contextlib.asynccontextmanager
async def workers(database_url: str, site: Site, count: int) -> AsyncIterator[list[RobotsRules]]:
    async with contextlib.AsyncExitStack() as stack:
        rules = []
        for _ in range(count):
            connection = await stack.enter_async_context(
                await psycopg.AsyncConnection.connect(database_url, autocommit=True)
            )
            rules.append(RobotsRules(site.fetch, shared=DatabaseCopies(connection)))
        yield rules


async def test_three_workers_fetch_a_sites_robots_txt_once(database_url: str) -> None:
    site = Site()
    async with workers(database_url, site, 3) as rules:
        verdicts = await asyncio.gather(
            *(each.check(f"{ORIGIN}/page/{n}") for each in rules for n in range(5))
        )
        for each in rules:
            with pytest.raises(PermanentFailure, match="disallowed"):
                await each.check(f"{ORIGIN}/private/1")
    assert site.fetches == 1
    # Only the job whose check fetched the file records its Crawl-delay.
    assert [verdict.fresh for verdict in verdicts].count(True) == 1
    assert {verdict.crawl_delay_seconds for verdict in verdicts} == {1.5}


async def test_an_unreadable_robots_txt_holds_the_site_back_for_every_worker(
    database_url: str,
) -> None:
    site = Site(status=503)
    async with workers(database_url, site, 2) as (first, second):
        with pytest.raises(RetryLater, match="HTTP 503"):
            await first.check(f"{ORIGIN}/page/1")
        with pytest.raises(RetryLater, match="HTTP 503"):
            await second.check(f"{ORIGIN}/page/1")
    assert site.fetches == 1


async def test_an_expired_copy_is_fetched_again_once(
    database_url: str, async_connection: psycopg.AsyncConnection[Any]
) -> None:
    site = Site()
    async with workers(database_url, site, 1) as (first,):
        await first.check(f"{ORIGIN}/page/1")
    await async_connection.execute(
        "UPDATE scrapeq_robots SET expires_at = now() - interval '1 second'"
    )
    site.text = "User-agent: *\nDisallow: /\n"
    async with workers(database_url, site, 2) as (second, third):
        for each in (second, third):
            with pytest.raises(PermanentFailure):
                await each.check(f"{ORIGIN}/page/1")
    assert site.fetches == 2


async def test_a_worker_without_the_database_reads_robots_txt_itself() -> None:
    class NoDatabase:
        async def robots_copy(self, origin: str, lease_seconds: float) -> None:
            return None

        async def store_robots_copy(self, origin: str, read: RobotsRead, ttl: float) -> None:
            raise AssertionError("nothing is stored without a lease")

    site = Site()
    rules = RobotsRules(site.fetch, shared=NoDatabase())
    assert (await rules.check(f"{ORIGIN}/page/1")).fresh
    assert site.fetches == 1


async def test_a_lease_whose_holder_died_lapses_and_another_worker_fetches(
    database_url: str, async_connection: psycopg.AsyncConnection[Any]
) -> None:
    # A worker took the lease and died before storing a copy: the lease ends by itself.
    dead = await queue.robots_copy(async_connection, ORIGIN, lease_seconds=0.5)
    assert (dead.held, dead.leased) == (False, True)
    busy = await queue.robots_copy(async_connection, ORIGIN, lease_seconds=0.5)
    assert (busy.held, busy.leased) == (False, False)
    site = Site()
    async with workers(database_url, site, 1) as (survivor,):
        verdict = await survivor.check(f"{ORIGIN}/page/1")
    assert verdict.fresh
    assert site.fetches == 1
    copy = await queue.robots_copy(async_connection, ORIGIN, lease_seconds=0.5)
    assert (copy.held, copy.status, copy.body) == (True, 200, ROBOTS)
    assert 86000 < copy.seconds_left <= 86400


async def test_a_robots_txt_with_nul_bytes_is_shared_without_them(database_url: str) -> None:
    # PostgreSQL text cannot hold NUL; the rules mean the same without it.
    site = Site(text="User-agent: *\x00\nDisallow: /private\x00\n")
    async with workers(database_url, site, 2) as (first, second):
        for each in (first, second):
            with pytest.raises(PermanentFailure, match="disallowed"):
                await each.check(f"{ORIGIN}/private/1")
            await each.check(f"{ORIGIN}/public")
    assert site.fetches == 1


class RefusedSite(Site):
    """An origin the worker may not reach: every fetch fails at once, as the guard refuses."""

    async def fetch(self, url: str) -> tuple[int, str]:
        self.fetches += 1
        raise PermanentFailure(f"{url} is a link-local address", reason="blocked_address")


async def test_a_fetch_that_fails_gives_the_lease_back_so_the_next_row_does_not_wait(
    database_url: str, async_connection: psycopg.AsyncConnection[Any]
) -> None:
    site = RefusedSite()
    loop = asyncio.get_running_loop()
    async with workers(database_url, site, 2) as (first, second):
        started = loop.time()
        for each in (first, second):  # one row each, one after the other
            with pytest.raises(PermanentFailure, match="link-local"):
                await each.check(f"{ORIGIN}/page")
        elapsed = loop.time() - started
    # Each row fetched and failed on its own; neither waited for the other's lease (15 s).
    assert site.fetches == 2
    assert elapsed < 2.0, f"the second row waited {elapsed:.1f}s"
    copy = await queue.robots_copy(async_connection, ORIGIN, lease_seconds=0.5)
    assert (copy.held, copy.leased) == (False, True)
