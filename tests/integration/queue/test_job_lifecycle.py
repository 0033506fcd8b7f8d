"""A job's life on a real PostgreSQL: claim, lease, complete, retry, fail, release, fence."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from psycopg.types.json import Jsonb

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]


async def claim_jobs(connection: Connection, **arguments: Any) -> list[queue.ClaimedJob]:
    """queue.claim_jobs without a per-site limit: these tests' rows share one made-up host."""
    return await queue.claim_jobs(connection, politeness=queue.NO_SITE_LIMIT, **arguments)


async def fetch_row(connection: Connection, job_id: int | None) -> dict[str, Any]:
    assert job_id is not None
    cursor = connection.cursor(row_factory=psycopg.rows.dict_row)
    await cursor.execute("SELECT * FROM scraping_jobs WHERE id = %s", (job_id,))
    row = await cursor.fetchone()
    assert row is not None
    return row


async def attempt_outcomes(connection: Connection, job_id: int) -> list[str]:
    return [attempt.outcome for attempt in await queue.job_attempts(connection, job_id)]


async def make_due(connection: Connection, job_id: int) -> None:
    """Move a delayed row's run_at to now: the test's stand-in for waiting out a backoff."""
    await connection.execute("UPDATE scraping_jobs SET run_at = now() WHERE id = %s", (job_id,))


async def claim_one(connection: Connection, worker: str = "worker-a") -> queue.ClaimedJob:
    (job,) = await claim_jobs(
        connection, worker_id=worker, queues=["default"], limit=1, lease_seconds=30
    )
    return job


async def test_claims_take_due_rows_by_priority_then_age(async_connection: Connection) -> None:
    old = await queue.enqueue(async_connection, "https://e.test/old")
    new = await queue.enqueue(async_connection, "https://e.test/new")
    urgent = await queue.enqueue(async_connection, "https://e.test/urgent", priority=5)
    later = await queue.enqueue(
        async_connection,
        "https://e.test/later",
        priority=9,
        run_at=await queue.database_now(async_connection) + timedelta(hours=1),
    )
    elsewhere = await queue.enqueue(async_connection, "https://e.test/other", queue="other")

    # One claim gives a host's rows of one priority at a time (docs/queue.md, per-site
    # politeness): claims in a row hand them out in claim order.
    jobs: list[queue.ClaimedJob] = []
    while batch := await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=10, lease_seconds=30
    ):
        jobs.extend(batch)

    assert [job.id for job in jobs] == [urgent, old, new]
    assert later not in {job.id for job in jobs}
    assert elsewhere not in {job.id for job in jobs}
    assert all(job.attempt == 1 for job in jobs)


async def test_a_claim_from_several_queues_still_orders_by_priority(
    async_connection: Connection,
) -> None:
    low = await queue.enqueue(async_connection, "https://e.test/low", queue="a")
    high = await queue.enqueue(async_connection, "https://e.test/high", queue="b", priority=3)

    jobs = await claim_jobs(
        async_connection, worker_id="w", queues=["a", "b"], limit=1, lease_seconds=30
    )

    assert [job.id for job in jobs] == [high]
    assert (await fetch_row(async_connection, low))["status"] == "pending"


async def test_a_claimed_job_is_processing_under_a_lease_and_logged(
    async_connection: Connection,
) -> None:
    job_id = await queue.enqueue(async_connection, "https://e.test/", payload={"render": False})

    job = await claim_one(async_connection, "pod-1")

    row = await fetch_row(async_connection, job.id)
    assert job.id == job_id
    assert job.payload == {"render": False}
    assert job.options_checked  # the claim checked the options: the worker need not again
    assert row["status"] == "processing"
    assert row["processed_by"] == "pod-1"
    assert row["lease_expires_at"] == job.lease_expires_at > job.claimed_at
    assert await attempt_outcomes(async_connection, job.id) == ["running"]


async def test_a_completed_job_keeps_its_result_and_attempt_history(
    async_connection: Connection,
) -> None:
    await queue.enqueue(async_connection, "https://e.test/")
    job = await claim_one(async_connection)

    assert await queue.complete_job(
        async_connection, job.id, job.attempt, result={"title": "Hi"}, duration_seconds=0.5
    )

    row = await fetch_row(async_connection, job.id)
    assert row["status"] == "completed"
    assert row["result"] == {"title": "Hi"}
    assert row["finished_at"] is not None
    assert row["lease_expires_at"] is None
    (attempt,) = await queue.job_attempts(async_connection, job.id)
    assert (attempt.outcome, attempt.worker_id, attempt.duration_seconds) == (
        "completed",
        "worker-a",
        0.5,
    )


