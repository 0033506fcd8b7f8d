"""Retention on a real PostgreSQL: old finished rows of ScrapeJobs go; their failed rows are kept
like a dead-letter queue of bounded length (the newest N per queue) and/or for a given age; a
SQL producer's rows stay unless the producer gave them a retention; a row a sink still waits for
stays whatever its age."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

from tests.integration.queue.test_commands import run
from tests.integration.queue.test_job_lifecycle import claim_jobs
from tests.plain_sql import insert_plain_row

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]


async def cli(*argv: str) -> int:
    """Run `scrapeq ARGV` the way a shell would: in a thread with no event loop of its own."""
    return await asyncio.to_thread(run, *argv)


async def failed_rows(
    connection: Connection, queue_name: str, hours_ago: list[float]
) -> dict[float, int]:
    """Fail one row of a ScrapeJob per entry through the queue's own functions, then date its
    failure that many hours back; return {hours ago: id}. Each row also gets an attempts
    record."""
    await queue.enqueue_for_owner(
        connection,
        queue.Owner(uid=f"uid-{queue_name}", namespace="default", name=queue_name),
        [f"https://e.test/{queue_name}/{hours}" for hours in hours_ago],
        queue=queue_name,
    )
    cursor = await connection.execute(
        "SELECT id FROM scraping_jobs WHERE owner_uid = %s ORDER BY id", (f"uid-{queue_name}",)
    )
    ids = [row[0] for row in await cursor.fetchall()]
    jobs = await claim_jobs(
        connection, worker_id="w", queues=[queue_name], limit=len(ids), lease_seconds=30
    )
    for job in jobs:
        assert await queue.fail_job(
            connection, job.id, job.attempt, error="HTTP 500", reason="http_500", duration_seconds=0
        )
    for job_id, hours in zip(ids, hours_ago, strict=True):
        await connection.execute(
            "UPDATE scraping_jobs SET finished_at = now() - make_interval(secs => %s)"
            " WHERE id = %s",
            (hours * 3600, job_id),
        )
    return dict(zip(hours_ago, ids, strict=True))


async def own(connection: Connection, job_id: int) -> None:
    """Make the row a ScrapeJob's, as if the operator had queued it."""
    await connection.execute(
        "UPDATE scraping_jobs SET owner_uid = 'uid-own', owner_namespace = 'default',"
        " owner_name = 'own' WHERE id = %s",
        (job_id,),
    )


async def finish(connection: Connection, hours_ago: dict[int, float]) -> None:
    """Complete the rows {id: hours ago} through the queue's own functions (every pending row
    must be one of them), each dated that many hours back."""
    jobs = await claim_jobs(
        connection, worker_id="w", queues=["default"], limit=100, lease_seconds=30
    )
    assert {job.id for job in jobs} == set(hours_ago)
    for job in jobs:
        assert await queue.complete_job(
            connection, job.id, job.attempt, result={"title": "kept"}, duration_seconds=0
        )
        await connection.execute(
            "UPDATE scraping_jobs SET finished_at = now() - make_interval(secs => %s)"
            " WHERE id = %s",
            (hours_ago[job.id] * 3600, job.id),
        )


async def remaining_ids(connection: Connection) -> set[int]:
    cursor = await connection.execute("SELECT id FROM scraping_jobs")
    return {row[0] for row in await cursor.fetchall()}


async def attempt_job_ids(connection: Connection) -> set[int]:
    cursor = await connection.execute("SELECT DISTINCT job_id FROM scrapeq_attempts")
    return {row[0] for row in await cursor.fetchall()}


async def test_keeping_the_last_failed_rows_deletes_only_older_ones_per_queue(
    async_connection: Connection,
) -> None:
    shop = await failed_rows(async_connection, "shop", [1, 2, 3, 4, 5])
    news = await failed_rows(async_connection, "news", [10, 20])
    (waiting,) = await queue.enqueue_many(async_connection, ["https://e.test/waiting"])

    deleted = await queue.prune_finished(
        async_connection, completed_older_than=timedelta(days=7), keep_failed_last=2
    )

    assert deleted == 3
    kept = {shop[1], shop[2], news[10], news[20], waiting}
    assert await remaining_ids(async_connection) == kept
    # The attempts of deleted rows went with them.
    assert await attempt_job_ids(async_connection) == kept - {waiting}
    assert (
        await queue.prune_finished(
            async_connection, completed_older_than=timedelta(days=7), keep_failed_last=2
        )
        == 0
    )


async def test_the_age_limit_and_the_count_limit_both_apply_to_failed_rows(
    async_connection: Connection,
) -> None:
    shop = await failed_rows(async_connection, "shop", [1, 30, 40, 50])

    deleted = await queue.prune_finished(
        async_connection,
        completed_older_than=timedelta(days=7),
        keep_failed=timedelta(hours=35),
        keep_failed_last=3,
    )

    # 50 h is beyond both limits, 40 h beyond the age only; 1 h and 30 h are within both.
    assert deleted == 2
    assert await remaining_ids(async_connection) == {shop[1], shop[30]}


async def test_keeping_zero_failed_rows_deletes_every_failure_in_small_batches(
    async_connection: Connection,
) -> None:
    await failed_rows(async_connection, "shop", [float(hours) for hours in range(1, 8)])
    (completed,) = await queue.enqueue_many(async_connection, ["https://e.test/fine"])
    await own(async_connection, completed)
    (job,) = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=1, lease_seconds=30
    )
    assert await queue.complete_job(
        async_connection, job.id, job.attempt, result={}, duration_seconds=0
    )

    deleted = await queue.prune_finished(
        async_connection, completed_older_than=timedelta(days=7), keep_failed_last=0, batch_rows=3
    )

    assert deleted == 7
    assert await remaining_ids(async_connection) == {completed}


