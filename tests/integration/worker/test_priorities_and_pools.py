"""Priorities and worker pools, proved with real `scrapeq worker` processes on a real PostgreSQL.

Every page is a `render: false` page of the loopback test site, so these tests exercise the
claim path (the queue's one-statement SKIP LOCKED claim and the worker's prefetch), not the
browser.

What the worker prefetches (worker/scrapeq_worker/worker.py): it holds at most
`concurrency + batch_size` jobs — `concurrency` pages in flight plus one claimed batch waiting
for a page slot — and, once at least `batch_size` of those places are free, claims all of them
in one statement (at most `concurrency + batch_size` rows), one statement at a time on its own
claim connection. The tests pin both numbers on the command line (CONCURRENCY, BATCH_SIZE) so
the bounds below are the ones being run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

import pytest
import scrapeq_queue as queue

from tests.waiting import eventually

from .conftest import Connection
from .site import ALLOW_SITE, HostileSite

pytestmark = [pytest.mark.postgres]

REPOSITORY = Path(__file__).resolve().parents[3]

CONCURRENCY: Final = 8
BATCH_SIZE: Final = 4
LOW: Final = 0
HIGH: Final = 100
# Static pages answer in about a millisecond: the worker claims as often as it ever will, the
# hardest case for "the next claim takes the high-priority row".
FLOOD_PAGES: Final = 2000
# Slow pages for the pool tests: 3,000 pages of 200 ms at 8 at a time is over a minute of
# work, so the bulk queue is still far from empty whenever the tests look.
BULK_PAGES: Final = 3000
BULK_PAGE_MS: Final = 200
# The urgent pool's promise: an idle pool answers a new row within a few seconds, whatever
# the other queue's backlog (measured: tens of milliseconds).
URGENT_DEADLINE_SECONDS: Final = 5.0


# --- a real worker process --------------------------------------------------------------------


@contextlib.asynccontextmanager
async def scrapeq_worker(
    database_url: str,
    log_path: Path,
    *arguments: str,
    allow_networks: str = ALLOW_SITE,
    max_concurrent_per_site: int | None = 1000,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Run `scrapeq worker <arguments>` (allowed to reach only `allow_networks`) until the
    block ends, then SIGTERM it (it drains and releases what it holds) and wait for it to exit.

    Every row of these priority tests lives on the one test site, and they test claim order,
    not politeness: the pool's per-site limit is lifted unless `max_concurrent_per_site` says
    otherwise (None: the worker's default). Its log goes to `log_path`: a pipe nobody reads
    would fill up and stall the worker.
    """
    environment = {
        **os.environ,
        "DATABASE_URL": database_url,
        "SCRAPEQ_ALLOW_NETWORKS": allow_networks,
    }
    if max_concurrent_per_site is not None:
        environment["SCRAPEQ_MAX_CONCURRENT_PER_SITE"] = str(max_concurrent_per_site)
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "scrapeq", "worker",
            "--concurrency", str(CONCURRENCY), "--batch-size", str(BATCH_SIZE),
            "--metrics-port", "0", "--poll-seconds", "0.5", "--drain-seconds", "5",
            *arguments,
            cwd=REPOSITORY, env=environment, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()


def log_tail(log_path: Path, lines: int = 30) -> str:
    """The end of a worker's log, for assertion messages."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


# --- reading what the queue recorded -----------------------------------------------------------
# Read-only SQL over the documented tables: an attempt's start is `scrapeq_attempts.started_at`
# once it finished, or the row's `processing_started_at` while it is in flight — both are the
# claim statement's now().

CLAIMS_OF_PRIORITY_BETWEEN: Final = """
WITH claims AS (
    SELECT job_id, started_at FROM scrapeq_attempts
    UNION ALL
    SELECT id, processing_started_at FROM scraping_jobs WHERE status = 'processing'
)
SELECT count(*), count(DISTINCT claims.started_at)
FROM claims JOIN scraping_jobs AS jobs ON jobs.id = claims.job_id
WHERE jobs.priority = %(priority)s
  AND claims.started_at > %(after)s AND claims.started_at < %(before)s
"""

FIRST_CLAIM: Final = """
SELECT coalesce(
    (SELECT started_at FROM scrapeq_attempts WHERE job_id = %(id)s AND attempt = 1),
    (SELECT processing_started_at FROM scraping_jobs
     WHERE id = %(id)s AND status = 'processing' AND attempt = 1))
