"""Dead jobs on a real PostgreSQL: failed rows are listed with reasons and re-queued in bulk."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue

from tests.integration.queue.test_commands import run

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]

LAPTOPS = queue.Owner(uid="uid-laptops", namespace="shop", name="laptops")
PHONES = queue.Owner(uid="uid-phones", namespace="shop", name="phones")


async def cli(*argv: str) -> int:
    """Run `scrapeq ARGV` the way a shell would: in a thread with no event loop of its own."""
    return await asyncio.to_thread(run, *argv)


async def failed_row(
    connection: Connection,
    url: str,
    *,
    error: str,
    reason: str = "http_503",
    owner: queue.Owner | None = None,
    queue_name: str = "default",
) -> int:
    """Enqueue one URL, claim it and fail it for good; return its id."""
    (job_id,) = await queue.enqueue_many(connection, [url], queue=queue_name, owner=owner)
    (job,) = await queue.claim_jobs(
        connection, worker_id="worker-a", queues=[queue_name], limit=1, lease_seconds=30
    )
    assert job.id == job_id
    assert await queue.fail_job(
        connection, job.id, job.attempt, error=error, reason=reason, duration_seconds=0.1
    )
    return job_id


async def fetch_row(connection: Connection, job_id: int) -> dict[str, Any]:
    cursor = connection.cursor(row_factory=psycopg.rows.dict_row)
    await cursor.execute("SELECT * FROM scraping_jobs WHERE id = %s", (job_id,))
    row = await cursor.fetchone()
    assert row is not None
    return row


async def statuses(connection: Connection) -> dict[int, str]:
    cursor = await connection.execute("SELECT id, status::text FROM scraping_jobs ORDER BY id")
    return {row[0]: row[1] for row in await cursor.fetchall()}


async def four_failures(connection: Connection) -> tuple[int, int, int, int]:
    laptop = await failed_row(
        connection,
        "https://e.test/laptop",
        error="HTTP 503 Service Unavailable",
        owner=LAPTOPS,
        queue_name="shop",
    )
    phone = await failed_row(
        connection,
        "https://e.test/phone",
        error="timeout after 30s",
        reason="timeout",
        owner=PHONES,
        queue_name="shop",
    )
    plain = await failed_row(
        connection, "https://e.test/plain", error="http 503 service unavailable (upstream)"
    )
    odd = await failed_row(
        connection,
        "https://e.test/odd",
        error="DNS failure 100%_x",
        reason="dns",
        queue_name="other",
    )
    return laptop, phone, plain, odd


async def test_failed_jobs_lists_only_failed_rows_newest_first_with_their_reasons(
    async_connection: Connection,
) -> None:
    laptop, phone, plain, odd = await four_failures(async_connection)
    (completed,) = await queue.enqueue_many(async_connection, ["https://e.test/fine"])
    (job,) = await queue.claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=1, lease_seconds=30
    )
    await queue.complete_job(async_connection, job.id, job.attempt, result={}, duration_seconds=0)
    await queue.enqueue_many(async_connection, ["https://e.test/waiting"])

    failures = await queue.failed_jobs(async_connection)

    assert [failure.id for failure in failures] == [odd, plain, phone, laptop]
    assert completed not in [failure.id for failure in failures]
    newest = failures[0]
    assert (newest.queue, newest.url, newest.reason, newest.error, newest.retry_count) == (
        "other",
        "https://e.test/odd",
        "dns",
        "DNS failure 100%_x",
        0,
    )
    assert newest.finished_at is not None
    shop = await queue.failed_jobs(async_connection, queue="shop")
    assert [failure.id for failure in shop] == [phone, laptop]
    owned = await queue.failed_jobs(async_connection, owner_namespace="shop", owner_name="laptops")
    assert [failure.id for failure in owned] == [laptop]
    assert [failure.id for failure in await queue.failed_jobs(async_connection, limit=1)] == [odd]


async def test_jobs_failed_command_prints_reasons_and_jobs_alone_still_shows_the_summary(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    laptop, phone, _, _ = await four_failures(async_connection)
    url = ("--database-url", database_url)

    assert await cli("jobs", "failed", *url, "--owner", "shop/laptops") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "QUEUE", "FINISHED", "RETRIES", "REASON", "URL", "ERROR"]
    assert len(lines) == 2
    assert lines[1].split()[:2] == [str(laptop), "shop"]
    assert "http_503" in lines[1]
    assert "HTTP 503 Service Unavailable" in lines[1]

    assert await cli("jobs", "failed", *url, "--queue", "shop", "--limit", "1") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == [str(phone)]

    assert await cli("jobs", *url, "failed", "--queue", "nothing-here") == 0
    assert capsys.readouterr().out.strip() == "(no failed jobs)"

    assert await cli("jobs", *url) == 0
    summary = capsys.readouterr().out
    assert summary.splitlines()[0].split()[:2] == ["QUEUE", "DUE"]
    assert "LATEST FAILURES" in summary


async def test_retry_without_any_filter_is_refused(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    await four_failures(async_connection)
    with pytest.raises(queue.InvalidJob, match="give ids, a queue, an owner or an error"):
        await queue.retry_failed(async_connection)
    with pytest.raises(queue.InvalidJob):
        await queue.retry_failed(async_connection, error_pattern="")

    assert await cli("retry", "--database-url", database_url) == 1
    assert "refusing to retry every failed job" in capsys.readouterr().err
    assert set((await statuses(async_connection)).values()) == {"failed"}


async def test_retry_filters_combine_and_match_the_error_text_literally(
    async_connection: Connection,
) -> None:
    laptop, phone, plain, odd = await four_failures(async_connection)

    # `%` and `_` are text, not wildcards: only the DNS error contains "0%_".
    assert await queue.retry_failed(async_connection, error_pattern="0%_") == 1
    assert (await statuses(async_connection))[odd] == "pending"

    # Case-insensitive substring, AND-ed with the queue: the plain row matches the text only.
    assert (
        await queue.retry_failed(async_connection, error_pattern="SERVICE unavail", queue="shop")
        == 1
    )
    assert (await statuses(async_connection))[laptop] == "pending"
    assert (await statuses(async_connection))[plain] == "failed"

    assert (
        await queue.retry_failed(async_connection, owner_namespace="shop", owner_name="phones") == 1
    )
    assert await queue.retry_failed(async_connection, ids=[plain, laptop]) == 1
    assert await queue.retry_failed(async_connection, ids=[plain]) == 0
    assert set((await statuses(async_connection)).values()) == {"pending"}

    for job_id, error in [(laptop, "HTTP 503 Service Unavailable"), (phone, "timeout after 30s")]:
        row = await fetch_row(async_connection, job_id)
        assert row["retry_count"] == 0
        assert row["finished_at"] is None
        assert row["lease_expires_at"] is None
        assert row["last_error"] == error
    assert await queue.failed_jobs(async_connection) == []


async def test_a_retried_row_keeps_its_history_wakes_workers_and_completes(
    database_url: str, async_connection: Connection
) -> None:
    (job_id,) = await queue.enqueue_many(async_connection, ["https://e.test/flaky"], max_retries=1)
    (first,) = await queue.claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=1, lease_seconds=30
    )
    assert (
        await queue.retry_job(
            async_connection,
            job_id,
            first.attempt,
            error="HTTP 503",
            reason="http_503",
            duration_seconds=0.1,
        )
        == "retrying"
    )
    await async_connection.execute(
        "UPDATE scraping_jobs SET run_at = now() WHERE id = %s", (job_id,)
    )
    (second,) = await queue.claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=1, lease_seconds=30
    )
    assert (
        await queue.retry_job(
            async_connection,
            job_id,
            second.attempt,
            error="HTTP 503",
            reason="http_503",
            duration_seconds=0.1,
        )
        == "failed"
    )
    assert (await fetch_row(async_connection, job_id))["retry_count"] == 1

    async with await queue.connect(database_url) as listener:
        await queue.listen(listener)
        assert await queue.retry_failed(async_connection, ids=[job_id]) == 1
        assert await queue.wait_for_notification(listener, 5)
        assert not await queue.wait_for_notification(listener, 0.2)

    (third,) = await queue.claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=1, lease_seconds=30
    )
    assert (third.id, third.attempt, third.retry_count) == (job_id, 3, 0)
    assert await queue.complete_job(
        async_connection, job_id, third.attempt, result={"fields": {}}, duration_seconds=0.1
    )
    row = await fetch_row(async_connection, job_id)
    assert row["status"] == "completed"
    assert row["last_error"] == "HTTP 503"
    outcomes = [attempt.outcome for attempt in await queue.job_attempts(async_connection, job_id)]
    assert outcomes == ["retrying", "failed", "completed"]


async def test_retry_command_reports_how_many_rows_it_requeued(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    laptop, _, plain, odd = await four_failures(async_connection)
    url = ("--database-url", database_url)

    assert await cli("retry", *url, "--error-pattern", "http 503") == 0
    assert capsys.readouterr().out.strip() == "re-queued 2 failed job(s)"
    assert await cli("retry", *url, "--owner", "shop/phones", "--queue", "shop") == 0
    assert capsys.readouterr().out.strip() == "re-queued 1 failed job(s)"
    assert await cli("retry", *url, "--id", str(odd), str(laptop)) == 0
    assert capsys.readouterr().out.strip() == "re-queued 1 failed job(s)"
    assert set((await statuses(async_connection)).values()) == {"pending"}
    assert plain in await statuses(async_connection)


async def test_retry_by_owner_uid_leaves_a_predecessor_with_the_same_name_alone(
    async_connection: Connection,
) -> None:
    # shop/laptops was deleted and created again under a new uid; both have failed rows.
    before = await failed_row(async_connection, "https://e.test/a", error="x", owner=LAPTOPS)
    again = queue.Owner(uid="uid-laptops-again", namespace="shop", name="laptops")
    now = await failed_row(async_connection, "https://e.test/b", error="x", owner=again)

    assert await queue.retry_failed(async_connection, owner_uid=again.uid) == 1

    assert await statuses(async_connection) == {before: "failed", now: "pending"}