async def test_failed_rows_are_kept_forever_without_a_limit(async_connection: Connection) -> None:
    shop = await failed_rows(async_connection, "shop", [24 * 365, 1])

    assert await queue.prune_finished(async_connection, completed_older_than=timedelta(0)) == 0
    assert await remaining_ids(async_connection) == set(shop.values())


async def test_a_negative_count_is_refused(async_connection: Connection) -> None:
    with pytest.raises(queue.InvalidJob, match="keep_failed_last must be 0 or more"):
        await queue.prune_finished(
            async_connection, completed_older_than=timedelta(days=7), keep_failed_last=-1
        )


async def test_prune_command_keeps_the_last_failed_rows_per_queue(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    shop = await failed_rows(async_connection, "shop", [1, 2, 3])
    news = await failed_rows(async_connection, "news", [1])
    url = ("--database-url", database_url)

    assert await cli("prune", *url, "--keep-failed-last", "1") == 0

    assert capsys.readouterr().out.strip() == "deleted 2 finished job(s)"
    assert await remaining_ids(async_connection) == {shop[1], news[1]}
    with pytest.raises(SystemExit):
        await cli("prune", *url, "--keep-failed-last", "-3")
    assert "expected 0 or more" in capsys.readouterr().err


async def test_a_sql_producers_rows_stay_in_every_final_state_however_old(
    async_connection: Connection,
) -> None:
    completed = await insert_plain_row(async_connection, "https://e.test/classic", "'{}'")
    await finish(async_connection, {completed: 24 * 365})
    failed = await insert_plain_row(async_connection, "https://e.test/classic-failed", "'{}'")
    await async_connection.execute(
        "UPDATE scraping_jobs SET status = 'failed', finished_at = now() - interval '400 days'"
        " WHERE id = %s",
        (failed,),
    )

    deleted = await queue.prune_finished(
        async_connection,
        completed_older_than=timedelta(0),
        keep_failed=timedelta(0),
        keep_failed_last=0,
    )

    assert deleted == 0
    cursor = await async_connection.execute(
        "SELECT status::text, result FROM scraping_jobs WHERE id = %s", (completed,)
    )
    assert await cursor.fetchone() == ("completed", {"title": "kept"})
    assert await remaining_ids(async_connection) == {completed, failed}


async def test_a_row_whose_producer_set_retain_for_goes_that_long_after_it_finished(
    async_connection: Connection,
) -> None:
    asked = await insert_plain_row(async_connection, "https://e.test/asked", "'{}'")
    recent = await insert_plain_row(async_connection, "https://e.test/recent", "'{}'")
    await async_connection.execute(
        "UPDATE scraping_jobs SET retain_for = interval '1 hour' WHERE id = ANY(%s)",
        ([asked, recent],),
    )
    await finish(async_connection, {asked: 2, recent: 0.5})

    deleted = await queue.prune_finished(async_connection, completed_older_than=timedelta(days=7))

    assert deleted == 1
    assert await remaining_ids(async_connection) == {recent}


async def test_a_scrapejob_row_with_its_own_retention_ignores_the_default(
    async_connection: Connection,
) -> None:
    owner = queue.Owner(uid="uid-ttl", namespace="default", name="ttl")
    await queue.enqueue_for_owner(
        async_connection,
        owner,
        ["https://e.test/ttl/a", "https://e.test/ttl/b"],
        retain_for=timedelta(days=30),
    )
    cursor = await async_connection.execute("SELECT id FROM scraping_jobs ORDER BY id")
    old, young = [row[0] for row in await cursor.fetchall()]
    await finish(async_connection, {old: 24 * 31, young: 24 * 8})

    deleted = await queue.prune_finished(async_connection, completed_older_than=timedelta(days=7))

    # The default (7 days) would take both; the rows' own 30 days takes only the older one.
    assert deleted == 1
    assert await remaining_ids(async_connection) == {young}


async def test_rows_a_sink_still_waits_for_are_never_deleted(
    async_connection: Connection,
) -> None:
    (owned,) = await queue.enqueue_many(async_connection, ["https://e.test/undelivered"])
    await own(async_connection, owned)
    asked = await insert_plain_row(async_connection, "https://e.test/undelivered-asked", "'{}'")
    await finish(async_connection, {owned: 24 * 30, asked: 24 * 30})
    await async_connection.execute(
        "UPDATE scraping_jobs SET undelivered = true, retain_for = CASE WHEN id = %s"
        " THEN interval '1 hour' END",
        (asked,),
    )

    assert (
        await queue.prune_finished(
            async_connection, completed_older_than=timedelta(0), keep_failed_last=0
        )
        == 0
    )
    assert await remaining_ids(async_connection) == {owned, asked}

    # Once the sink has them, the usual rules apply.
    await async_connection.execute("UPDATE scraping_jobs SET undelivered = false")
    assert await queue.prune_finished(async_connection, completed_older_than=timedelta(days=7)) == 2


async def test_a_negative_retention_is_refused_before_anything_is_queued(
    async_connection: Connection,
) -> None:
    with pytest.raises(queue.InvalidJob, match="retain_for must be 0 or more"):
        await queue.enqueue_many(
            async_connection, ["https://e.test/negative"], retain_for=timedelta(seconds=-1)
        )
    assert await remaining_ids(async_connection) == set()