async def test_a_plain_insert_with_only_the_classic_columns_is_processed(
    async_connection: Connection,
) -> None:
    cursor = await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) "
        "VALUES ('https://legacy.test/p', 'product', '{}') RETURNING id"
    )
    (job_id,) = await cursor.fetchone()  # type: ignore[misc]

    job = await claim_one(async_connection)
    await queue.complete_job(
        async_connection, job.id, job.attempt, result={"price": 3}, duration_seconds=0.1
    )

    cursor = await async_connection.execute(
        "SELECT status, result, last_error, retry_count, processed_by, processing_started_at "
        "FROM scraping_jobs WHERE id = %s",
        (job_id,),
    )
    status, result, last_error, retry_count, processed_by, started = await cursor.fetchone()  # type: ignore[misc]
    assert (job.id, job.parser_type) == (job_id, "product")
    assert (status, result, last_error, retry_count) == ("completed", {"price": 3}, None, 0)
    assert processed_by == "worker-a"
    assert started is not None


@pytest.mark.parametrize(
    ("payload_sql", "expected"),
    [
        ("'{\"rendr\": true}'", "unknown payload option 'rendr'"),
        ('\'{"timeoutSeconds": "soon"}\'', "timeoutSeconds must be a number"),
    ],
)
async def test_a_malformed_payload_fails_the_row_permanently_with_a_clear_error(
    async_connection: Connection, payload_sql: str, expected: str
) -> None:
    cursor = await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) "
        f"VALUES ('https://legacy.test/', 'p', {payload_sql}::jsonb) RETURNING id"
    )
    (job_id,) = await cursor.fetchone()  # type: ignore[misc]
    good = await queue.enqueue(async_connection, "https://e.test/good")

    jobs = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=10, lease_seconds=30
    )

    assert [job.id for job in jobs] == [good]
    row = await fetch_row(async_connection, job_id)
    assert row["status"] == "failed"
    assert row["last_error_reason"] == "invalid_payload"
    assert row["last_error"].startswith("invalid payload: ")
    assert expected in row["last_error"]
    assert row["retry_count"] == 0


async def test_a_claim_whose_rows_are_all_invalid_claims_again_so_empty_means_nothing_due(
    async_connection: Connection,
) -> None:
    await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) "
        "SELECT 'https://legacy.test/' || n, 'p', '{\"rendr\": true}'::jsonb "
        "FROM generate_series(1, 5) AS n"
    )
    good = await queue.enqueue(async_connection, "https://e.test/after-the-bad-ones")

    first = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=2, lease_seconds=30
    )
    second = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=2, lease_seconds=30
    )

    assert [job.id for job in first] == [good]
    assert second == []
    cursor = await async_connection.execute(
        "SELECT count(*) FROM scraping_jobs WHERE status = 'failed' "
        "AND last_error_reason = 'invalid_payload'"
    )
    assert await cursor.fetchone() == (5,)


async def test_a_stale_worker_cannot_complete_retry_or_fail_a_rescued_job(
    async_connection: Connection,
) -> None:
    await queue.enqueue(async_connection, "https://e.test/")
    (stale,) = await claim_jobs(
        async_connection, worker_id="stale", queues=["default"], limit=1, lease_seconds=0.05
    )
    await pytest_eventually_rescued(async_connection)
    fresh = await claim_one(async_connection, "fresh")
    assert (fresh.id, fresh.attempt) == (stale.id, stale.attempt + 1)

    assert not await queue.complete_job(
        async_connection, stale.id, stale.attempt, result={"stale": True}, duration_seconds=1
    )
    assert (
        await queue.retry_job(
            async_connection, stale.id, stale.attempt, error="x", reason="r", duration_seconds=1
        )
        == "fenced"
    )
    assert not await queue.fail_job(
        async_connection, stale.id, stale.attempt, error="x", reason="r", duration_seconds=1
    )
    assert (
        await queue.renew_leases(
            async_connection, worker_id="stale", jobs=[stale.token], lease_seconds=30
        )
        == set()
    )
    assert await queue.release_jobs(async_connection, worker_id="stale", jobs=[stale.token]) == 0
    assert await queue.complete_job(
        async_connection, fresh.id, fresh.attempt, result={"fresh": True}, duration_seconds=1
    )

    row = await fetch_row(async_connection, fresh.id)
    assert row["result"] == {"fresh": True}
    assert row["retry_count"] == 1
    assert await attempt_outcomes(async_connection, fresh.id) == ["expired", "completed"]


