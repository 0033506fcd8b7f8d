"""Crawls and pipelines on a real PostgreSQL: the job-wide cap on followed pages (also under
concurrent completions) and URLs taken from another job's results."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue.result_urls import urls_from_results

from tests.integration.queue.test_job_lifecycle import claim_jobs

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]
OWNER = queue.Owner(uid="uid-crawl", namespace="shop", name="crawl")


async def followed_urls(connection: Connection, owner_uid: str) -> list[str]:
    cursor = await connection.execute(
        "SELECT url_to_scrape FROM scraping_jobs WHERE owner_uid = %s AND depth > 0 ORDER BY id",
        (owner_uid,),
    )
    return [row[0] for row in await cursor.fetchall()]


async def claim(connection: Connection, limit: int) -> list[queue.ClaimedJob]:
    return await claim_jobs(
        connection, worker_id="w", queues=["default"], limit=limit, lease_seconds=30
    )


async def test_the_follow_limit_caps_the_followed_pages_of_the_whole_job(
    async_connection: Connection,
) -> None:
    await queue.enqueue_for_owner(
        async_connection, OWNER, ["https://e.test/list/1", "https://e.test/list/2"]
    )
    first, second = await claim(async_connection, 2)
    links_one = [queue.FollowUrl(f"https://e.test/item/{n}") for n in range(1, 5)]
    # The second list page repeats two links of the first: they do not use up the limit.
    links_two = [queue.FollowUrl(f"https://e.test/item/{n}") for n in (3, 4, 5, 6, 7, 8)]

    for job, links in ((first, links_one), (second, links_two)):
        assert await queue.complete_job(
            async_connection,
            job.id,
            job.attempt,
            result={},
            duration_seconds=0.1,
            follow_urls=links,
            follow_limit=6,
        )

    assert await followed_urls(async_connection, OWNER.uid) == [
        f"https://e.test/item/{n}" for n in range(1, 7)
    ]


async def test_concurrent_completions_never_exceed_the_follow_limit(database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as setup:
        await queue.enqueue_for_owner(setup, OWNER, [f"https://e.test/list/{n}" for n in range(8)])
        parents = await claim(setup, 8)

    async def complete(parent: queue.ClaimedJob) -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as own:
            links = [queue.FollowUrl(f"https://e.test/{parent.id}/item/{n}") for n in range(10)]
            assert await queue.complete_job(
                own,
                parent.id,
                parent.attempt,
                result={},
                duration_seconds=0.1,
                follow_urls=links,
                follow_limit=25,
            )

    await asyncio.gather(*(complete(parent) for parent in parents))

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as check:
        assert len(await followed_urls(check, OWNER.uid)) == 25
        progress = (await queue.owner_progress(check, [OWNER.uid]))[OWNER.uid]
        assert progress.total == 8 + 25, "status counts include the followed pages"


async def test_urls_come_from_a_field_of_the_completed_rows_resolved_and_deduplicated(
    async_connection: Connection,
) -> None:
    upstream = queue.Owner(uid="uid-categories", namespace="shop", name="categories")
    await queue.enqueue_for_owner(
        async_connection,
        upstream,
        ["https://shop.test/c/1", "https://shop.test/c/2", "https://shop.test/c/3"],
    )
    results = [
        {
            "final_url": "https://shop.test/c/1",
            "fields": {"products": ["/p/1", "https://shop.test/p/2#top", "mailto:x@y"]},
        },
        {"final_url": "https://shop.test/c/2/", "fields": {"products": "p/3"}},
        {"final_url": "https://shop.test/c/3", "fields": {"products": None}},
    ]
    for job, result in zip(await claim(async_connection, 3), results, strict=True):
        assert await queue.complete_job(
            async_connection, job.id, job.attempt, result=result, duration_seconds=0.1
        )
    # A failed row's result is not used.
    await queue.enqueue_for_owner(async_connection, upstream, ["https://shop.test/c/4"])

    found = await urls_from_results(async_connection, upstream.uid, "products", limit=100)

    assert found.urls == [
        "https://shop.test/p/1",
        "https://shop.test/p/2",
        "https://shop.test/c/2/p/3",
    ]
    assert found.skipped == 1
    assert not found.truncated
    capped = await urls_from_results(async_connection, upstream.uid, "products", limit=2)
    assert capped.truncated
    assert capped.urls == found.urls[:2]
    links = await urls_from_results(async_connection, upstream.uid, "links", limit=100)
    assert links.urls == []
