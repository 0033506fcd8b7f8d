"""Read-only views of the queue for the operator and for people: progress, backlog, stats.

None of these counts the whole history: pending and in-flight rows are counted through partial
indexes (bounded by the live backlog), owners through the owner index, and finished totals come
from scrapeq_queue_counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from scrapeq_queue import statements
from scrapeq_queue.errors import translate_database_errors
from scrapeq_queue.politeness import (
    DEFAULT_DELAY_SECONDS,
    DEFAULT_MAX_CONCURRENT_PER_SITE,
    SERVER_ERROR_WINDOW_MAX_AGE_SECONDS,
)
from scrapeq_queue.rows import (
    AttemptRecord,
    FailedJob,
    Owner,
    OwnerProgress,
    QueueBacklog,
    QueueStats,
    ResultPreview,
    SiteState,
)


@translate_database_errors
async def owner_progress(
    connection: psycopg.AsyncConnection[Any],
    owner_uids: Sequence[str],
    *,
    preview_limit: int = 3,
) -> dict[str, OwnerProgress]:
    """Progress of each owner (ScrapeJob uid); an owner without rows gets all-zero progress.

    Runs in one REPEATABLE READ transaction so counts, last error and previews agree.
    """
    uids = list(dict.fromkeys(owner_uids))
    if not uids:
        return {}
    params = {"owner_uids": uids, "limit": preview_limit}
    async with connection.transaction():
        await connection.execute(statements.REPEATABLE_READ)
        counts = await (
            await connection.execute(statements.OWNER_PROGRESS_COUNTS, params)
        ).fetchall()
        errors = await (await connection.execute(statements.OWNER_LAST_ERRORS, params)).fetchall()
        previews: list[Any] = []
        if preview_limit > 0:
            cursor = await connection.execute(statements.OWNER_RESULT_PREVIEWS, params)
            previews = await cursor.fetchall()
    last_errors = {row[0]: (row[1], row[2]) for row in errors}
    preview_rows: dict[str, list[ResultPreview]] = {}
    for row in previews:
        preview_rows.setdefault(row[0], []).append(
            ResultPreview(job_id=row[1], url=row[2], result=row[3], finished_at=row[4])
        )
    progress = {uid: OwnerProgress() for uid in uids}
    for row in counts:
        uid = row[0]
        error, error_url = last_errors.get(uid, (None, None))
        progress[uid] = OwnerProgress(
            total=row[1],
            pending=row[2],
            retrying=row[3],
            processing=row[4],
            succeeded=row[5],
            failed=row[6],
            cancelled=row[7],
            first_started_at=row[8],
            last_finished_at=row[9],
            changed=row[10],
            unchanged=row[11],
            without_validators=row[12],
            skipped=row[13],
            blocked=int(row[14]),
            expanding=row[15],
            last_error=error,
            last_error_url=error_url,
            preview=tuple(preview_rows.get(uid, ())),
        )
    return progress


@translate_database_errors
async def database_now(connection: psycopg.AsyncConnection[Any]) -> datetime:
    """The database server's current time, the clock updated_at is written with."""
    cursor = await connection.execute(statements.DATABASE_NOW)
    row = await cursor.fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


@translate_database_errors
async def owners_changed_since(
    connection: psycopg.AsyncConnection[Any], since: datetime
) -> list[Owner]:
    """Owners with at least one row changed after `since` (database clock).

    updated_at is the start time of the writing transaction, and a transaction may commit a
    moment after it started: pass `since` = (database_now() taken before the previous call)
    minus a few seconds of overlap, and expect an owner to be reported more than once.
    """
    cursor = await connection.execute(statements.OWNERS_CHANGED_SINCE, {"since": since})
    return [Owner(uid=row[0], namespace=row[1], name=row[2]) for row in await cursor.fetchall()]


@translate_database_errors
async def queue_backlog(
    connection: psycopg.AsyncConnection[Any], queues: Sequence[str]
) -> dict[str, QueueBacklog]:
    """Due, delayed and in-flight rows of each queue, and the age of its oldest due row."""
    if not queues:
        return {}
    cursor = await connection.execute(statements.QUEUE_BACKLOG, {"queues": list(queues)})
    return {
        row[0]: QueueBacklog(
            due_pending=row[1],
            delayed_pending=row[2],
            processing=row[3],
            oldest_due_age_seconds=None if row[4] is None else float(row[4]),
        )
        for row in await cursor.fetchall()
    }