async def pytest_eventually_rescued(connection: Connection) -> None:
    from tests.waiting import eventually

    await eventually(
        lambda: queue.rescue_expired_leases(connection),
        until=lambda rescued: rescued == 1,
        within=10,
        what="the expired lease to be rescued",
    )


async def test_renewing_keeps_a_lease_alive_and_reports_only_jobs_still_held(
    async_connection: Connection,
) -> None:
    first = await queue.enqueue(async_connection, "https://e.test/1")
    second = await queue.enqueue(async_connection, "https://e.test/2")
    jobs = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=2, lease_seconds=5
    )
    await queue.cancel_jobs(async_connection, [second])  # type: ignore[list-item]

    renewed = await queue.renew_leases(
        async_connection, worker_id="w", jobs=[job.token for job in jobs], lease_seconds=600
    )
    other_worker = await queue.renew_leases(
        async_connection,
        worker_id="someone-else",
        jobs=[job.token for job in jobs],
        lease_seconds=600,
    )

    assert renewed == {first}
    assert other_worker == set()
    row = await fetch_row(async_connection, first)
    assert row["lease_expires_at"] > jobs[0].lease_expires_at + timedelta(seconds=500)


async def test_retries_follow_the_backoff_schedule_and_stop_at_the_limit(
    async_connection: Connection,
) -> None:
    job_id = await queue.enqueue(
        async_connection, "https://e.test/", max_retries=2, backoff_seconds=10
    )
    assert job_id is not None
    delays = []
    outcomes = []
    for number in range(3):
        job = await claim_one(async_connection)
        before = await queue.database_now(async_connection)
        outcomes.append(
            await queue.retry_job(
                async_connection,
                job.id,
                job.attempt,
                error=f"HTTP 503 on try {number + 1}",
                reason="http_503",
                duration_seconds=0.2,
                jitter=1.0,
            )
        )
        row = await fetch_row(async_connection, job_id)
        delays.append((row["run_at"] - before).total_seconds())
        if row["status"] == "pending":
            await make_due(async_connection, job_id)

    assert outcomes == ["retrying", "retrying", "failed"]
    assert delays[0] == pytest.approx(10, abs=1)
    assert delays[1] == pytest.approx(20, abs=1)
    row = await fetch_row(async_connection, job_id)
    assert row["status"] == "failed"
    assert row["retry_count"] == 2
    assert row["last_error"] == "HTTP 503 on try 3"
    assert row["last_error_reason"] == "http_503"
    assert await attempt_outcomes(async_connection, job_id) == ["retrying", "retrying", "failed"]


async def test_a_retry_after_hint_wins_over_the_schedule_and_is_capped(
    async_connection: Connection,
) -> None:
    short = await queue.enqueue(async_connection, "https://e.test/a", backoff_seconds=100)
    huge = await queue.enqueue(async_connection, "https://e.test/b", backoff_seconds=100)
    jobs = {
        job.id: job
        for job in await claim_jobs(
            async_connection, worker_id="w", queues=["default"], limit=2, lease_seconds=30
        )
    }
    before = await queue.database_now(async_connection)

    for job_id, hint in ((short, 2.0), (huge, 10 * 86_400.0)):
        job = jobs[job_id]  # type: ignore[index]
        await queue.retry_job(
            async_connection,
            job.id,
            job.attempt,
            error="429",
            reason="http_429",
            duration_seconds=0.1,
            retry_after_seconds=hint,
        )

    short_delay = ((await fetch_row(async_connection, short))["run_at"] - before).total_seconds()
    huge_delay = ((await fetch_row(async_connection, huge))["run_at"] - before).total_seconds()
    assert short_delay == pytest.approx(2, abs=1)
    assert huge_delay == pytest.approx(queue.RETRY_POLICY.max_delay_seconds, abs=1)


async def test_a_permanent_failure_does_not_retry(async_connection: Connection) -> None:
    await queue.enqueue(async_connection, "https://e.test/", max_retries=5)
    job = await claim_one(async_connection)

    assert await queue.fail_job(
        async_connection,
        job.id,
        job.attempt,
        error="HTTP 404",
        reason="http_404",
        duration_seconds=0,
    )

    row = await fetch_row(async_connection, job.id)
    assert (row["status"], row["retry_count"], row["last_error"]) == ("failed", 0, "HTTP 404")