"""

JOB_TIMES: Final = """
SELECT status::text, created_at, finished_at, processed_by FROM scraping_jobs WHERE id = %(id)s
"""

ROWS_BY_STATUS: Final = """
SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'completed')
FROM scraping_jobs WHERE queue = %(queue)s AND priority = %(priority)s
"""

# The classic producer: the original columns plus the one this test is about.
CLASSIC_INSERT: Final = """
INSERT INTO scraping_jobs (url_to_scrape, parser_type, payload, priority)
VALUES (%(url)s, 'page', '{"render": false}', %(priority)s)
RETURNING id
"""


@dataclass(frozen=True)
class JobTimes:
    status: str
    created_at: datetime
    finished_at: datetime | None
    processed_by: str | None


async def job_times(connection: Connection, job_id: int) -> JobTimes:
    row = await (await connection.execute(JOB_TIMES, {"id": job_id})).fetchone()
    assert row is not None, f"job {job_id} does not exist"
    return JobTimes(*row)


async def first_claim(connection: Connection, job_id: int) -> datetime | None:
    row = await (await connection.execute(FIRST_CLAIM, {"id": job_id})).fetchone()
    return None if row is None else row[0]


async def claims_between(
    connection: Connection, *, priority: int, after: datetime, before: datetime
) -> tuple[int, int]:
    """(rows, claim statements) of `priority` claimed strictly between `after` and `before`."""
    cursor = await connection.execute(
        CLAIMS_OF_PRIORITY_BETWEEN, {"priority": priority, "after": after, "before": before}
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def rows_by_status(connection: Connection, queue_name: str, priority: int) -> tuple[int, int]:
    """(pending, completed) rows of one queue and priority."""
    cursor = await connection.execute(ROWS_BY_STATUS, {"queue": queue_name, "priority": priority})
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def completed(connection: Connection, job_id: int) -> bool:
    return (await job_times(connection, job_id)).status == "completed"


async def flood(
    connection: Connection, site: HostileSite, *, count: int, queue_name: str, path: str
) -> None:
    """Enqueue `count` low-priority static pages `path.format(n)` on `queue_name`."""
    await queue.enqueue_many(
        connection,
        [site.url(path.format(n)) for n in range(count)],
        payload={"render": False},
        queue=queue_name,
        priority=LOW,
    )


# --- 1. a high-priority row overtakes a flood ---------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("producer", ["enqueue", "classic SQL INSERT"])
async def test_a_high_priority_job_overtakes_a_flood_of_low_priority_jobs_within_one_batch(
    producer: Literal["enqueue", "classic SQL INSERT"],
    site: HostileSite,
    database_url: str,
    connection: Connection,
    tmp_path: Path,
) -> None:
    """A priority-100 row inserted while a worker churns through 2,000 priority-0 rows is
    claimed by the worker's next claim that can see it.

    The bounds, for a worker with concurrency C = 8 and batch size B = 4:

    * Claims are one statement at a time on one connection, each taking the best rows by
      `priority DESC, run_at, id`. A claim whose transaction began after the INSERT committed
      sees the row and takes it first, so **no** low-priority row is claimed after the commit
      and before the high-priority row (asserted exactly, with a clock read just after the
      commit returned).
    * Only a claim that was already running while the INSERT committed can miss it. Measured
      from the row's `created_at` (its INSERT's start), at most **one claim statement** — at
      most C + B = 12 rows — of low-priority rows is claimed before it: the test cluster
      commits without waiting for a disk flush, so the INSERT's commit is shorter than a
      claim's round trip (on a slow-disk server two claims could overlap a long commit).
    * Claiming is not rendering: the row then waits behind the jobs the worker already holds,
      at most C + B - 1 = 11 (C pages in flight, the rest of one batch waiting for a slot).
      With that missed claim and the pages that start with it and overtake it on the network
      (fewer than C), at most 2C + 2B - 1 = 23 low-priority pages are *requested* from the
      site after the INSERT and before the high-priority page — out of a backlog of
      thousands, which is also asserted.
    """
    await flood(connection, site, count=FLOOD_PAGES, queue_name="default", path="/static/{}")
    log_path = tmp_path / "worker.log"
    async with scrapeq_worker(database_url, log_path, "--worker-id", "flooded") as process:

        async def flood_under_way() -> bool:
            return (await rows_by_status(connection, "default", LOW))[1] >= 200

        await eventually(
            flood_under_way, within=60, what="the worker to complete 200 low-priority rows"
        )
        requested_before = len(site.hits)
        high_url = site.url(f"/static/{FLOOD_PAGES + 1_000_000}")
        if producer == "enqueue":
            high_id = await queue.enqueue(
                connection, high_url, payload={"render": False}, priority=HIGH
            )
        else:
            cursor = await connection.execute(CLASSIC_INSERT, {"url": high_url, "priority": HIGH})
            row = await cursor.fetchone()
            high_id = None if row is None else row[0]
        assert high_id is not None
        committed_by = await queue.database_now(connection)
        await eventually(
            lambda: completed(connection, high_id),
            within=10,
            what="the high-priority job to complete",
        )
        backlog_then, _ = await rows_by_status(connection, "default", LOW)
        assert process.returncode is None, log_tail(log_path)

    high = await job_times(connection, high_id)
    high_claimed = await first_claim(connection, high_id)
    assert high_claimed is not None
    assert high.processed_by == "flooded"
    after_commit, _ = await claims_between(
        connection, priority=LOW, after=committed_by, before=high_claimed
    )
    after_insert, statements = await claims_between(
        connection, priority=LOW, after=high.created_at, before=high_claimed
    )
    hit_order = list(site.hits)
    high_position = hit_order.index(f"/static/{FLOOD_PAGES + 1_000_000}")
    requested_first = high_position - requested_before
    assert high.finished_at is not None
    claimed_ms = (high_claimed - high.created_at).total_seconds() * 1000
    completed_ms = (high.finished_at - high.created_at).total_seconds() * 1000
    print(
        f"[{producer}] low-priority rows claimed after the INSERT began: {after_insert} "
        f"({statements} claim statement(s)); after it committed: {after_commit}; "
        f"low-priority pages requested before it: {requested_first}; "
        f"INSERT -> claimed {claimed_ms:.1f} ms, -> completed {completed_ms:.1f} ms; "
        f"low-priority backlog then: {backlog_then}"
    )
    assert after_commit == 0
    assert statements <= 1
    assert after_insert <= CONCURRENCY + BATCH_SIZE
    assert requested_first <= 2 * CONCURRENCY + 2 * BATCH_SIZE - 1
    assert backlog_then >= 10 * (CONCURRENCY + BATCH_SIZE), "the flood was over too soon"


# --- 2. pools: a busy queue does not starve another pool ------------------------------------


@pytest.mark.timeout(120)
async def test_a_flooded_queue_does_not_starve_the_pool_of_another_queue(
    site: HostileSite, database_url: str, connection: Connection, tmp_path: Path
) -> None:
    """Two pools (one worker process each): `bulk` drowning in 3,000 slow pages, `urgent`
    idle. A job on `urgent` — at the same priority as the flood — completes within a few
    seconds while `bulk` still has thousands of rows waiting."""
    await flood(
        connection,
        site,
        count=BULK_PAGES,
        queue_name="bulk",
        path="/slow/{}?ms=" + str(BULK_PAGE_MS),
    )
    async with contextlib.AsyncExitStack() as workers:
        bulk_log, urgent_log = tmp_path / "bulk.log", tmp_path / "urgent.log"
        bulk = await workers.enter_async_context(
            scrapeq_worker(database_url, bulk_log, "--queue", "bulk", "--worker-id", "bulk-pool")
        )
        urgent = await workers.enter_async_context(
            scrapeq_worker(
                database_url, urgent_log, "--queue", "urgent", "--worker-id", "urgent-pool"
            )
        )

        async def bulk_pool_busy() -> bool:
            backlog = (await queue.queue_backlog(connection, ["bulk"]))["bulk"]
            return backlog.processing >= CONCURRENCY and site.slow_in_flight >= CONCURRENCY // 2

        await eventually(bulk_pool_busy, within=60, what="the bulk pool to be busy", every=0.1)
        # The urgent worker started with the bulk one; give it the same chance to be up
        # (its /readyz is off here): a first row it must answer proves it listens.
        warm_up = await queue.enqueue(
            connection, site.url("/static/1"), payload={"render": False}, queue="urgent"
        )
        assert warm_up is not None
        await eventually(
            lambda: completed(connection, warm_up), within=60, what="the urgent pool to start"
        )

        urgent_id = await queue.enqueue(
            connection, site.url("/static/2"), payload={"render": False}, queue="urgent"
        )
        assert urgent_id is not None
        await eventually(
            lambda: completed(connection, urgent_id),
            within=URGENT_DEADLINE_SECONDS,
            what=f"the urgent job to complete\n{log_tail(urgent_log)}",
        )
        bulk_backlog = (await queue.queue_backlog(connection, ["bulk"]))["bulk"]
        assert bulk.returncode is None, log_tail(bulk_log)
        assert urgent.returncode is None, log_tail(urgent_log)

    times = await job_times(connection, urgent_id)
    assert times.finished_at is not None
    assert times.processed_by == "urgent-pool"
    latency = (times.finished_at - times.created_at).total_seconds()
    print(
        f"urgent job completed {latency * 1000:.1f} ms after its INSERT; "
        f"bulk backlog then: {bulk_backlog.due_pending} due, {bulk_backlog.processing} running"
    )
    assert latency < URGENT_DEADLINE_SECONDS
    assert bulk_backlog.due_pending >= BULK_PAGES // 2


@pytest.mark.timeout(120)
async def test_a_worker_serving_several_queues_claims_by_priority_across_them(
    site: HostileSite, database_url: str, connection: Connection, tmp_path: Path
) -> None:
    """One worker serving `bulk` and `urgent` (`--queue bulk --queue urgent`) while `bulk` is
    flooded. Its claim orders the due rows of all its queues together by `priority DESC,
    run_at, id` — the order of the `--queue` flags plays no part (`urgent` is listed last):

    * an `urgent` row of priority 100 is claimed by the next claim after its INSERT committed
      (no `bulk` row claimed in between) and completes within a few seconds;
    * an `urgent` row of the flood's priority (0) gets no head start: it waits behind every
      older `bulk` row, so a shared pool gives isolation only through priority — or use a
      pool per queue (the test above).
    """
    await flood(
        connection,
        site,
        count=BULK_PAGES,
        queue_name="bulk",
        path="/slow/{}?ms=" + str(BULK_PAGE_MS),
    )
    log_path = tmp_path / "shared.log"
    async with scrapeq_worker(
        database_url, log_path, "--queue", "bulk", "--queue", "urgent", "--worker-id", "shared"
    ) as process:

        async def worker_busy() -> bool:
            backlog = (await queue.queue_backlog(connection, ["bulk"]))["bulk"]
            return backlog.processing >= CONCURRENCY

        await eventually(worker_busy, within=60, what="the shared worker to be busy", every=0.1)
        same_priority = await queue.enqueue(
            connection, site.url("/static/1"), payload={"render": False}, queue="urgent"
        )
        high_id = await queue.enqueue(
            connection,
            site.url("/static/2"),
            payload={"render": False},
            queue="urgent",
            priority=HIGH,
        )
        assert same_priority is not None
        assert high_id is not None
        committed_by = await queue.database_now(connection)
        await eventually(
            lambda: completed(connection, high_id),
            within=URGENT_DEADLINE_SECONDS,
            what=f"the high-priority urgent job to complete\n{log_tail(log_path)}",
        )
        same_priority_then = await job_times(connection, same_priority)
        bulk_backlog = (await queue.queue_backlog(connection, ["bulk"]))["bulk"]
        assert process.returncode is None, log_tail(log_path)

    high = await job_times(connection, high_id)
    high_claimed = await first_claim(connection, high_id)
    assert high_claimed is not None
    assert high.finished_at is not None
    bulk_after_commit, _ = await claims_between(
        connection, priority=LOW, after=committed_by, before=high_claimed
    )
    latency = (high.finished_at - high.created_at).total_seconds()
    print(
        f"shared worker: priority-100 urgent job completed {latency * 1000:.1f} ms after its "
        f"INSERT; priority-0 urgent job still {same_priority_then.status}; bulk backlog "
        f"{bulk_backlog.due_pending} due"
    )
    assert bulk_after_commit == 0
    assert latency < URGENT_DEADLINE_SECONDS
    # Older bulk rows of equal priority come first: thousands are still due, so the
    # same-priority urgent row has not been claimed.
    assert bulk_backlog.due_pending >= BULK_PAGES // 2
    assert same_priority_then.status == "pending"
