"""The crawl memory on a real PostgreSQL: what a crawl remembers of a URL, a 304 that keeps the
remembered hashes, the latest fetch winning whatever run writes first, concurrent writers that
never leave a mixed row, and the two ways it is forgotten (its schedule, the age bound)."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue import PageVisit, statements
from scrapeq_queue.crawl_memory import write_pages

Connection = psycopg.AsyncConnection[Any]

pytestmark = pytest.mark.timeout(60)

KEY = queue.schedule_crawl_key("shop", "prices", "0b7c9e52-6d0f-4a43-a1f7-9c2f1f1e0d11")
URL = "https://shop.example/p/1"


def digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


async def claim(connection: Connection, *, limit: int) -> list[queue.ClaimedJob]:
    return await queue.claim_jobs(
        connection,
        worker_id="w",
        queues=["default"],
        limit=limit,
        lease_seconds=30,
        politeness=queue.NO_SITE_LIMIT,
    )


def visit(version: str, *, etag: str | None = None) -> PageVisit:
    return PageVisit(
        etag=etag,
        last_modified=None,
        content_hash=digest(f"body {version}"),
        result_hash=digest(f"result {version}"),
    )


async def test_a_crawl_remembers_what_it_fetched_and_only_for_its_own_key(
    async_connection: Connection,
) -> None:
    assert await queue.read_page_memory(async_connection, KEY, URL) is None
    await queue.remember_page(async_connection, KEY, URL, visit("1", etag='"v1"'))

    memory = await queue.read_page_memory(async_connection, KEY, URL)
    assert memory is not None
    assert memory.etag == '"v1"'
    assert memory.has_validators
    assert memory.result_hash == digest("result 1")
    assert memory.changed_at == memory.fetched_at
    assert 0 <= memory.age_seconds < 60
    assert await queue.read_page_memory(async_connection, "other/crawl", URL) is None
    assert await queue.read_page_memory(async_connection, KEY, URL + "?x") is None


async def test_a_304_keeps_the_hashes_and_changed_at_and_a_new_result_moves_changed_at(
    async_connection: Connection,
) -> None:
    first = datetime(2026, 1, 1, tzinfo=UTC)
    await queue.remember_page(async_connection, KEY, URL, visit("1", etag='"v1"'), fetched_at=first)
    await queue.remember_page(
        async_connection,
        KEY,
        URL,
        PageVisit(None, None, None, None, not_modified=True),
        fetched_at=first + timedelta(hours=1),
    )
    memory = await queue.read_page_memory(async_connection, KEY, URL)
    assert memory is not None
    assert (memory.etag, memory.result_hash) == ('"v1"', digest("result 1"))
    assert memory.fetched_at == first + timedelta(hours=1)
    assert memory.changed_at == first

    # Same result, other body (a timestamp in the page, say): not a change.
    same_result = PageVisit(None, None, digest("body 1b"), digest("result 1"))
    await queue.remember_page(
        async_connection, KEY, URL, same_result, fetched_at=first + timedelta(hours=2)
    )
    memory = await queue.read_page_memory(async_connection, KEY, URL)
    assert memory is not None
    assert memory.changed_at == first
    assert memory.etag is None  # the site stopped sending one: no conditional request next

    await queue.remember_page(
        async_connection, KEY, URL, visit("2"), fetched_at=first + timedelta(hours=3)
    )
    memory = await queue.read_page_memory(async_connection, KEY, URL)
    assert memory is not None
    assert memory.changed_at == first + timedelta(hours=3)
    assert memory.result_hash == digest("result 2")


async def test_an_older_fetch_written_late_does_not_replace_a_newer_one(
    async_connection: Connection,
) -> None:
    now = datetime(2026, 2, 1, tzinfo=UTC)
    assert await queue.remember_page(async_connection, KEY, URL, visit("new"), fetched_at=now)
    assert not await queue.remember_page(
        async_connection, KEY, URL, visit("old"), fetched_at=now - timedelta(minutes=5)
    )
    memory = await queue.read_page_memory(async_connection, KEY, URL)
    assert memory is not None
    assert memory.result_hash == digest("result new")


async def test_two_runs_writing_one_crawl_at_once_leave_every_url_whole(
    database_url: str,
) -> None:
    urls = [f"https://shop.example/p/{number}" for number in range(200)]

    async def run(version: str) -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            for url in urls:
                await queue.remember_page(conn, KEY, url, visit(version, etag=f'"{version}"'))

    await asyncio.gather(run("a"), run("b"))

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT url, etag, content_hash, result_hash FROM scrapeq_crawl_memory"
            " WHERE crawl_key = %s",
            (KEY,),
        )
        rows = await cursor.fetchall()
    assert sorted(row[0] for row in rows) == sorted(urls)
    for _, etag, content_hash, result_hash in rows:
        version = etag.strip('"')
        # Every field of a row comes from the same run's fetch.
        assert bytes(content_hash) == digest(f"body {version}")
        assert bytes(result_hash) == digest(f"result {version}")


async def test_forgetting_a_crawl_drops_its_memory_and_nothing_else(
    async_connection: Connection,
) -> None:
    for number in range(30):
        await queue.remember_page(async_connection, KEY, f"{URL}?{number}", visit("1"))
    await queue.remember_page(async_connection, "shop/other", URL, visit("1"))

    assert await queue.forget_crawl(async_connection, KEY) == 30
    assert await queue.read_page_memory(async_connection, KEY, f"{URL}?3") is None
    assert await queue.read_page_memory(async_connection, "shop/other", URL) is not None


async def test_the_age_bound_drops_urls_not_fetched_for_long(
    async_connection: Connection,
) -> None:
    cursor = await async_connection.execute("SELECT now()")
    row = await cursor.fetchone()
    assert row is not None
    now: datetime = row[0]
    await queue.remember_page(
        async_connection, KEY, URL, visit("1"), fetched_at=now - timedelta(days=40)
    )
    await queue.remember_page(async_connection, KEY, URL + "?fresh", visit("1"))

    assert await queue.prune_crawl_memory(async_connection, older_than=timedelta(days=30)) == 1
    assert await queue.read_page_memory(async_connection, KEY, URL) is None
    assert await queue.read_page_memory(async_connection, KEY, URL + "?fresh") is not None


async def test_a_crawl_key_past_its_bound_is_refused_as_bad_input(
    async_connection: Connection,
) -> None:
    with pytest.raises(queue.InvalidJob):
        await queue.read_page_memory(async_connection, "k" * 513, URL)


async def test_a_batched_completion_writes_the_memory_of_its_current_rows_the_later_of_two_wins(
    async_connection: Connection,
) -> None:
    ids = await queue.enqueue_many(
        async_connection, [f"https://shop{n}.example/p/1" for n in range(3)]
    )
    claimed = await claim(async_connection, limit=3)
    jobs = {job.id: job for job in claimed}
    first, second, fenced = (jobs[job_id] for job_id in ids)

    # Two current rows fetched the same URL of the crawl (two runs at once): one statement, the
    # later entry remembered. The third row's attempt is no longer current: its fetch is not.
    done = await queue.complete_many(
        async_connection,
        [
            queue.Completion(
                second.id, second.attempt, {}, 0.1, memory=queue.PageWrite(KEY, URL, visit("b"))
            ),
            queue.Completion(
                first.id, first.attempt, {}, 0.1, memory=queue.PageWrite(KEY, URL, visit("a"))
            ),
            queue.Completion(
                fenced.id,
                fenced.attempt + 1,
                {},
                0.1,
                memory=queue.PageWrite(KEY, URL + "?fenced", visit("f")),
            ),
        ],
    )

    assert done == {first.id, second.id}
    memory = await queue.read_page_memory(async_connection, KEY, URL)
    assert memory is not None
    # Entries are taken in id order (the completion's lock order): the second row's is later.
    assert memory.result_hash == digest("result b")
    assert await queue.read_page_memory(async_connection, KEY, URL + "?fenced") is None
    statuses = await (
        await async_connection.execute(
            "SELECT id, status::text FROM scraping_jobs WHERE id = ANY(%s)", (ids,)
        )
    ).fetchall()
    assert dict(statuses) == {
        first.id: "completed",
        second.id: "completed",
        fenced.id: "processing",
    }


async def test_the_claim_answers_each_row_with_what_its_crawl_remembers_of_its_url(
    async_connection: Connection,
) -> None:
    """One statement: a row that names a crawl gets its memory with the claim (none when the
    crawl never fetched the URL, or when the crawl key is not a string), in claim order."""
    # Rows of five sites, so that one claim takes them all.
    urls = [f"https://shop{n}.example/p/1" for n in range(5)]
    urls[1] = "https://shop1.example/p/café?q=ü"
    await queue.remember_page(async_connection, KEY, urls[0], visit("1", etag='"v1"'))
    await queue.remember_page(async_connection, KEY, urls[1], visit("2", etag='"v2"'))
    await queue.remember_page(async_connection, "other/crawl", urls[2], visit("3"))
    rows = [
        (urls[0], {"crawlKey": KEY}),
        (urls[1], {"crawlKey": KEY}),
        (urls[2], {"crawlKey": KEY}),  # fetched by another crawl only
        (urls[3], {"crawlKey": KEY}),  # never fetched
        (urls[4], {}),
    ]
    ids = [
        (await queue.enqueue_many(async_connection, [url], payload=payload, priority=10 - n))[0]
        for n, (url, payload) in enumerate(rows)
    ]
    # A payload the API would refuse (a crawl key that is no string), written by SQL: no
    # memory, and the claim fails the row for its payload as before.
    await async_connection.execute(
        "UPDATE scraping_jobs SET payload = jsonb_build_object('crawlKey', 5) WHERE id = %s",
        (ids[-1],),
    )

    claimed = await claim(async_connection, limit=10)

    assert [job.id for job in claimed] == ids[:4]
    status = await (
        await async_connection.execute(
            "SELECT status::text FROM scraping_jobs WHERE id = %s", (ids[-1],)
        )
    ).fetchone()
    assert status == ("failed",)
    etags = [job.memory.etag if job.memory is not None else None for job in claimed]
    assert etags == ['"v1"', '"v2"', None, None]
    read = await queue.read_page_memory(async_connection, KEY, urls[0])
    memory = claimed[0].memory
    assert memory is not None
    assert read is not None
    assert replace(memory, age_seconds=0.0) == replace(read, age_seconds=0.0)
    assert 0 <= memory.age_seconds < 60


async def test_the_claim_looks_a_row_up_in_the_memory_by_its_key_never_reading_it_all(
    async_connection: Connection,
) -> None:
    """The claim's plan (generic, as a connection keeps it) reaches a memory of thousands of
    URLs through its primary key, one look-up per claimed row that names a crawl, never by
    reading (or hashing) the whole table."""
    await write_pages(
        async_connection,
        [queue.PageWrite(KEY, f"{URL}?n={n}", visit(str(n))) for n in range(3000)],
    )
    await async_connection.execute("ANALYZE scrapeq_crawl_memory")
    statement = statements.JOB_CLAIM
    for number, name in enumerate(
        ("queues", "limit", "worker_id", "lease_seconds", "max_per_site", "delay_seconds"), 1
    ):
        statement = statement.replace(f"%({name})s", f"${number}")
    await async_connection.execute(
        "PREPARE claim_plan(text[], integer, text, double precision, integer, double precision)"
        " AS " + statement
    )
    await async_connection.execute("SET plan_cache_mode = force_generic_plan")
    plan = "\n".join(
        row[0]
        for row in await (
            await async_connection.execute(
                "EXPLAIN (COSTS OFF) EXECUTE claim_plan(ARRAY['default'], 4, 'w', 30, 2, 0)"
            )
        ).fetchall()
    )

    assert "Index Scan using scrapeq_crawl_memory_pkey" in plan, plan
    assert "Seq Scan on scrapeq_crawl_memory" not in plan, plan
    assert "Hash" not in plan, plan