async def test_released_jobs_are_due_again_at_once_without_counting_a_retry(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, ["https://e.test/1", "https://e.test/2"])
    jobs = await claim_jobs(
        async_connection, worker_id="draining", queues=["default"], limit=2, lease_seconds=30
    )

    released = await queue.release_jobs(
        async_connection, worker_id="draining", jobs=[job.token for job in jobs]
    )
    again = await claim_jobs(
        async_connection, worker_id="other", queues=["default"], limit=2, lease_seconds=30
    )

    assert released == 2
    assert sorted(job.id for job in again) == sorted(job.id for job in jobs)
    assert all(job.retry_count == 0 and job.attempt == 2 for job in again)
    assert await attempt_outcomes(async_connection, jobs[0].id) == ["released", "running"]


async def test_an_expired_lease_out_of_retries_fails_with_the_reason(
    async_connection: Connection,
) -> None:
    await queue.enqueue(async_connection, "https://e.test/", max_retries=0)
    await claim_jobs(
        async_connection, worker_id="dead", queues=["default"], limit=1, lease_seconds=0.01
    )

    await pytest_eventually_rescued(async_connection)

    (failure,) = await queue.latest_failures(async_connection)
    assert failure.reason == "lease_expired"
    assert "dead" in (failure.error or "")


async def test_cancel_stops_pending_and_in_flight_rows_of_an_owner(
    async_connection: Connection,
) -> None:
    owner = queue.Owner(uid="uid-1", namespace="shop", name="laptops")
    other = queue.Owner(uid="uid-2", namespace="shop", name="phones")
    await queue.enqueue_for_owner(async_connection, owner, ["https://e.test/1", "https://e.test/2"])
    await queue.enqueue_for_owner(async_connection, other, ["https://e.test/1"])
    (in_flight,) = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=1, lease_seconds=30
    )
    assert in_flight.owner_uid == "uid-1"

    assert await queue.cancel_owner(async_connection, "uid-1") == 2

    assert not await queue.complete_job(
        async_connection, in_flight.id, in_flight.attempt, result={}, duration_seconds=1
    )
    assert (
        await queue.renew_leases(
            async_connection, worker_id="w", jobs=[in_flight.token], lease_seconds=30
        )
        == set()
    )
    progress = await queue.owner_progress(async_connection, ["uid-1", "uid-2"])
    assert progress["uid-1"].cancelled == 2
    assert progress["uid-1"].finished
    assert progress["uid-2"].pending == 1
    assert await attempt_outcomes(async_connection, in_flight.id) == ["cancelled"]
    remaining = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=10, lease_seconds=30
    )
    assert [job.owner_uid for job in remaining] == ["uid-2"]


async def test_enqueue_for_an_owner_never_duplicates_a_url(async_connection: Connection) -> None:
    owner = queue.Owner(uid="uid-1", namespace="ns", name="job")
    urls = ["https://e.test/a", "HTTPS://E.TEST/a#top", "https://e.test/b"]

    first = await queue.enqueue_for_owner(async_connection, owner, urls)
    second = await queue.enqueue_for_owner(async_connection, owner, [*urls, "https://e.test/c"])
    other_owner = await queue.enqueue_for_owner(
        async_connection, queue.Owner("uid-2", "ns", "other"), urls
    )

    assert (first, second, other_owner) == (2, 1, 2)
    assert (await queue.owner_progress(async_connection, ["uid-1"]))["uid-1"].total == 3


async def test_followed_links_become_children_once_per_owner(async_connection: Connection) -> None:
    owner = queue.Owner(uid="uid-1", namespace="ns", name="job")
    await queue.enqueue_for_owner(
        async_connection, owner, ["https://e.test/list"], payload={"render": False}, priority=2
    )
    parent = await claim_one(async_connection)
    links = [
        queue.FollowUrl("https://e.test/item/1"),
        queue.FollowUrl("https://E.test/item/1#reviews"),
        queue.FollowUrl("https://e.test/list"),  # the parent itself: already known
        queue.FollowUrl("https://e.test/item/2", payload={"render": True}),
    ]

    assert await queue.complete_job(
        async_connection,
        parent.id,
        parent.attempt,
        result={},
        duration_seconds=1,
        follow_urls=links,
    )

    children = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=10, lease_seconds=30
    )
    assert sorted(child.url for child in children) == [
        "https://e.test/item/1",
        "https://e.test/item/2",
    ]
    assert {(c.parent_id, c.depth, c.priority, c.owner_uid) for c in children} == {
        (parent.id, 1, 2, "uid-1")
    }
    assert {c.url: c.payload for c in children} == {
        "https://e.test/item/1": {"render": False},
        "https://e.test/item/2": {"render": True},
    }


