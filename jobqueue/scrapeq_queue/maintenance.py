"""Retention: deleting finished rows so the hot table stays small, and the state of hosts idle
for long."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import InvalidJob, translate_database_errors

# Rows deleted per transaction: keeps each delete short so it never holds back vacuum or
# blocks claims for long.
PRUNE_BATCH_ROWS: Final = 5_000


@translate_database_errors
async def prune_finished(
    connection: psycopg.AsyncConnection[Any],
    *,
    completed_older_than: timedelta,
    keep_failed: timedelta | None = None,
    keep_failed_last: int | None = None,
    batch_rows: int = PRUNE_BATCH_ROWS,
) -> int:
    """Delete finished rows past their retention (with their attempts); return how many.

    The rules are docs/queue.md's "Retention". A row whose result a sink still waits for
    (`undelivered`) is never deleted. A row with its own `retain_for` goes that long after it
    finished, in any final state, and the limits here do not apply to it. The limits apply to
    the other rows of ScrapeJobs (rows with an owner): completed and cancelled rows go when
    finished more than `completed_older_than` ago; failed rows are kept for inspection: forever
    when both limits are None; otherwise a failed row goes when it finished more than
    `keep_failed` ago, or when it is not among the newest `keep_failed_last` such failed rows of
    its queue (a dead-letter queue of bounded length; 0 keeps none). Rows without an owner and
    without `retain_for` (a SQL producer's) are never deleted. Rows that fail while the prune
    runs are newer than every row it deletes, so at least the newest `keep_failed_last` per
    queue always remain. Followed children of a deleted row
    keep their depth and lose parent_id. Every delete is a batch of at most `batch_rows` rows in
    its own short transaction.
    """
    if keep_failed_last is not None and keep_failed_last < 0:
        raise InvalidJob(f"keep_failed_last must be 0 or more, not {keep_failed_last}")
    if batch_rows < 1:
        raise InvalidJob(f"batch_rows must be at least 1, not {batch_rows}")
    now_row = await (await connection.execute(statements.DATABASE_NOW)).fetchone()
    assert now_row is not None
    now = now_row[0]
    deleted = await _delete_in_batches(
        connection,
        statements.JOBS_PRUNE_BATCH,
        {
            "now": now,
            "completed_before": now - completed_older_than,
            "failed_before": None if keep_failed is None else now - keep_failed,
        },
        batch_rows,
    )
    if keep_failed_last is None:
        return deleted
    cursor = await connection.execute(
        statements.JOBS_FAILED_RETENTION_CUTOFFS, {"keep": keep_failed_last}
    )
    cutoffs = await cursor.fetchall()
    if not cutoffs:
        return deleted
    return deleted + await _delete_in_batches(
        connection,
        statements.JOBS_PRUNE_FAILED_BEYOND_BATCH,
        {
            "queues": [queue for queue, _, _ in cutoffs],
            "finished_ats": [finished_at for _, finished_at, _ in cutoffs],
            "ids": [job_id for _, _, job_id in cutoffs],
        },
        batch_rows,
    )


@translate_database_errors
async def prune_idle_sites(
    connection: psycopg.AsyncConnection[Any],
    *,
    idle_longer_than: timedelta,
    batch_rows: int = PRUNE_BATCH_ROWS,
) -> int:
    """Delete the politeness state of sites idle for longer than `idle_longer_than`; return how
    many sites went (scrapeq_hosts is keyed by site).

    A site is idle when no claim took its rows for that long, it has no pending row and no
    attempt in flight, and no delay or pause of it is still running. What goes is its
    scrapeq_hosts row (limits producers gave, robots.txt's Crawl-delay, server-error count) and
    its scrapeq_host_queues rows; the next rows of the host bring its limits back, and the next
    robots.txt fetch its Crawl-delay (a worker keeps robots.txt ROBOTS_TTL_SECONDS, one day, so
    keep `idle_longer_than` above that). Each batch is one short transaction that locks the
    hosts it deletes with SKIP LOCKED: claims, retries and producers of other hosts go on, and a
    producer making rows of a host pending meanwhile keeps that host. The cluster's copies of
    robots.txt (scrapeq_robots) that expired longer than `idle_longer_than` ago go too, and so
    do the sessions nobody took for that long, the proxies left without a session and a
    proxy's failures on a site from before the cutoff (none of these is counted).
    """
    if idle_longer_than <= timedelta(0):
        raise InvalidJob(f"idle_longer_than must be positive, not {idle_longer_than}")
    if batch_rows < 1:
        raise InvalidJob(f"batch_rows must be at least 1, not {batch_rows}")
    now_row = await (await connection.execute(statements.DATABASE_NOW)).fetchone()
    assert now_row is not None
    idle_before = now_row[0] - idle_longer_than
    await _delete_in_batches(
        connection, statements.ROBOTS_PRUNE_BATCH, {"expired_before": idle_before}, batch_rows
    )
    for statement in (statements.SESSIONS_PRUNE_BATCH, statements.PROXIES_PRUNE_BATCH):
        await _delete_in_batches(connection, statement, {"expired_before": idle_before}, batch_rows)
    deleted = 0
    from_host = ""  # the smallest text: every host, the empty host key of URLs without one too
    first = True
    while True:
        async with connection.transaction():
            cursor = await connection.execute(
                statements.HOSTS_IDLE_LOCK,
                {
                    "from_host": from_host,
                    "first": first,
                    "idle_before": idle_before,
                    "batch": batch_rows,
                },
            )
            host_keys = [row[0] for row in await cursor.fetchall()]
            if not host_keys:
                return deleted
            cursor = await connection.execute(
                statements.HOSTS_IDLE_DELETE,
                {"host_keys": host_keys, "idle_before": idle_before},
            )
            row = await cursor.fetchone()
            deleted += int(row[0]) if row else 0
        if len(host_keys) < batch_rows:
            return deleted
        from_host, first = host_keys[-1], False


async def _delete_in_batches(
    connection: psycopg.AsyncConnection[Any],
    statement: str,
    params: dict[str, Any],
    batch_rows: int,
) -> int:
    """Run a batched delete (autocommit: one transaction each) until a batch comes up short."""
    deleted = 0
    while True:
        cursor = await connection.execute(statement, {**params, "batch": batch_rows})
        row = await cursor.fetchone()
        batch = int(row[0]) if row else 0
        deleted += batch
        if batch < batch_rows:
            return deleted
