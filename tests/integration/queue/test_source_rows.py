"""Source rows on a real PostgreSQL: fenced batches, dedup per owner, progress, cancel, and
the undelivered mark of rows whose job has an output."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue.output_batches import OutputSettings, register_output
from scrapeq_queue.rows import NewJob, Owner
from scrapeq_queue.source_rows import (
    ExpandedBatch,
    ExpandedEntry,
    SourceProgress,
    enqueue_expanded,
    source_progress,
)

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]
OWNER = Owner(uid="uid-sitemap", namespace="shop", name="catalogue")
SOURCE_PAYLOAD = {"source": {"kind": "sitemap"}, "render": False, "timeoutSeconds": 20}


async def claim_source(connection: Connection, worker: str = "worker-a") -> queue.ClaimedJob:
    (job,) = await queue.claim_jobs(
        connection,
        worker_id=worker,
        queues=["default"],
        limit=1,
        lease_seconds=30,
        politeness=queue.NO_SITE_LIMIT,
    )
    return job


async def enqueue_source(connection: Connection) -> int:
    (source_id,) = await queue.enqueue_many(
        connection,
        [
            NewJob(
                url="https://shop.test/sitemap.xml",
                dedup_key="sitemap:https://shop.test/sitemap.xml",
            )
        ],
        owner=OWNER,
        payload=SOURCE_PAYLOAD,
        priority=3,
    )
    return source_id


async def rows_of_owner(connection: Connection) -> list[tuple[str, str, Any, int]]:
    cursor = await connection.execute(
        "SELECT url_to_scrape, status::text, payload, priority FROM scraping_jobs"
        " WHERE owner_uid = %s ORDER BY id",
        (OWNER.uid,),
    )
    return list(await cursor.fetchall())


def pages(*paths: str) -> list[ExpandedEntry]:
    return [ExpandedEntry(f"https://shop.test/{path}") for path in paths]


@pytest.mark.timeout(60)
async def test_a_batch_inserts_page_rows_with_the_sources_options_and_sitemap_rows_with_its_source(
    async_connection: Connection,
) -> None:
    await enqueue_source(async_connection)
    source = await claim_source(async_connection)
    assert await source_progress(async_connection, source) == SourceProgress()

    batch = await enqueue_expanded(
        async_connection,
        source,
        [*pages("a", "b"), ExpandedEntry("https://shop.test/more.xml", is_sitemap=True)],
        entries_done=4,
        skipped=1,
    )

    assert batch == ExpandedBatch(pages=2, sitemaps=1)
    rows = await rows_of_owner(async_connection)
    assert [(url, status, priority) for url, status, _, priority in rows] == [
        ("https://shop.test/sitemap.xml", "processing", 3),
        ("https://shop.test/a", "pending", 3),
        ("https://shop.test/b", "pending", 3),
        ("https://shop.test/more.xml", "pending", 3),
    ]
    assert rows[1][2] == {"render": False, "timeoutSeconds": 20}
    assert rows[3][2] == SOURCE_PAYLOAD
    assert await source_progress(async_connection, source) == SourceProgress(
        entries=4, enqueued=2, sitemaps=1, skipped=1
    )


@pytest.mark.timeout(60)
async def test_entries_already_queued_for_the_owner_insert_nothing_and_count_nothing(
    async_connection: Connection,
) -> None:
    await enqueue_source(async_connection)
    await queue.enqueue_for_owner(async_connection, OWNER, ["https://shop.test/a"])
    source = await claim_source(async_connection)

    first = await enqueue_expanded(async_connection, source, pages("a", "b", "b"), entries_done=3)
    again = await enqueue_expanded(async_connection, source, pages("b", "c"), entries_done=5)

    assert first is not None
    assert first.pages == 1
    assert again is not None
    assert again.pages == 1
    urls = [url for url, *_ in await rows_of_owner(async_connection)]
    assert sorted(urls) == [
        "https://shop.test/a",
        "https://shop.test/b",
        "https://shop.test/c",
        "https://shop.test/sitemap.xml",
    ]
    assert (await source_progress(async_connection, source)) == SourceProgress(
        entries=5, enqueued=2
    )


@pytest.mark.timeout(60)
async def test_a_rescued_sources_old_attempt_is_fenced_out_and_the_new_one_reads_its_progress(
    async_connection: Connection,
) -> None:
    await enqueue_source(async_connection)
    old = await claim_source(async_connection)
    await enqueue_expanded(async_connection, old, pages("a"), entries_done=1)
    await async_connection.execute(
        "UPDATE scraping_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (old.id,),
    )
    await queue.rescue_expired_leases(async_connection)
    # The rescue delays the row by its backoff; the test does not wait it out.
    await async_connection.execute(
        "UPDATE scraping_jobs SET run_at = now() - interval '1 hour' WHERE id = %s", (old.id,)
    )
    new = await claim_source(async_connection, "worker-b")
    assert new.id == old.id

    assert await enqueue_expanded(async_connection, old, pages("b"), entries_done=2) is None
    assert await source_progress(async_connection, old) is None
    assert await source_progress(async_connection, new) == SourceProgress(entries=1, enqueued=1)
    assert [url for url, *_ in await rows_of_owner(async_connection)] == [
        "https://shop.test/sitemap.xml",
        "https://shop.test/a",
    ]


@pytest.mark.timeout(60)
async def test_a_cancelled_source_inserts_nothing_more_and_its_rows_are_cancelled(
    async_connection: Connection, database_url: str
) -> None:
    await enqueue_source(async_connection)
    source = await claim_source(async_connection)
    await enqueue_expanded(async_connection, source, pages("a", "b"), entries_done=2)

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as other:
        # A batch and a cancel at the same moment: whichever takes the owner's lock first, no
        # row is left pending.
        batch, cancelled = await asyncio.gather(
            enqueue_expanded(async_connection, source, pages("c", "d"), entries_done=4),
            queue.cancel_owner(other, OWNER.uid),
        )

    assert cancelled >= 3
    statuses = {status for _, status, *_ in await rows_of_owner(async_connection)}
    assert statuses == {"cancelled"}
    assert await enqueue_expanded(async_connection, source, pages("e"), entries_done=5) is None
    assert batch is None or batch.pages == 2


async def undelivered_by_url(connection: Connection) -> dict[str, bool]:
    cursor = await connection.execute(
        "SELECT url_to_scrape, undelivered FROM scraping_jobs ORDER BY id"
    )
    return dict(await cursor.fetchall())


@pytest.mark.timeout(60)
async def test_the_rows_a_source_expands_for_a_job_with_an_output_are_inserted_undelivered(
    async_connection: Connection,
) -> None:
    await register_output(
        async_connection,
        owner_uid=OWNER.uid,
        owner_namespace=OWNER.namespace,
        owner_name=OWNER.name,
        settings=OutputSettings(key_prefix="out"),
    )
    await enqueue_source(async_connection)
    source = await claim_source(async_connection)

    await enqueue_expanded(
        async_connection,
        source,
        [*pages("a", "b"), ExpandedEntry("https://shop.test/more.xml", is_sitemap=True)],
        entries_done=3,
    )

    assert await undelivered_by_url(async_connection) == {
        "https://shop.test/sitemap.xml": True,
        "https://shop.test/a": True,
        "https://shop.test/b": True,
        "https://shop.test/more.xml": True,
    }


@pytest.mark.timeout(60)
async def test_a_plain_insert_marks_undelivered_only_the_rows_of_owners_with_an_output(
    async_connection: Connection,
) -> None:
    await register_output(
        async_connection,
        owner_uid="with-output",
        owner_namespace="shop",
        owner_name="with",
        settings=OutputSettings(key_prefix="out"),
    )
    # One statement of a SQL producer that knows nothing of outputs: rows of an owner with an
    # output, of an owner without one, and without an owner.
    await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, owner_uid, owner_namespace,"
        " owner_name) VALUES"
        " ('https://shop.test/1', 'default', 'with-output', 'shop', 'with'),"
        " ('https://shop.test/2', 'default', 'without-output', 'shop', 'without'),"
        " ('https://shop.test/3', 'default', NULL, NULL, NULL),"
        " ('https://shop.test/4', 'default', 'with-output', 'shop', 'with')"
    )
    await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, owner_uid, owner_namespace,"
        " owner_name, undelivered) VALUES ('https://shop.test/5', 'default', 'with-output',"
        " 'shop', 'with', true)"
    )

    assert await undelivered_by_url(async_connection) == {
        "https://shop.test/1": True,
        "https://shop.test/2": False,
        "https://shop.test/3": False,
        "https://shop.test/4": True,
        "https://shop.test/5": True,
    }


@pytest.mark.timeout(60)
async def test_owner_progress_counts_the_source_rows_not_finished_as_expanding(
    async_connection: Connection,
) -> None:
    async def expanding() -> tuple[int, int]:
        progress = (await queue.owner_progress(async_connection, [OWNER.uid]))[OWNER.uid]
        return progress.total, progress.expanding

    await enqueue_source(async_connection)
    assert await expanding() == (1, 1)
    source = await claim_source(async_connection)
    await enqueue_expanded(
        async_connection,
        source,
        [*pages("a"), ExpandedEntry("https://shop.test/more.xml", is_sitemap=True)],
        entries_done=2,
    )
    assert await expanding() == (3, 2)

    await queue.complete_job(
        async_connection, source.id, source.attempt, result={}, duration_seconds=0.1
    )
    assert await expanding() == (3, 1)
    (more,) = [job for job in await claim_all(async_connection) if job.url.endswith(".xml")]
    await queue.fail_job(
        async_connection,
        more.id,
        more.attempt,
        error="gone",
        reason="http_404",
        duration_seconds=0.1,
    )
    assert await expanding() == (3, 0)


async def claim_all(connection: Connection) -> list[queue.ClaimedJob]:
    return await queue.claim_jobs(
        connection,
        worker_id="worker-a",
        queues=["default"],
        limit=10,
        lease_seconds=30,
        politeness=queue.NO_SITE_LIMIT,
    )