async def test_links_past_the_jobs_max_pages_are_dropped_and_the_result_says_how_many(
    async_connection: Connection,
) -> None:
    owner = queue.Owner(uid="uid-cap", namespace="ns", name="job")
    await queue.enqueue_for_owner(
        async_connection, owner, ["https://e.test/a", "https://e.test/b"], payload={}
    )
    first, second = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=2, lease_seconds=30
    )
    offered = [queue.FollowUrl(f"https://e.test/item/{n}") for n in range(5)]

    for parent in (first, second):
        assert await queue.complete_job(
            async_connection,
            parent.id,
            parent.attempt,
            result={"fields": {}},
            duration_seconds=1,
            follow_urls=[*offered, queue.FollowUrl(f"https://e.test/only-from/{parent.id}")],
            follow_limit=3,
        )

    first_row = await fetch_row(async_connection, first.id)
    second_row = await fetch_row(async_connection, second.id)
    # Three of the first page's six links were queued; the second page's link of its own
    # found the job's three pages taken (its five others were queued already or dropped).
    assert first_row["result"] == {"fields": {}, "follow_dropped": {"max_pages": 3}}
    assert second_row["result"] == {"fields": {}, "follow_dropped": {"max_pages": 3}}
    cursor = await async_connection.execute(
        "SELECT count(*) FROM scraping_jobs WHERE owner_uid = 'uid-cap' AND depth = 1"
    )
    assert await cursor.fetchone() == (3,)


async def test_a_fenced_completion_adds_no_children(async_connection: Connection) -> None:
    await queue.enqueue(async_connection, "https://e.test/list")
    parent = await claim_one(async_connection)
    await queue.cancel_jobs(async_connection, [parent.id])

    assert not await queue.complete_job(
        async_connection,
        parent.id,
        parent.attempt,
        result={},
        duration_seconds=1,
        follow_urls=[queue.FollowUrl("https://e.test/child")],
    )
    cursor = await async_connection.execute("SELECT count(*) FROM scraping_jobs")
    assert await cursor.fetchone() == (1,)


async def test_enqueue_many_takes_100k_urls_in_a_few_seconds(async_connection: Connection) -> None:
    import time

    urls = [f"https://e.test/item/{number}" for number in range(100_000)]
    started = time.monotonic()

    ids = await queue.enqueue_many(async_connection, urls, queue="bulk")

    elapsed = time.monotonic() - started
    assert len(ids) == 100_000
    # "A few seconds" on an idle 2-core machine (2-3 s); the bound leaves room for a busy one.
    assert elapsed < 20, f"100k URLs took {elapsed:.1f}s"
    backlog = await queue.queue_backlog(async_connection, ["bulk"])
    assert backlog["bulk"].due_pending == 100_000


async def test_completions_in_a_batch_skip_only_the_fenced_ones(
    async_connection: Connection,
) -> None:
    await queue.enqueue_many(async_connection, [f"https://e.test/{n}" for n in range(3)])
    jobs = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=3, lease_seconds=30
    )
    await queue.cancel_jobs(async_connection, [jobs[1].id])

    done = await queue.complete_many(
        async_connection, [queue.Completion(job.id, job.attempt, {"n": 1}, 0.1) for job in jobs]
    )

    assert done == {jobs[0].id, jobs[2].id}


