"""Retention on a real PostgreSQL: old finished rows go; failed rows are kept like a dead-letter
queue of bounded length (the newest N per queue) and/or for a given age."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

from tests.integration.queue.test_commands import run
from tests.integration.queue.test_job_lifecycle import claim_jobs

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]


async def cli(*argv: str) -> int:
    """Run `scrapeq ARGV` the way a shell would: in a thread with no event loop of its own."""
    return await asyncio.to_thread(run, *argv)


async def failed_rows(
    connection: Connection, queue_name: str, hours_ago: list[float]
) -> dict[float, int]:
    """Fail one row per entry through the queue's own functions, then date its failure that
    many hours back; return {hours ago: id}. Each row also gets an attempts record."""
    ids = await queue.enqueue_many(
        connection,
        [f"https://e.test/{queue_name}/{hours}" for hours in hours_ago],
        queue=queue_name,
    )
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