@translate_database_errors
async def live_queue_backlog(
    connection: psycopg.AsyncConnection[Any],
    *,
    default_max_per_site: int = DEFAULT_MAX_CONCURRENT_PER_SITE,
) -> dict[str, QueueBacklog]:
    """The backlog of every queue that has pending or in-flight rows, whoever serves it (the
    operator reports queues that no worker pool serves), with the due rows per-site politeness
    lets start now (`default_max_per_site`: the limit of hosts whose rows set none, as the
    worker pools' default). Counted through the partial indexes on pending and processing rows,
    so bounded by the live backlog, not the history."""
    pending = await (await connection.execute(statements.QUEUE_PENDING_STATS)).fetchall()
    processing = await (await connection.execute(statements.QUEUE_PROCESSING_STATS)).fetchall()
    startable = await startable_due(
        connection, default_max_per_site=default_max_per_site, default_delay_seconds=0.0
    )
    in_flight = {queue: count for queue, count in processing}
    backlog = {
        queue: QueueBacklog(
            due_pending=due,
            delayed_pending=delayed,
            processing=in_flight.pop(queue, 0),
            oldest_due_age_seconds=None if oldest is None else float(oldest),
            startable_due=startable.get(queue, 0),
        )
        for queue, due, delayed, oldest in pending
    }
    for queue, count in in_flight.items():
        backlog[queue] = QueueBacklog(0, 0, count, None, startable_due=0)
    return backlog


@translate_database_errors
async def startable_due(
    connection: psycopg.AsyncConnection[Any],
    *,
    default_max_per_site: int,
    default_delay_seconds: float = DEFAULT_DELAY_SECONDS,
) -> dict[str, int]:
    """Per queue with due rows, how many of them per-site politeness lets start now, for a
    worker pool whose defaults (for hosts whose producers set none) are `default_max_per_site`
    and `default_delay_seconds`: each host's due rows up to the limit a claim applies
    (scrapeq_host_limit: 1 while it has a delay) less its rows in flight, none of a paused
    host. As many as the pool's claims would hand out, a host inside its delay counted."""
    cursor = await connection.execute(
        statements.QUEUE_STARTABLE_DUE,
        {
            "default_limit": default_max_per_site,
            "default_delay_seconds": float(default_delay_seconds),
        },
    )
    return {queue: int(count) for queue, count in await cursor.fetchall()}


@translate_database_errors
async def busy_workers(connection: psycopg.AsyncConnection[Any], queue: str) -> dict[str, int]:
    """In-flight jobs of one queue per worker id (the pod name workers claim with)."""
    cursor = await connection.execute(statements.QUEUE_BUSY_WORKERS, {"queue": queue})
    return {row[0]: row[1] for row in await cursor.fetchall()}


@translate_database_errors
async def queue_stats(connection: psycopg.AsyncConnection[Any]) -> list[QueueStats]:
    """Per queue: due/delayed pending, processing, oldest due age, and finished totals ever.

    Queues appear once they have had any row pending, in flight or finished; sorted by name.
    """
    pending = await (await connection.execute(statements.QUEUE_PENDING_STATS)).fetchall()
    processing = await (await connection.execute(statements.QUEUE_PROCESSING_STATS)).fetchall()
    finished = await (await connection.execute(statements.QUEUE_FINISHED_TOTALS)).fetchall()
    fields: dict[str, dict[str, Any]] = {}
    for queue, due, delayed, oldest in pending:
        fields.setdefault(queue, {}).update(
            due_pending=due,
            delayed_pending=delayed,
            oldest_due_age_seconds=None if oldest is None else float(oldest),
        )
    for queue, count in processing:
        fields.setdefault(queue, {})["processing"] = count
    for queue, outcome, total in finished:
        fields.setdefault(queue, {})[f"{outcome}_total"] = total
    return [QueueStats(queue=queue, **values) for queue, values in sorted(fields.items())]


@translate_database_errors
async def latest_failures(
    connection: psycopg.AsyncConnection[Any], *, limit: int = 10
) -> list[FailedJob]:
    """The most recent permanently failed rows, newest first."""
    cursor = await connection.execute(statements.JOBS_LATEST_FAILURES, {"limit": limit})
    return [FailedJob.from_row(row) for row in await cursor.fetchall()]


@translate_database_errors
async def job_attempts(
    connection: psycopg.AsyncConnection[Any], job_id: int
) -> list[AttemptRecord]:
    """Every attempt of one job, oldest first: who ran it, when, how long, how it ended."""
    cursor = await connection.execute(statements.JOB_ATTEMPTS, {"id": job_id})
    return [AttemptRecord(*row) for row in await cursor.fetchall()]


@translate_database_errors
async def site_states(
    connection: psycopg.AsyncConnection[Any], host_keys: Sequence[str]
) -> dict[str, SiteState]:
    """The politeness state of the given sites (their host keys, hosts.host_key_of); a site no
    row ever named is missing from the answer."""
    cursor = await connection.execute(
        statements.HOST_STATES,
        {
            "host_keys": list(host_keys),
            "window_max_age_seconds": SERVER_ERROR_WINDOW_MAX_AGE_SECONDS,
        },
    )
    return {row[0]: SiteState(*row) for row in await cursor.fetchall()}