async def test_statistics_report_backlog_in_flight_and_finished_totals(
    async_connection: Connection,
) -> None:
    now = await queue.database_now(async_connection)
    await queue.enqueue_many(async_connection, [f"https://e.test/{n}" for n in range(5)])
    await queue.enqueue(async_connection, "https://e.test/later", run_at=now + timedelta(hours=1))
    jobs = await claim_jobs(
        async_connection, worker_id="pod-a", queues=["default"], limit=3, lease_seconds=30
    )
    await queue.complete_job(
        async_connection, jobs[0].id, jobs[0].attempt, result={}, duration_seconds=0
    )
    await queue.fail_job(
        async_connection, jobs[1].id, jobs[1].attempt, error="e", reason="r", duration_seconds=0
    )

    (stats,) = await queue.queue_stats(async_connection)
    backlog = await queue.queue_backlog(async_connection, ["default", "empty"])
    busy = await queue.busy_workers(async_connection, "default")

    assert (stats.queue, stats.due_pending, stats.delayed_pending, stats.processing) == (
        "default",
        2,
        1,
        1,
    )
    assert (stats.completed_total, stats.failed_total, stats.cancelled_total) == (1, 1, 0)
    assert backlog["default"] == queue.QueueBacklog(
        due_pending=2,
        delayed_pending=1,
        processing=1,
        oldest_due_age_seconds=backlog["default"].oldest_due_age_seconds,
    )
    assert (backlog["default"].oldest_due_age_seconds or -1) >= 0
    assert backlog["empty"] == queue.QueueBacklog(0, 0, 0, None)
    assert busy == {"pod-a": 1}


async def test_owner_progress_and_changes_follow_the_rows(async_connection: Connection) -> None:
    owner = queue.Owner(uid="uid-1", namespace="ns", name="job")
    before = await queue.database_now(async_connection)
    await queue.enqueue_for_owner(
        async_connection, owner, [f"https://e.test/{n}" for n in range(4)]
    )
    jobs = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=3, lease_seconds=30
    )
    await queue.complete_job(
        async_connection, jobs[0].id, jobs[0].attempt, result={"title": "A"}, duration_seconds=0
    )
    await queue.retry_job(
        async_connection, jobs[1].id, jobs[1].attempt, error="boom", reason="r", duration_seconds=0
    )

    progress = await queue.owner_progress(async_connection, ["uid-1", "nobody"])
    changed = await queue.owners_changed_since(async_connection, before)

    mine = progress["uid-1"]
    assert (mine.total, mine.pending, mine.retrying, mine.processing, mine.succeeded) == (
        4,
        1,
        1,
        1,
        1,
    )
    assert mine.last_error == "boom"
    assert mine.first_started_at is not None
    assert [(p.url, p.result) for p in mine.preview] == [(jobs[0].url, {"title": "A"})]
    assert progress["nobody"] == queue.OwnerProgress()
    assert changed == [owner]
    assert (
        await queue.owners_changed_since(
            async_connection, await queue.database_now(async_connection)
        )
        == []
    )


async def test_owner_progress_counts_crawl_outcomes_from_the_flags_each_completion_kept(
    async_connection: Connection,
) -> None:
    owner = queue.Owner(uid="uid-1", namespace="ns", name="job")
    results: list[dict[str, Any]] = [
        {"changed": True, "validators": True},
        {"changed": False, "validators": False},
        {"changed": True, "validators": False},
        {"changed": False, "skipped": "recrawl_after"},
        # A source row's result: `skipped` counts entries, it is not a skipped page.
        {"entries": 10, "enqueued": 9, "sitemaps": 0, "skipped": 1},
        {"title": "no crawl memory"},
    ]
    await queue.enqueue_for_owner(
        async_connection, owner, [f"https://e.test/{n}" for n in range(len(results))]
    )
    jobs = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=10, lease_seconds=30
    )
    for job in jobs:
        await queue.complete_job(
            async_connection,
            job.id,
            job.attempt,
            result=results[int(job.url.rsplit("/", 1)[1])],
            duration_seconds=0,
        )

    mine = (await queue.owner_progress(async_connection, ["uid-1"]))["uid-1"]

    assert (mine.succeeded, mine.changed, mine.unchanged) == (6, 2, 2)
    assert (mine.without_validators, mine.skipped) == (2, 1)
    flags = await (
        await async_connection.execute(
            "SELECT url_to_scrape, crawl_flags FROM scraping_jobs ORDER BY url_to_scrape"
        )
    ).fetchall()
    assert [flag for _, flag in flags] == [1, 6, 5, 10, None, None]


async def test_pruning_removes_old_finished_rows_and_keeps_failures(
    async_connection: Connection,
) -> None:
    await queue.enqueue_for_owner(
        async_connection,
        queue.Owner(uid="uid", namespace="default", name="shop"),
        [f"https://e.test/{n}" for n in range(3)],
    )
    jobs = await claim_jobs(
        async_connection, worker_id="w", queues=["default"], limit=3, lease_seconds=30
    )
    await queue.complete_job(
        async_connection, jobs[0].id, jobs[0].attempt, result={}, duration_seconds=0
    )
    await queue.fail_job(
        async_connection, jobs[1].id, jobs[1].attempt, error="e", reason="r", duration_seconds=0
    )
    await async_connection.execute(
        "UPDATE scraping_jobs SET finished_at = now() - interval '2 days' "
        "WHERE finished_at IS NOT NULL"
    )

    pruned = await queue.prune_finished(async_connection, completed_older_than=timedelta(days=1))

    assert pruned == 1
    cursor = await async_connection.execute("SELECT status::text FROM scraping_jobs ORDER BY id")
    assert [row[0] for row in await cursor.fetchall()] == ["failed", "processing"]
    # The completed job's attempt went with it; the failed one's stays (the third is in flight).
    cursor = await async_connection.execute("SELECT count(*) FROM scrapeq_attempts")
    assert await cursor.fetchone() == (1,)
    assert (
        await queue.prune_finished(
            async_connection, completed_older_than=timedelta(days=1), keep_failed=timedelta(hours=1)
        )
        == 1
    )


async def test_payloads_round_trip_as_given(async_connection: Connection) -> None:
    payload = {"extract": {"title": {"selector": "h1"}}, "waitFor": ".x"}
    await async_connection.execute(
        "INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload) VALUES (%s, %s, %s)",
        ("https://e.test/", "p", Jsonb(payload)),
    )
    job = await claim_one(async_connection)
    assert job.payload == payload


async def test_enqueue_refuses_a_payload_a_worker_would_reject(
    async_connection: Connection,
) -> None:
    with pytest.raises(queue.InvalidJob, match="unknown payload option 'colour'"):
        await queue.enqueue(async_connection, "https://e.test/", payload={"colour": "red"})
    with pytest.raises(queue.InvalidJob, match="render must be true or false"):
        await queue.enqueue_many(
            async_connection, [queue.NewJob("https://e.test/", payload={"render": "no"})]
        )
    cursor = await async_connection.execute("SELECT count(*) FROM scraping_jobs")
    assert await cursor.fetchone() == (0,)


async def test_enqueue_refuses_an_unknown_row_option(async_connection: Connection) -> None:
    options: dict[str, Any] = {"max_retry": 0}  # a typo of max_retries
    with pytest.raises(TypeError, match="unknown row options: max_retry"):
        await queue.enqueue(async_connection, "https://e.test/", **options)
    with pytest.raises(TypeError, match="unknown row options: max_retry"):
        await queue.enqueue_for_owner(
            async_connection, queue.Owner("uid-1", "ns", "job"), ["https://e.test/"], **options
        )
    cursor = await async_connection.execute("SELECT count(*) FROM scraping_jobs")
    assert await cursor.fetchone() == (0,)


async def test_the_shared_payload_goes_to_every_row_without_one_of_its_own(
    async_connection: Connection,
) -> None:
    shared = {"render": True, "waitFor": "h1", "extract": {"title": "h1"}}
    own = {"render": False}
    await queue.enqueue_many(
        async_connection,
        ["https://e.test/a", queue.NewJob("https://e.test/b", payload=own), "https://e.test/c"],
        payload=shared,
    )
    await queue.enqueue_many(async_connection, ["https://e.test/d"])
    cursor = await async_connection.execute(
        "SELECT url_to_scrape, payload FROM scraping_jobs ORDER BY id"
    )
    assert await cursor.fetchall() == [
        ("https://e.test/a", shared),
        ("https://e.test/b", own),
        ("https://e.test/c", shared),
        ("https://e.test/d", {}),
    ]


async def test_row_options_apply_to_every_row_unless_a_new_job_overrides_them(
    async_connection: Connection,
) -> None:
    options: queue.RowOptions = {"queue": "q", "priority": 7, "max_retries": 1}
    await queue.enqueue_many(
        async_connection,
        ["https://e.test/a", queue.NewJob("https://e.test/b", priority=9)],
        **options,
    )
    cursor = await async_connection.execute(
        "SELECT url_to_scrape, queue, priority, max_retries FROM scraping_jobs ORDER BY id"
    )
    assert await cursor.fetchall() == [
        ("https://e.test/a", "q", 7, 1),
        ("https://e.test/b", "q", 9, 1),
    ]
